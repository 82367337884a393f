"""POST /v1/optimize: the throughput optimizer."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.core import limits
from app.core.limits import (
    DEFAULT_MAX_WORKERS,
    DEFAULT_MODE,
    DEFAULT_TOP_K,
    MAX_SEARCH_WORKERS,
    FirstToken,
    Mode,
    Pool,
    Role,
)
from app.core.optimizer import DEFAULT_MAX_BATCH_SIZE
from app.core.workload import (
    DEFAULT_REQUESTS_PER_CLIENT,
    DEFAULT_WINDOW,
    Window,
    Workload,
)
from app.models import texts
from app.models.common import CacheCounters
from app.models.workload import DeploymentMixin, ParallelSize, WorkloadMixin

#: The disaggregated search's models build their validators on first use (pydantic's
#: defer_build), not at import: an aggregated optimize (the CLI's start-up) never uses them.
_ON_FIRST_USE = ConfigDict(defer_build=True)

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

    num_devices: int = Field(
        strict=True,
        ge=1,
        le=limits.MAX_NUM_DEVICES,
        description="devices every searched layout uses (pd_ratio: the budget of all prefill "
        "and decode instances)",
        examples=[8],
    )
    ttft_limit_ms: float | None = Field(
        default=None, gt=0, description=texts.TTFT_LIMIT, examples=[None]
    )
    tpot_limit_ms: float | None = Field(
        default=None, gt=0, description=texts.TPOT_LIMIT, examples=[50.0]
    )
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
        default=None,
        min_length=1,
        max_length=limits.MAX_SEARCH_LIST,
        description="MoE expert-parallel sizes to search, each a device count dividing the "
        "devices (default: 1 only)",
    )
    prefill_devices_per_instance: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=limits.MAX_NUM_DEVICES,
        description="pd_ratio: devices of one prefill instance (default: num_devices // 2); "
        "disagg: the fixed size of a prefill worker (default: every power of two that leaves "
        "room for a decode worker)",
    )
    decode_devices_per_instance: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=limits.MAX_NUM_DEVICES,
        description="pd_ratio: devices of one decode instance (default: num_devices // 2); "
        "disagg: the fixed size of a decode worker",
    )
    serving_overhead_ms: float = Field(
        default=0.0,
        ge=0.0,
        le=limits.MAX_SERVING_OVERHEAD_MS,
        description="fixed TTFT overhead of prefill instances, ms",
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
        description=texts.REQUESTS_PER_CLIENT,
    )
    max_batch_size: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=limits.MAX_SEARCH_BATCH_SIZE,
        description="largest per-replica batch size (requests) the concurrency search may probe; "
        f"null or omitted: derived, {DEFAULT_MAX_BATCH_SIZE} shrunk to the simulation bounds "
        "(mode disagg: the closed loop's client bound; the answer's input shows the value used)",
        examples=[None],
    )
    top_k: int = Field(
        default=DEFAULT_TOP_K,
        strict=True,
        ge=1,
        le=limits.MAX_TOP_K,
        description="rows returned: the best layouts by throughput (pd_ratio: every row)",
    )
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

    role: Role = Field(description=texts.ROLE)
    model: str = Field(description=texts.MODEL_NAME)
    device: str = Field(description=texts.DEVICE_NAME)
    quantization: str = Field(
        description="linear and attention quantization, e.g. 'linear=FP8 attention=DISABLED'"
    )
    num_devices: int = Field(description="devices of the layout: tp x dp x pp")
    input_length: int = Field(description="prompt tokens per request")
    output_length: int = Field(description="output tokens per request")
    effective_input_length: int = Field(description=texts.EFFECTIVE_INPUT_LENGTH)
    max_batched_tokens: int = Field(description="token budget of one engine step, tokens")
    prefill_num_chunks: int = Field(description=texts.PREFILL_NUM_CHUNKS)
    concurrency: int = Field(description=texts.CONCURRENCY)
    batch_size: int = Field(description=texts.BATCH_SIZE)
    ttft_ms: float | None = Field(description=texts.ROW_TTFT)
    tpot_ms: float | None = Field(description=texts.ROW_TPOT)
    throughput_tokens_s: float = Field(description=texts.THROUGHPUT_TOKENS_S)
    throughput_per_device: float = Field(description=texts.THROUGHPUT_PER_DEVICE)
    throughput_kind: str = Field(description="output (agg, decode) or input (prefill) tokens")
    ttft_ms_interval: tuple[float, float] | None = Field(
        default=None, description=texts.TTFT_INTERVAL
    )
    tpot_ms_interval: tuple[float, float] | None = Field(
        default=None, description=texts.TPOT_INTERVAL
    )
    throughput_interval: tuple[float, float] | None = Field(
        default=None, description=texts.THROUGHPUT_INTERVAL
    )
    sla_confidence: float | None = Field(default=None, description=texts.SLA_CONFIDENCE)
    request_throughput: float = Field(description=texts.REQUEST_THROUGHPUT)
    parallel: str = Field(description=texts.PARALLEL)
    tp: int = Field(description=texts.TP)
    dp: int = Field(description=texts.DP)
    ep: int = Field(description=texts.EP)
    pp: int = Field(description=texts.PP)
    memory_left_gb: float = Field(description=texts.MEMORY_LEFT)
    memory_gb: dict[str, float] = Field(
        description=f"{texts.MEMORY_PARTS}, at the row's batch size (the decode step; prefill "
        "search: the largest prefill step); empty for pd_ratio's rows"
    )
    method: str = Field(description=texts.METHOD)


class ProbeOut(BaseModel):
    """One evaluated (layout, batch size) point."""

    role: Role = Field(description=texts.ROLE)
    parallel: str = Field(description=texts.PARALLEL)
    tp: int = Field(description=texts.TP)
    dp: int = Field(description=texts.DP)
    ep: int = Field(description=texts.EP)
    pp: int = Field(description=texts.PP)
    batch_size: int = Field(description=texts.BATCH_SIZE)
    concurrency: int = Field(description=texts.CONCURRENCY)
    feasible: bool = Field(description=f"{texts.FEASIBLE} (closed_loop: and the running cap)")
    reason: str | None = Field(
        description="why it is infeasible (memory, a limit, the running cap); null when feasible"
    )
    ttft_ms: float | None = Field(description=texts.ROW_TTFT)
    tpot_ms: float | None = Field(description=texts.ROW_TPOT)
    throughput_tokens_s: float = Field(description=texts.THROUGHPUT_TOKENS_S)
    throughput_per_device: float = Field(description=texts.THROUGHPUT_PER_DEVICE)
    request_throughput: float = Field(description=texts.REQUEST_THROUGHPUT)
    memory_left_gb: float = Field(description=texts.MEMORY_LEFT)
    method: str = Field(description=texts.METHOD)
    ttft_ms_interval: tuple[float, float] | None = Field(
        default=None, description=texts.TTFT_INTERVAL
    )
    tpot_ms_interval: tuple[float, float] | None = Field(
        default=None, description=texts.TPOT_INTERVAL
    )
    throughput_interval: tuple[float, float] | None = Field(
        default=None, description=texts.THROUGHPUT_INTERVAL
    )
    sla_confidence: float | None = Field(default=None, description=texts.SLA_CONFIDENCE)


class ParetoPointOut(BaseModel):
    """A probe on the Pareto front of tokens/s per device against tokens/s per user."""

    role: Role = Field(description=texts.ROLE)
    parallel: str = Field(description=texts.PARALLEL)
    tp: int = Field(description=texts.TP)
    dp: int = Field(description=texts.DP)
    ep: int = Field(description=texts.EP)
    pp: int = Field(description=texts.PP)
    num_devices: int = Field(description="devices of the layout (all its replicas)")
    batch_size: int = Field(description=texts.BATCH_SIZE)
    concurrency: int = Field(description="requests of the whole layout")
    user_tokens_s: float = Field(description="tokens/s each user receives: 1000 / TPOT")
    throughput_per_device: float = Field(description=texts.THROUGHPUT_PER_DEVICE)
    throughput_tokens_s: float = Field(description=texts.THROUGHPUT_TOKENS_S)
    ttft_ms: float | None = Field(description=texts.ROW_TTFT)
    tpot_ms: float = Field(description="ms per output token")
    feasible: bool = Field(description="whether the point meets the TTFT/TPOT limits")
    reason: str | None = Field(description="the limit it misses, when not feasible")


class InfeasibleLayout(BaseModel):
    role: Role = Field(description=texts.ROLE)
    parallel: str = Field(description=texts.PARALLEL)
    reason: str = Field(
        description="why no point of it is feasible (its first probe's reason), or why it "
        "cannot run the model or gave a non-finite number"
    )


class InstanceSplitOut(BaseModel):
    prefill_instances: int = Field(description="prefill instances")
    decode_instances: int = Field(description="decode instances (the fewest that keep up)")
    devices_used: int = Field(description="devices of all instances (at most num_devices)")
    balanced_qps: float = Field(
        description="requests/s the split serves: min(prefill_instances x p_qps, "
        "decode_instances x d_qps)"
    )


#: When a pd_ratio answer has no split: one side found no feasible point.
_NO_SIDE = "null: a side has no feasible point"


class PdRatioOut(BaseModel):
    p_qps: float | None = Field(
        description="requests/s one prefill instance completes at its best feasible point: "
        f"concurrency / TTFT x 1000 ({_NO_SIDE})"
    )
    d_qps: float | None = Field(
        description="requests/s one decode instance completes at its best feasible point: "
        f"concurrency / (TPOT x max(O - 1, 1)) x 1000 ({_NO_SIDE})"
    )
    pd_ratio: float | None = Field(
        description="ratio d_qps / p_qps: prefill instances one decode instance keeps busy "
        f"({_NO_SIDE})"
    )
    split: InstanceSplitOut | None = Field(
        description="the instance counts within num_devices with the most balanced requests/s "
        f"(ties: fewer devices); {_NO_SIDE}, or one instance of each does not fit"
    )
    prefill_row: ResultRowOut | None = Field(
        description=f"the best prefill instance's row ({_NO_SIDE})"
    )
    decode_row: ResultRowOut | None = Field(
        description=f"the best decode instance's row ({_NO_SIDE})"
    )
    output_throughput: float = Field(
        description="output tokens/s of the split: balanced_qps x output_length (0: no split)"
    )
    throughput_per_device: float = Field(
        description="output tokens/s per device used: output_throughput / devices_used"
    )
    reason: str | None = Field(description="why there is no split (null: there is one)")
    binding_pool: Literal["prefill", "decode"] | None = Field(
        default=None,
        description="the side whose instances cap the balanced QPS (the one to grow); best is "
        "its row",
    )
    pd_split: str | None = Field(
        default=None, description="prefill:decode instances and devices, e.g. '1P:1D (4:8 devices)'"
    )


class RunStats(BaseModel):
    elapsed_ms: float = Field(description="wall-clock time the service spent on the request, ms")
    forward_evaluations: int = Field(description="forwards computed (cache misses)")
    shapes: int = Field(description="distinct forward shapes the request needed")
    layouts: int = Field(default=0, description="parallel layouts evaluated")
    probes: int = Field(default=0, description="(layout, batch size) points evaluated")
    cache: CacheCounters = Field(description=texts.CACHE_USE)


class OptimizeResponse(BaseModel):
    input: OptimizeRequest = Field(description=texts.REQUEST_ECHO)
    engine: dict[str, Any] = Field(description=texts.ENGINE_USED)
    mode: Mode = Field(description="the mode searched")
    best: ResultRowOut | None = Field(
        description="highest throughput configuration (pd_ratio: the binding side's instance "
        "row); null with reason when nothing is feasible or, for the modes that size prefill "
        "instances, when ttft_limit_ms is not given"
    )
    rows: list[ResultRowOut] = Field(description="best row per layout, ranked, top_k")
    probes: list[ProbeOut] = Field(
        description="every evaluated point of every layout, in evaluation order (empty "
        "without include_probes)"
    )
    pareto: list[ParetoPointOut] = Field(
        default_factory=list,
        description="the Pareto front of throughput_per_device against user_tokens_s (1000 / "
        "TPOT) over every evaluated layout and concurrency with a decode step, SLA-infeasible "
        "points included (feasible says which meet the limits), by user_tokens_s ascending; "
        "empty for the prefill search",
    )
    infeasible: list[InfeasibleLayout] = Field(
        description="layouts without a feasible point, and why"
    )
    pd_ratio: PdRatioOut | None = Field(
        default=None, description="mode pd_ratio: the instance ratio and split (else null)"
    )
    reason: str | None = Field(default=None, description="why nothing is feasible")
    suggestions: list[str] = Field(
        default_factory=list,
        description=texts.SUGGESTIONS,
    )
    calibration: dict[str, Any] | None = Field(
        default=None,
        description=texts.CALIBRATION_APPLIED,
    )
    notice: str | None = Field(default=None, description=texts.NOTICE)
    stats: RunStats = Field(description=texts.STATS)


# -- mode disagg ---------------------------------------------------------------------------------
#: What the closed loop measured of a pool (the disaggregated simulate's pools say the same).
POOL_UTILISATION = "busy fraction in [0, 1] of the pool's units over the makespan"
POOL_WAIT = (
    "mean wait of a request, ms: prefill, for a prefill unit; decode, for a decode slot once "
    "its KV arrived"
)


class DisaggWorkersOut(BaseModel):
    """One pool of a searched deployment: its workers, one worker's layout, how busy it ran."""

    model_config = _ON_FIRST_USE

    workers: int = Field(description="workers (engine instances) of the pool")
    tp_size: int = Field(description="tensor-parallel size of one worker (devices)")
    dp_size: int = Field(description="attention data-parallel ranks per worker")
    ep_size: int = Field(description="MoE expert-parallel size of one worker (devices)")
    parallel: str = Field(description="one worker's layout")
    devices_per_worker: int = Field(description="devices of one worker: tp_size x dp_size")
    devices: int = Field(description="devices of the pool: workers x devices_per_worker")
    utilisation: float = Field(description=POOL_UTILISATION)
    wait_ms: float = Field(description=POOL_WAIT)


#: The closed loop's means of a searched deployment.
_DISAGG_TTFT = "mean time to first token, ms (the engine's first-token rule: first_token)"
_DISAGG_TPOT = "mean time per output token after the first, ms"


class DisaggRowOut(BaseModel):
    """A deployment at its highest closed-loop concurrency within the limits."""

    model_config = _ON_FIRST_USE

    prefill: DisaggWorkersOut = Field(description="the prefill pool")
    decode: DisaggWorkersOut = Field(description="the decode pool")
    num_devices: int = Field(description="prefill devices + decode devices")
    pd_split: str = Field(description="prefill:decode workers and devices, '2P:1D (8:8 devices)'")
    binding_pool: Pool = Field(
        description="the pool requests queue for longer (without queueing, the busier one)"
    )
    concurrency: int = Field(description="closed-loop clients over the whole deployment")
    ttft_ms: float = Field(description=_DISAGG_TTFT)
    tpot_ms: float = Field(description=_DISAGG_TPOT)
    e2e_ms: float = Field(description="mean end-to-end time of a request, ms")
    transfer_ms: float = Field(description="mean KV transfer time of a request, ms")
    output_throughput: float = Field(description="output tokens/s of the deployment")
    throughput_per_device: float = Field(description="output tokens/s per device of both pools")
    request_throughput: float = Field(description="requests/s the deployment completes")
    copies: int = Field(
        description="1: this deployment was simulated whole; k > 1: it is k copies of the "
        "simulated one (k times its clients and throughput, the same TTFT, TPOT and tokens/s "
        "per device)"
    )


class DisaggProbeOut(BaseModel):
    """One simulated (deployment, concurrency) point of the search."""

    model_config = _ON_FIRST_USE

    pd_split: str = Field(description="prefill:decode workers and devices of the deployment")
    prefill_parallel: str = Field(description="one prefill worker's layout")
    decode_parallel: str = Field(description="one decode worker's layout")
    concurrency: int = Field(description="closed-loop clients over the whole deployment")
    feasible: bool = Field(description="whether the point meets the TTFT/TPOT limits")
    reason: str | None = Field(description="the limit it misses, when not feasible")
    ttft_ms: float = Field(description=_DISAGG_TTFT)
    tpot_ms: float = Field(description=_DISAGG_TPOT)
    output_throughput: float = Field(description="output tokens/s of the deployment")
    throughput_per_device: float = Field(description="output tokens/s per device of both pools")


class DisaggSearchOut(BaseModel):
    """What the search looked at and what it simulated."""

    model_config = _ON_FIRST_USE

    prefill_layouts: int = Field(description="count of prefill worker layouts the model supports")
    decode_layouts: int = Field(description="count of decode worker layouts the model supports")
    configurations: int = Field(
        description="count of layout pairs x worker counts within num_devices (counted, not walked)"
    )
    evaluated: int = Field(description="count of configurations simulated")
    simulations: int = Field(description="count of closed-loop simulations run (probes)")


class DisaggOptimizeResponse(BaseModel):
    """``mode: disagg``: the best prefill and decode worker layouts, counts and concurrency."""

    model_config = _ON_FIRST_USE

    input: OptimizeRequest = Field(description=texts.REQUEST_ECHO)
    engine: dict[str, Any] = Field(description="the engine profile both pools run under")
    mode: Mode = Field(default="disagg", description="disagg")
    best: DisaggRowOut | None = Field(
        description="the highest output tokens/s per device within the limits; null with "
        "reason when nothing is feasible"
    )
    rows: list[DisaggRowOut] = Field(
        description="the configurations the search simulated, ranked by tokens/s per device (top_k)"
    )
    probes: list[DisaggProbeOut] = Field(description="every simulation of the search")
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
    max_batched_tokens: int = Field(description="the token budget of one step, tokens")
    effective_input_length: int = Field(description=texts.EFFECTIVE_INPUT_LENGTH)
    prefill_num_chunks: int = Field(description=texts.PREFILL_NUM_CHUNKS)
    search: DisaggSearchOut = Field(description="what the search looked at and simulated")
    stats: RunStats = Field(description=texts.STATS)
