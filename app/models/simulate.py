"""POST /v1/simulate: one configuration at a given concurrency."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from app.core import limits
from app.core.limits import DEFAULT_SIMULATE_MODE, FirstToken, Pool, SimulateMode
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
from app.core.workload.disagg_setup import KV_TRANSFER_FIXED_MS
from app.models import texts
from app.models.optimize import POOL_UTILISATION, POOL_WAIT, RunStats
from app.models.workload import DeploymentMixin, DeviceRef, Name, StrictModel, WorkloadMixin


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
DISAGG_FIELDS = (
    *(
        f"{pool}_{name}"
        for pool in ("prefill", "decode")
        for name in ("workers", "tp_size", "dp_size", "ep_size")
    ),
    "decode_device",
    "pool_link",
)


class PoolLink(StrictModel):
    """The link a prefill worker's KV cache crosses to a decode worker."""

    bandwidth_gb_s: float = Field(
        gt=0,
        le=limits.MAX_POOL_LINK_GB_S,
        allow_inf_nan=False,
        description="effective bandwidth of one device's link between the pools, GB/s "
        "(decimal GB per second; each prefill device sends its own share of the KV)",
        examples=[50.0],
    )
    fixed_ms: float = Field(
        default=KV_TRANSFER_FIXED_MS,
        ge=0,
        le=limits.MAX_POOL_LINK_FIXED_MS,
        allow_inf_nan=False,
        description="per-transfer latency besides the bytes (handshake, descriptors, "
        f"completion), ms; default {KV_TRANSFER_FIXED_MS:g}",
    )
    name: Name = Field(default="pool_link", description="the link's name in the answer")


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
    decode_device: DeviceRef | None = Field(
        default=None,
        exclude_if=_is_none,
        description="mode disagg: the decode pool's device (catalog name or custom device); "
        "omitted: device, both pools on one device. A decode pool on another device than the "
        "prefill pool (device) needs pool_link",
        examples=[None],
    )
    pool_link: PoolLink | None = Field(
        default=None,
        exclude_if=_is_none,
        description="mode disagg: the interconnect between the pools; required when "
        "decode_device differs from device; with one device it replaces the interconnect tier "
        "the pools' devices would share",
        examples=[None],
    )
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
    tp_size: int = Field(
        default=1, strict=True, ge=1, le=limits.MAX_PARALLEL_SIZE, description=texts.TP_SIZE
    )
    ep_size: int = Field(
        default=1, strict=True, ge=1, le=limits.MAX_PARALLEL_SIZE, description=texts.EP_SIZE
    )
    dp_size: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=limits.MAX_PARALLEL_SIZE,
        description="data-parallel replicas; null or omitted: derived, num_devices / tp_size "
        "when num_devices is given, else 1 (the answer's input shows the value used)",
        examples=[None],
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
    ttft_limit_ms: float | None = Field(default=None, gt=0, description=texts.TTFT_LIMIT)
    tpot_limit_ms: float | None = Field(default=None, gt=0, description=texts.TPOT_LIMIT)
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
        description=texts.REQUESTS_PER_CLIENT,
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
    concurrency: int = Field(description=texts.SHAPE_CONCURRENCY)
    query_len: int = Field(description=texts.QUERY_LEN)
    seq_len: int = Field(
        description="tokens of context per request after the forward (prefill: where the chunk "
        "ends, the cached prefix not counted; decode: input_length + output_length // 2 + "
        "query_len, the mid-decode context)"
    )


class StepOut(BaseModel):
    """``repeat`` identical consecutive steps starting at ``start_ms``."""

    start_ms: float = Field(description="when the first of these steps starts, ms from t = 0")
    step_ms: float = Field(description="duration of one of these steps, ms")
    repeat: int = Field(description="identical consecutive steps the entry stands for")
    p_step: int = Field(description="requests prefilling one chunk in each step")
    prefill: ForwardShapeOut | None = Field(description="each step's prefill forward (null: none)")
    prefill_ms: float = Field(description="each step's prefill forward time, ms (0: none)")
    d_step: int = Field(description="requests decoding in each step")
    decode: ForwardShapeOut | None = Field(description="each step's decode forward (null: none)")
    decode_ms: float = Field(
        description="each step's decode forward time, ms (0: none; with MTP, per emitted token)"
    )
    first_tokens: int = Field(
        description="requests that emit their first token at the end of the entry's last step"
    )
    finished: int = Field(description="requests that complete at the end of the entry's last step")
    fused: bool = Field(
        default=False,
        description="mixed_latency 'fused': prefill and decode ran as one forward, so both "
        "spanned the whole step (prefill_ms == decode_ms == step_ms)",
    )


class ReplicaShare(BaseModel):
    """``replicas`` data-parallel replicas that each get this share of the workload."""

    replicas: int = Field(description="data-parallel replicas with this share")
    concurrency: int | None = Field(
        description="requests (burst), clients (closed_loop) or the max_concurrency share "
        "(poisson; null: no cap) of each"
    )
    num_requests: int = Field(description="requests each replica serves")
    request_rate: float | None = Field(default=None, description="poisson: requests/s each")


class SimulateResponse(BaseModel):
    input: SimulateRequest = Field(
        description=f"{texts.REQUEST_ECHO}, num_devices and dp_size included"
    )
    engine: dict[str, Any] = Field(description=texts.ENGINE_USED)
    method: str = Field(description=texts.METHOD)
    parallel: str = Field(description=texts.PARALLEL)
    num_devices: int = Field(description="devices of the layout: tp_size x dp_size")
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
    effective_input_length: int = Field(description=texts.EFFECTIVE_INPUT_LENGTH)
    prefill_num_chunks: int = Field(description=texts.PREFILL_NUM_CHUNKS)
    max_batched_tokens: int = Field(
        description="the token budget used, tokens per step (the engine default if omitted)"
    )
    scheduler: dict[str, Any] = Field(description="the policy and its parameters")
    ttft_ms: float = Field(
        description="mean time to first token, ms, over the measured requests of every replica "
        "(the engine's front-end time included)"
    )
    tpot_ms: float = Field(
        description="mean time per output token after the first, ms, over the measured requests "
        "of every replica"
    )
    makespan_ms: float = Field(
        description="the slowest replica's run, ms: from t = 0 to the last completion (closed_loop "
        "and poisson: the measurement window's length)"
    )
    output_throughput: float = Field(description="output tokens/s over all replicas")
    request_throughput: float = Field(description="requests/s over all replicas")
    throughput_per_device: float = Field(
        description="output tokens/s per device: output_throughput / num_devices"
    )
    ttft_ms_interval: tuple[float, float] | None = Field(
        default=None, description=texts.TTFT_INTERVAL
    )
    tpot_ms_interval: tuple[float, float] | None = Field(
        default=None, description=texts.TPOT_INTERVAL
    )
    output_throughput_interval: tuple[float, float] | None = Field(
        default=None,
        description="output_throughput's 80 % prediction interval [low, high], tokens/s",
    )
    sla_confidence: float | None = Field(default=None, description=texts.SLA_CONFIDENCE)
    notice: str | None = Field(default=None, description=texts.NOTICE)
    calibration: dict[str, Any] | None = Field(
        default=None,
        description=texts.CALIBRATION_APPLIED,
    )
    steps: int = Field(description="engine steps, summed over the replicas")
    workload: str = Field(
        default=DEFAULT_WORKLOAD,
        description="the workload simulated: burst, closed_loop or poisson",
    )
    window: str | None = Field(default=None, description="closed_loop and poisson")
    num_requests: int | None = Field(
        default=None, description="closed_loop and poisson: requests sent"
    )
    request_rate: float | None = Field(default=None, description="poisson: requests/s in total")
    max_concurrency: int | None = Field(
        default=None, description="poisson: the client-side cap on requests in flight"
    )
    seed: int | None = Field(default=None, description="poisson: seed of the arrival times")
    measured_requests: int | None = Field(
        default=None,
        description="closed_loop and poisson: requests the measurement window counts (the means "
        "are over them)",
    )
    e2e_ms: float | None = Field(
        default=None,
        description="closed_loop and poisson: mean end-to-end latency of a measured request "
        "(sent to last token), ms, front-end time included",
    )
    total_throughput: float | None = Field(
        default=None,
        description="closed_loop and poisson: (input + output) tokens/s over all replicas",
    )
    mean_running_batch: float | None = Field(
        default=None,
        description="closed_loop and poisson: requests per engine step (prefill + decode), the "
        "mean over the window's steps",
    )
    mean_prefill_tokens_per_step: float | None = Field(
        default=None, description="closed_loop and poisson: prefill tokens per engine step"
    )
    mean_decode_tokens_per_step: float | None = Field(
        default=None, description="closed_loop and poisson: decode tokens per engine step"
    )
    max_running: int | None = Field(
        default=None,
        description="closed_loop and poisson: most requests one replica runs at once (the KV "
        "pool's and the policy's cap)",
    )
    memory_left_gb: float = Field(description=texts.MEMORY_LEFT)
    memory_gb: dict[str, float] = Field(
        description=f"{texts.MEMORY_PARTS}, at the busiest replica's decode step"
    )
    feasible: bool = Field(description=texts.FEASIBLE)
    reason: str | None = Field(description="memory or limit violation, when infeasible")
    suggestions: list[str] = Field(
        default_factory=list,
        description=texts.SUGGESTIONS,
    )
    timeline: list[StepOut] | None = Field(
        default=None,
        description="include_timeline: the busiest replica's engine steps in order, runs of "
        f"identical steps as one entry, at most {limits.MAX_TIMELINE_ENTRIES} entries",
    )
    timeline_truncated: bool = Field(
        default=False,
        description=f"the timeline was cut to its first {limits.MAX_TIMELINE_ENTRIES} entries",
    )
    stats: RunStats = Field(description=texts.STATS)


# -- mode disagg ---------------------------------------------------------------------------------
class DisaggPoolOut(BaseModel):
    """One pool of a disaggregated deployment and how busy the closed loop kept it."""

    workers: int = Field(description="engine instances of the pool")
    device: str = Field(description="the device the pool runs on (its catalog or custom name)")
    tp_size: int = Field(description="tensor-parallel size of one worker (devices)")
    dp_size: int = Field(description="attention data-parallel ranks per worker")
    ep_size: int = Field(description="MoE expert-parallel size of one worker (devices)")
    parallel: str = Field(description="one worker's layout")
    devices_per_worker: int = Field(description="devices of one worker: tp_size x dp_size")
    devices: int = Field(description="devices of the pool: workers x devices_per_worker")
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

    tier: str = Field(
        description="the interconnect tier holding both pools (num_devices), or the request's "
        "pool_link name"
    )
    bandwidth_gb_s: float = Field(
        description="one device's link of the tier, decimal GB/s per direction, efficiency included"
    )
    bytes_per_request: float = Field(
        description="the bytes one prefill device sends for one prompt: its share of the KV "
        "times the copies the decode worker's attention ranks need beyond the prefill's "
        "(an MLA latent on every decode TP rank; every device sends its own share)"
    )
    fixed_ms: float = Field(description="per-transfer latency besides the bytes, ms")
    transfer_ms: float = Field(
        description="mean transfer time of a request, ms (the requests of one prefill job "
        "share the link)"
    )


class DisaggSimulateResponse(BaseModel):
    """``mode: disagg``: a prefill pool and a decode pool under one closed loop of clients."""

    input: SimulateRequest = Field(description=texts.REQUEST_ECHO)
    engine: dict[str, Any] = Field(description="the engine profile both pools run under")
    mode: SimulateMode = Field(
        default="disagg", description="disagg: a prefill pool and a decode pool"
    )
    workload: str = Field(
        default="closed_loop",
        description="closed_loop (concurrency clients) or poisson (request_rate arrivals)",
    )
    window: str = Field(default="benchmark", description="every request counts, from t = 0")
    concurrency: int | None = Field(
        description="closed_loop: clients over the whole deployment; poisson: null"
    )
    request_rate: float | None = Field(
        default=None, description="poisson: requests/s over the whole deployment; else null"
    )
    num_requests: int = Field(
        description="requests sent: concurrency x requests_per_client (closed_loop) or "
        "num_requests (poisson)"
    )
    num_devices: int = Field(description="prefill devices + decode devices")
    pd_split: str = Field(
        description="prefill:decode workers and devices, e.g. '2P:1D (8:8 devices)'"
    )
    prefill: DisaggPoolOut = Field(description="the prefill pool")
    decode: DisaggPoolOut = Field(description="the decode pool")
    binding_pool: Pool | None = Field(
        description="the pool requests queue for longer (a prefill unit vs a decode slot; "
        "without queueing, the busier one): the pool to grow; null when nothing ran"
    )
    transfer: KvTransferOut = Field(description="the KV transfer from prefill to decode")
    first_token: FirstToken = Field(description="when the client gets its first token")
    first_token_rule: str = Field(description="what TTFT holds under that rule (per engine)")
    max_batched_tokens: int = Field(
        description="the prefill workers' token budget, tokens per step"
    )
    effective_input_length: int = Field(description=texts.EFFECTIVE_INPUT_LENGTH)
    prefill_num_chunks: int = Field(description=texts.PREFILL_NUM_CHUNKS)
    ttft_ms: float = Field(
        description="mean time to first token over every request, ms (front-end time included)"
    )
    tpot_ms: float = Field(description="mean over every request, ms: first to last token / (O - 1)")
    e2e_ms: float = Field(
        description="mean end-to-end latency of a request (sent to last token), ms, front-end "
        "time included"
    )
    makespan_ms: float = Field(description="from t = 0 to the last completion, ms")
    output_throughput: float = Field(description="output tokens/s of the deployment")
    request_throughput: float = Field(description="requests/s of the deployment")
    throughput_per_device: float = Field(description="output tokens/s per device of both pools")
    prefill_jobs: int = Field(description="prefill jobs run (batches of prompts)")
    decode_runs: int = Field(description="runs of identical decode steps simulated")
    feasible: bool = Field(
        description="whether every worker holds its KV and the TTFT/TPOT limits are met"
    )
    reason: str | None = Field(
        description="memory (a worker cannot hold one prompt's or one request's KV) or a "
        "limit violation, when infeasible"
    )
    stats: RunStats = Field(description=texts.STATS)
