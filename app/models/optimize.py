"""POST /v1/optimize: the throughput optimizer."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from app.core import limits
from app.core.limits import DEFAULT_MODE, DEFAULT_TOP_K, Mode, Role
from app.core.optimizer import DEFAULT_MAX_BATCH_SIZE
from app.core.optimizer.disagg_search import DEFAULT_MAX_WORKERS, MAX_SEARCH_WORKERS
from app.core.workload import (
    DEFAULT_REQUESTS_PER_CLIENT,
    DEFAULT_WINDOW,
    Window,
    Workload,
)
from app.core.workload.disagg_serving import FirstToken, Pool
from app.models.common import CacheCounters
from app.models.workload import DeploymentMixin, ParallelSize, WorkloadMixin

__all__ = [  # Mode and Role are core's (app.core.limits), re-exported with the wire schemas
    "DisaggOptimizeResponse",
    "DisaggProbeOut",
    "DisaggRowOut",
    "DisaggSearchOut",
    "DisaggWorkersOut",
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


def _is_none(value: object) -> bool:
    return value is None


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
        default=None,
        strict=True,
        ge=1,
        le=limits.MAX_NUM_DEVICES,
        description="pd_ratio: devices of one prefill instance; disagg: the fixed size of a "
        "prefill worker (default: every power of two that leaves room for a decode worker)",
    )
    decode_devices_per_instance: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=limits.MAX_NUM_DEVICES,
        description="pd_ratio: devices of one decode instance; disagg: the fixed size of a "
        "decode worker",
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
    max_workers: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=MAX_SEARCH_WORKERS,
        exclude_if=_is_none,  # the other modes' echo reads as before
        description=f"mode disagg: most workers per pool the search places (default "
        f"{DEFAULT_MAX_WORKERS}); omitted for the other modes",
        examples=[None],
    )


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


# -- mode disagg ---------------------------------------------------------------------------------
#: What the closed loop measured of a pool (the disaggregated simulate's pools say the same).
POOL_UTILISATION = "busy share of the pool's units over the makespan"
POOL_WAIT = (
    "mean wait of a request: prefill, for a prefill unit; decode, for a decode slot once its "
    "KV arrived"
)


class DisaggWorkersOut(BaseModel):
    """One pool of a searched deployment: its workers, one worker's layout, how busy it ran."""

    workers: int
    tp_size: int
    dp_size: int = Field(description="attention data-parallel ranks per worker")
    ep_size: int
    parallel: str = Field(description="one worker's layout")
    devices_per_worker: int
    devices: int = Field(description="workers x devices_per_worker")
    utilisation: float = Field(description=POOL_UTILISATION)
    wait_ms: float = Field(description=POOL_WAIT)


class DisaggRowOut(BaseModel):
    """A deployment at its highest closed-loop concurrency within the limits."""

    prefill: DisaggWorkersOut
    decode: DisaggWorkersOut
    num_devices: int = Field(description="prefill devices + decode devices")
    pd_split: str = Field(description="prefill:decode workers and devices, '2P:1D (8:8 devices)'")
    binding_pool: Pool = Field(
        description="the pool requests queue for longer (without queueing, the busier one)"
    )
    concurrency: int = Field(description="closed-loop clients over the whole deployment")
    ttft_ms: float
    tpot_ms: float
    e2e_ms: float
    transfer_ms: float = Field(description="mean KV transfer time of a request")
    output_throughput: float = Field(description="output tokens/s of the deployment")
    throughput_per_device: float = Field(description="output tokens/s per device of both pools")
    request_throughput: float
    copies: int = Field(
        description="1: this deployment was simulated whole; k > 1: it is k copies of the "
        "simulated one (k times its clients and throughput, the same TTFT, TPOT and tokens/s "
        "per device)"
    )


class DisaggProbeOut(BaseModel):
    """One simulated (deployment, concurrency) point of the search."""

    pd_split: str
    prefill_parallel: str
    decode_parallel: str
    concurrency: int
    feasible: bool
    reason: str | None
    ttft_ms: float
    tpot_ms: float
    output_throughput: float
    throughput_per_device: float


class DisaggSearchOut(BaseModel):
    """What the search looked at and what it simulated."""

    prefill_layouts: int = Field(description="prefill worker layouts the model supports")
    decode_layouts: int
    configurations: int = Field(
        description="layout pairs x worker counts within num_devices (counted, not walked)"
    )
    evaluated: int = Field(description="configurations simulated")
    simulations: int = Field(description="closed-loop simulations run (probes)")


class DisaggOptimizeResponse(BaseModel):
    """``mode: disagg``: the best prefill and decode worker layouts, counts and concurrency."""

    input: OptimizeRequest
    engine: dict[str, Any] = Field(description="the engine profile both pools run under")
    mode: Mode = "disagg"
    best: DisaggRowOut | None = Field(
        description="the highest output tokens/s per device within the limits; null with "
        "reason when nothing is feasible"
    )
    rows: list[DisaggRowOut] = Field(
        description="the configurations the search simulated, ranked by tokens/s per device (top_k)"
    )
    probes: list[DisaggProbeOut]
    infeasible: list[InfeasibleLayout] = Field(
        description="worker layouts no configuration can use, and why"
    )
    reason: str | None = Field(default=None, description="why nothing is feasible")
    ttft_limit_given: bool = Field(
        description="false: no TTFT limit, so concurrency grows until the pools are full"
    )
    notice: str | None = Field(
        default=None, description="what the answer cannot promise (a missing TTFT limit)"
    )
    first_token: FirstToken = Field(description="when the client gets its first token")
    max_batched_tokens: int
    effective_input_length: int
    prefill_num_chunks: int
    search: DisaggSearchOut
    stats: RunStats
