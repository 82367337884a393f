"""POST /v1/simulate: one configuration at a given concurrency."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from app.core import limits
from app.core.limits import DEFAULT_SIMULATE_MODE, SimulateMode
from app.core.workload import (
    DEFAULT_POISSON_REQUESTS,
    DEFAULT_POISSON_SEED,
    DEFAULT_REQUESTS_PER_CLIENT,
    DEFAULT_WINDOW,
    DEFAULT_WORKLOAD,
    MAX_SEED,
    Window,
    Workload,
)
from app.core.workload.disagg_serving import FirstToken, Pool
from app.models.optimize import POOL_UTILISATION, POOL_WAIT, RunStats
from app.models.workload import DeploymentMixin, WorkloadMixin


def _is_none(value: object) -> bool:
    return value is None


def _is_agg(value: object) -> bool:
    return value == DEFAULT_SIMULATE_MODE


def _pool_field(pool: str, what: str, *, default_one: bool = True) -> Any:
    """A disaggregated pool's field: left out of an aggregated request's echo (the echo of a
    disaggregated one shows every value used)."""
    if default_one:
        bound, text = limits.MAX_PARALLEL_SIZE, f"{what} of one {pool} worker (default 1)"
    else:
        bound, text = limits.MAX_POOL_WORKERS, f"{pool} workers (engine instances; required)"
    return Field(
        default=None,
        strict=True,
        ge=1,
        le=bound,
        exclude_if=_is_none,
        description=f"mode disagg: {text}; omitted for mode agg",
        examples=[None],
    )


#: The fields only ``mode: "disagg"`` takes (an aggregated request's echo leaves them out).
DISAGG_FIELDS = tuple(
    f"{pool}_{name}"
    for pool in ("prefill", "decode")
    for name in ("workers", "tp_size", "dp_size", "ep_size")
)


class SimulateRequest(DeploymentMixin, WorkloadMixin):
    mode: SimulateMode = Field(
        default=DEFAULT_SIMULATE_MODE,
        exclude_if=_is_agg,  # an aggregated answer reads as it did before mode existed
        description="agg (default): one layout (tp_size, dp_size, ep_size) serving prefill and "
        "decode; disagg: prefill_workers prefill workers and decode_workers decode workers, "
        "each pool with its own layout, one closed loop of concurrency clients over both "
        "(docs/engine.md, 'Disaggregated simulate')",
    )
    prefill_workers: int | None = _pool_field("prefill", "workers", default_one=False)
    prefill_tp_size: int | None = _pool_field("prefill", "tensor-parallel size")
    prefill_dp_size: int | None = _pool_field("prefill", "attention data-parallel ranks")
    prefill_ep_size: int | None = _pool_field("prefill", "MoE expert-parallel size")
    decode_workers: int | None = _pool_field("decode", "workers", default_one=False)
    decode_tp_size: int | None = _pool_field("decode", "tensor-parallel size")
    decode_dp_size: int | None = _pool_field("decode", "attention data-parallel ranks")
    decode_ep_size: int | None = _pool_field("decode", "MoE expert-parallel size")
    concurrency: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=limits.MAX_SIM_TOTAL_CONCURRENCY,
        description="burst and closed_loop (required): requests (burst) or clients "
        "(closed_loop) in total over the dp_size replicas, split as evenly as integers allow "
        f"(10 over 4 replicas: 3, 3, 2, 2); at least dp_size and at most "
        f"{limits.MAX_SIM_CONCURRENCY} per replica. poisson: omitted (see max_concurrency). "
        "mode disagg (required): closed-loop clients over the whole deployment",
        examples=[64],
    )
    tp_size: int = Field(default=1, strict=True, ge=1, le=limits.MAX_PARALLEL_SIZE)
    ep_size: int = Field(default=1, strict=True, ge=1, le=limits.MAX_PARALLEL_SIZE)
    dp_size: int = Field(
        default=1,
        strict=True,
        ge=1,
        le=limits.MAX_PARALLEL_SIZE,
        description="data-parallel replicas (default 1, or num_devices / tp_size when "
        "num_devices is given)",
    )
    num_devices: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=limits.MAX_NUM_DEVICES,
        description="devices in total: must equal tp_size x dp_size; given without dp_size, "
        "dp_size = num_devices / tp_size",
        examples=[None],
    )
    ttft_limit_ms: float | None = Field(default=None, gt=0)
    tpot_limit_ms: float | None = Field(default=None, gt=0)
    include_timeline: bool = Field(default=False, description="return the step timeline")
    workload: Workload | None = Field(
        default=None,
        description="omitted: the engine profile's (closed_loop; msmodeling: burst). "
        "burst (RFC): concurrency requests at t = 0; closed_loop: concurrency "
        "clients, each sending its next request when one ends; poisson: requests arriving at "
        "request_rate (exponential gaps, the first at t = 0), every one counted",
    )
    window: Window = Field(
        default=DEFAULT_WINDOW,
        description="closed_loop measurement window (poisson: benchmark)",
    )
    requests_per_client: int = Field(
        default=DEFAULT_REQUESTS_PER_CLIENT,
        strict=True,
        ge=1,
        le=limits.MAX_REQUESTS_PER_CLIENT,
        description="closed_loop",
    )
    request_rate: float | None = Field(
        default=None,
        gt=0,
        le=limits.MAX_REQUEST_RATE,
        allow_inf_nan=False,
        description="poisson (required): requests per second over all replicas (each of the "
        "dp_size replicas gets request_rate / dp_size)",
        examples=[None],
    )
    max_concurrency: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=limits.MAX_SIM_TOTAL_CONCURRENCY,
        description="poisson: at most this many requests in flight over all replicas (like "
        "benchmark_serving --max-concurrency); an arrival that finds every slot taken waits on "
        "the client side and its TTFT counts from when it is sent; default: no cap",
        examples=[None],
    )
    num_requests: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=limits.MAX_POISSON_REQUESTS,
        description="poisson: requests sent over all replicas (default "
        f"{DEFAULT_POISSON_REQUESTS}, benchmark_serving's --num-prompts default)",
        examples=[None],
    )
    seed: int = Field(
        default=DEFAULT_POISSON_SEED,
        strict=True,
        ge=0,
        le=MAX_SEED,
        description="poisson: seed of the arrival times (same seed, same result)",
    )


class ForwardShapeOut(BaseModel):
    concurrency: int
    query_len: int
    seq_len: int


class StepOut(BaseModel):
    """``repeat`` identical consecutive steps starting at ``start_ms``."""

    start_ms: float
    step_ms: float
    repeat: int
    p_step: int
    prefill: ForwardShapeOut | None
    prefill_ms: float
    d_step: int
    decode: ForwardShapeOut | None
    decode_ms: float
    first_tokens: int
    finished: int
    fused: bool = Field(
        default=False,
        description="mixed_latency 'fused': prefill and decode ran as one forward, so both "
        "spanned the whole step (prefill_ms == decode_ms == step_ms)",
    )


class ReplicaShare(BaseModel):
    """``replicas`` data-parallel replicas that each get this share of the workload."""

    replicas: int
    concurrency: int | None = Field(
        description="requests (burst), clients (closed_loop) or the max_concurrency share "
        "(poisson; null: no cap) of each"
    )
    num_requests: int = Field(description="requests each replica serves")
    request_rate: float | None = Field(default=None, description="poisson: requests/s each")


class SimulateResponse(BaseModel):
    input: SimulateRequest
    engine: dict[str, Any] = Field(
        description="the engine profile used and every value it set (after engine_options)"
    )
    method: str = Field(description="time_simulation or closed_form_waves")
    parallel: str
    num_devices: int
    batch_size: int | None = Field(
        description="concurrency on the busiest replica, ceil(concurrency / dp_size) (null "
        "for poisson without max_concurrency); the timeline shows that replica"
    )
    concurrency: int | None = Field(
        description="requests (burst), clients (closed_loop) or max_concurrency (poisson; "
        "null: no cap) over all replicas"
    )
    replica_split: list[ReplicaShare] = Field(
        description="how the workload spreads over the replicas, larger shares first"
    )
    effective_input_length: int
    prefill_num_chunks: int
    max_batched_tokens: int = Field(
        description="the token budget used (the engine default if omitted)"
    )
    scheduler: dict[str, Any] = Field(description="the policy and its parameters")
    ttft_ms: float = Field(description="mean over every request of every replica")
    tpot_ms: float = Field(description="mean over every request of every replica")
    makespan_ms: float = Field(description="the slowest replica's")
    output_throughput: float = Field(description="output tokens/s over all replicas")
    request_throughput: float = Field(description="requests/s over all replicas")
    throughput_per_device: float
    ttft_ms_interval: tuple[float, float] | None = Field(
        default=None, description="TTFT's 80 % prediction interval [low, high] (docs/engine.md)"
    )
    tpot_ms_interval: tuple[float, float] | None = Field(
        default=None, description="TPOT's 80 % prediction interval [low, high]"
    )
    output_throughput_interval: tuple[float, float] | None = Field(
        default=None, description="output throughput's 80 % prediction interval [low, high]"
    )
    calibration: dict[str, Any] | None = Field(
        default=None,
        description="the calibration applied: id, applicable (false: the estimate lies outside "
        "what it was fitted on; reason says why and the intervals are widened), parameters",
    )
    steps: int = Field(description="engine steps, summed over the replicas")
    workload: str = DEFAULT_WORKLOAD
    window: str | None = Field(default=None, description="closed_loop and poisson")
    num_requests: int | None = Field(
        default=None, description="closed_loop and poisson: requests sent"
    )
    request_rate: float | None = Field(default=None, description="poisson: requests/s in total")
    max_concurrency: int | None = Field(default=None, description="poisson: the client-side cap")
    seed: int | None = Field(default=None, description="poisson: seed of the arrival times")
    measured_requests: int | None = None
    e2e_ms: float | None = None
    total_throughput: float | None = Field(
        default=None,
        description="closed_loop and poisson: (input + output) tokens/s over all replicas",
    )
    mean_running_batch: float | None = None
    mean_prefill_tokens_per_step: float | None = Field(
        default=None, description="closed_loop and poisson: prefill tokens per engine step"
    )
    mean_decode_tokens_per_step: float | None = Field(
        default=None, description="closed_loop and poisson: decode tokens per engine step"
    )
    max_running: int | None = Field(
        default=None, description="closed_loop and poisson: KV / policy cap per replica"
    )
    memory_left_gb: float
    memory_gb: dict[str, float]
    feasible: bool
    reason: str | None = Field(description="memory or limit violation, when infeasible")
    suggestions: list[str] = Field(
        default_factory=list,
        description="ways out of a memory-infeasible answer (quantization, devices, context)",
    )
    timeline: list[StepOut] | None = None
    timeline_truncated: bool = False
    stats: RunStats


# -- mode disagg ---------------------------------------------------------------------------------
class DisaggPoolOut(BaseModel):
    """One pool of a disaggregated deployment and how busy the closed loop kept it."""

    workers: int
    tp_size: int
    dp_size: int = Field(description="attention data-parallel ranks per worker")
    ep_size: int
    parallel: str = Field(description="one worker's layout")
    devices_per_worker: int = Field(description="tp_size x dp_size")
    devices: int = Field(description="workers x devices_per_worker")
    units: int = Field(
        description="engine units of the pool: dp_size per worker whose ranks are independent, "
        "one per worker whose ranks are coupled (attention DP with expert-parallel MoE)"
    )
    coupled: bool = Field(description="a worker's data-parallel ranks step together")
    kv_requests: int = Field(
        description="requests whose KV fits one rank's KV pool (prefill: prompts of "
        "input_length tokens; decode: input_length + output_length)"
    )
    max_requests: int = Field(
        description="prefill: requests per rank in one prefill job (the token budget over the "
        "first chunk, at most kv_requests); decode: running cap per rank (the engine's "
        "max_num_seqs and kv_requests)"
    )
    utilisation: float = Field(description=POOL_UTILISATION)
    wait_ms: float = Field(description=POOL_WAIT)


class KvTransferOut(BaseModel):
    """The KV transfer from a prefill worker to a decode worker."""

    tier: str = Field(description="the interconnect tier holding both pools (num_devices)")
    bandwidth_gb_s: float = Field(
        description="one device's link of the tier, per direction, efficiency included"
    )
    bytes_per_request: float = Field(
        description="one prompt's KV on one prefill device (every device sends its own share)"
    )
    fixed_ms: float = Field(description="per-transfer latency besides the bytes")
    transfer_ms: float = Field(
        description="mean transfer time of a request (the requests of one prefill job share "
        "the link)"
    )


class DisaggSimulateResponse(BaseModel):
    """``mode: disagg``: a prefill pool and a decode pool under one closed loop of clients."""

    input: SimulateRequest
    engine: dict[str, Any] = Field(description="the engine profile both pools run under")
    mode: SimulateMode = "disagg"
    workload: str = Field(default="closed_loop", description="closed_loop (the only one)")
    window: str = Field(default="benchmark", description="every request counts, from t = 0")
    concurrency: int = Field(description="closed-loop clients over the whole deployment")
    num_requests: int = Field(description="requests sent: concurrency x requests_per_client")
    num_devices: int = Field(description="prefill devices + decode devices")
    pd_split: str = Field(
        description="prefill:decode workers and devices, e.g. '2P:1D (8:8 devices)'"
    )
    prefill: DisaggPoolOut
    decode: DisaggPoolOut
    binding_pool: Pool | None = Field(
        description="the pool requests queue for longer (a prefill unit vs a decode slot; "
        "without queueing, the busier one): the pool to grow; null when nothing ran"
    )
    transfer: KvTransferOut
    first_token: FirstToken = Field(description="when the client gets its first token")
    first_token_rule: str = Field(description="what TTFT holds under that rule (per engine)")
    max_batched_tokens: int = Field(description="the prefill workers' token budget")
    effective_input_length: int
    prefill_num_chunks: int
    ttft_ms: float = Field(description="mean over every request")
    tpot_ms: float = Field(description="mean over every request: first to last token / (O - 1)")
    e2e_ms: float
    makespan_ms: float
    output_throughput: float = Field(description="output tokens/s of the deployment")
    request_throughput: float = Field(description="requests/s of the deployment")
    throughput_per_device: float = Field(description="output tokens/s per device of both pools")
    prefill_jobs: int = Field(description="prefill jobs run (batches of prompts)")
    decode_runs: int = Field(description="runs of identical decode steps simulated")
    feasible: bool
    reason: str | None = Field(
        description="memory (a worker cannot hold one prompt's or one request's KV) or a "
        "limit violation, when infeasible"
    )
    stats: RunStats
