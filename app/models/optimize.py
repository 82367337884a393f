"""POST /v1/optimize: the throughput optimizer."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from app.core import limits
from app.core.limits import DEFAULT_MODE, DEFAULT_TOP_K, Mode, Role
from app.core.optimizer import DEFAULT_MAX_BATCH_SIZE
from app.core.workload import (
    DEFAULT_REQUESTS_PER_CLIENT,
    DEFAULT_WINDOW,
    Window,
    Workload,
)
from app.models.common import CacheCounters
from app.models.workload import DeploymentMixin, ParallelSize, WorkloadMixin

__all__ = [  # Mode and Role are core's (app.core.limits), re-exported with the wire schemas
    "InfeasibleLayout",
    "InstanceSplitOut",
    "Mode",
    "OptimizeRequest",
    "OptimizeResponse",
    "ParallelSize",
    "PdRatioOut",
    "ProbeOut",
    "ResultRowOut",
    "Role",
    "RunStats",
]


class OptimizeRequest(DeploymentMixin, WorkloadMixin):
    """Field names follow the CLI flags (``--ttft-limit`` -> ``ttft_limit_ms``)."""

    num_devices: int = Field(strict=True, ge=1, le=limits.MAX_NUM_DEVICES, examples=[8])
    ttft_limit_ms: float | None = Field(default=None, gt=0, examples=[None])
    tpot_limit_ms: float | None = Field(default=None, gt=0, examples=[50.0])
    mode: Mode = Field(
        default=DEFAULT_MODE,
        description="agg: prefill and decode share instances; disagg_prefill / disagg_decode: "
        "one side of a PD-separated deployment; pd_ratio: both sides and their instance split",
    )
    tp_sizes: list[ParallelSize] | None = Field(
        default=None,
        min_length=1,
        max_length=limits.MAX_SEARCH_LIST,
        description="TP sizes to search (default: powers of two dividing the devices)",
        examples=[[1, 2, 4, 8]],
    )
    ep_sizes: list[ParallelSize] | None = Field(
        default=None, min_length=1, max_length=limits.MAX_SEARCH_LIST, description="MoE EP sizes"
    )
    prefill_devices_per_instance: int | None = Field(
        default=None, strict=True, ge=1, le=limits.MAX_NUM_DEVICES, description="pd_ratio only"
    )
    decode_devices_per_instance: int | None = Field(
        default=None, strict=True, ge=1, le=limits.MAX_NUM_DEVICES, description="pd_ratio only"
    )
    serving_overhead_ms: float = Field(
        default=0.0,
        ge=0.0,
        le=limits.MAX_SERVING_OVERHEAD_MS,
        description="fixed TTFT overhead of prefill instances",
    )
    workload: Workload | None = Field(
        default=None,
        description="omitted: the engine profile's (closed_loop in agg mode, else burst; "
        "msmodeling: burst). burst (RFC): batch_size requests at t = 0 per replica; closed_loop: "
        "batch_size clients per replica re-sending (agg mode only)",
    )
    window: Window = Field(default=DEFAULT_WINDOW, description="closed_loop measurement window")
    requests_per_client: int = Field(
        default=DEFAULT_REQUESTS_PER_CLIENT,
        strict=True,
        ge=1,
        le=limits.MAX_REQUESTS_PER_CLIENT,
        description="closed_loop",
    )
    max_batch_size: int = Field(
        default=DEFAULT_MAX_BATCH_SIZE,
        strict=True,
        ge=1,
        le=limits.MAX_SEARCH_BATCH_SIZE,
        description="largest per-replica batch size the concurrency search may probe",
    )
    top_k: int = Field(default=DEFAULT_TOP_K, strict=True, ge=1, le=limits.MAX_TOP_K)
    include_probes: bool = Field(default=True, description="return every probe (for plots)")


class ResultRowOut(BaseModel):
    """A ranked configuration with every RFC field."""

    role: Role
    model: str
    device: str
    quantization: str
    num_devices: int
    input_length: int
    output_length: int
    effective_input_length: int
    max_batched_tokens: int
    prefill_num_chunks: int
    concurrency: int
    batch_size: int
    ttft_ms: float | None
    tpot_ms: float | None
    throughput_tokens_s: float = Field(description="tokens/s of all replicas of the layout")
    throughput_per_device: float = Field(description="token/s/device")
    throughput_kind: str = Field(description="output (agg, decode) or input (prefill) tokens")
    ttft_ms_interval: tuple[float, float] | None = Field(
        default=None, description="TTFT's 80 % prediction interval [low, high] (docs/engine.md)"
    )
    tpot_ms_interval: tuple[float, float] | None = Field(
        default=None, description="TPOT's 80 % prediction interval [low, high]"
    )
    throughput_interval: tuple[float, float] | None = Field(
        default=None, description="throughput_tokens_s's 80 % prediction interval [low, high]"
    )
    request_throughput: float
    parallel: str
    tp: int
    dp: int
    ep: int
    pp: int
    memory_left_gb: float
    memory_gb: dict[str, float]
    method: str


class ProbeOut(BaseModel):
    """One evaluated (layout, batch size) point."""

    role: Role
    parallel: str
    tp: int
    dp: int
    ep: int
    pp: int
    batch_size: int
    concurrency: int
    feasible: bool
    reason: str | None
    ttft_ms: float | None
    tpot_ms: float | None
    throughput_tokens_s: float
    throughput_per_device: float
    request_throughput: float
    memory_left_gb: float
    method: str
    ttft_ms_interval: tuple[float, float] | None = Field(
        default=None, description="TTFT's 80 % prediction interval [low, high] (docs/engine.md)"
    )
    tpot_ms_interval: tuple[float, float] | None = Field(
        default=None, description="TPOT's 80 % prediction interval [low, high]"
    )
    throughput_interval: tuple[float, float] | None = Field(
        default=None, description="throughput_tokens_s's 80 % prediction interval [low, high]"
    )


class ParetoPointOut(BaseModel):
    """A probe on the Pareto front of tokens/s per device against tokens/s per user."""

    role: Role
    parallel: str
    tp: int
    dp: int
    ep: int
    pp: int
    num_devices: int = Field(description="devices of the layout (all its replicas)")
    batch_size: int = Field(description="requests per data-parallel rank")
    concurrency: int = Field(description="requests of the whole layout")
    user_tokens_s: float = Field(description="tokens/s each user receives: 1000 / TPOT")
    throughput_per_device: float = Field(description="token/s/device")
    throughput_tokens_s: float = Field(description="tokens/s of all replicas of the layout")
    ttft_ms: float | None
    tpot_ms: float = Field(description="ms per output token")
    feasible: bool = Field(description="whether the point meets the TTFT/TPOT limits")
    reason: str | None = Field(description="the limit it misses, when not feasible")


class InfeasibleLayout(BaseModel):
    role: Role
    parallel: str
    reason: str


class InstanceSplitOut(BaseModel):
    prefill_instances: int
    decode_instances: int
    devices_used: int
    balanced_qps: float


class PdRatioOut(BaseModel):
    p_qps: float | None
    d_qps: float | None
    pd_ratio: float | None
    split: InstanceSplitOut | None
    prefill_row: ResultRowOut | None
    decode_row: ResultRowOut | None
    output_throughput: float
    throughput_per_device: float
    reason: str | None
    binding_pool: Literal["prefill", "decode"] | None = Field(
        default=None,
        description="the side whose instances cap the balanced QPS (the one to grow); best is "
        "its row",
    )
    pd_split: str | None = Field(
        default=None, description="prefill:decode instances and devices, e.g. '1P:1D (4:8 devices)'"
    )


class RunStats(BaseModel):
    elapsed_ms: float
    forward_evaluations: int = Field(description="forwards computed (cache misses)")
    shapes: int = Field(description="distinct forward shapes the request needed")
    layouts: int = 0
    probes: int = 0
    cache: CacheCounters


class OptimizeResponse(BaseModel):
    input: OptimizeRequest
    engine: dict[str, Any] = Field(
        description="the engine profile used and every value it set (after engine_options)"
    )
    mode: Mode
    best: ResultRowOut | None = Field(
        description="highest throughput configuration (pd_ratio: the binding side's instance "
        "row); null with reason when nothing is feasible or, for the modes that size prefill "
        "instances, when ttft_limit_ms is not given"
    )
    rows: list[ResultRowOut] = Field(description="best row per layout, ranked, top_k")
    probes: list[ProbeOut]
    pareto: list[ParetoPointOut] = Field(
        default_factory=list,
        description="the Pareto front of throughput_per_device against user_tokens_s (1000 / "
        "TPOT) over every evaluated layout and concurrency with a decode step, SLA-infeasible "
        "points included (feasible says which meet the limits), by user_tokens_s ascending; "
        "empty for the prefill search",
    )
    infeasible: list[InfeasibleLayout]
    pd_ratio: PdRatioOut | None = None
    reason: str | None = Field(default=None, description="why nothing is feasible")
    suggestions: list[str] = Field(
        default_factory=list,
        description="ways out of a memory-infeasible answer (quantization, devices, context)",
    )
    calibration: dict[str, Any] | None = Field(
        default=None,
        description="the calibration applied: id, applicable (false: the estimate lies outside "
        "what it was fitted on; reason says why and the intervals are widened), parameters",
    )
    stats: RunStats
