"""The engine budget (``max_batched_tokens`` default), the workload spec of a request and the
simulation-size bounds that keep one request from pinning a worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from app.core import limits
from app.core.catalog.quantization import LinearQuantAction
from app.core.errors import ChunkwiseError, InvalidParameterError, SearchLimitError
from app.core.optimizer import DEFAULT_MAX_BATCH_SIZE
from app.core.parallel import split_over_replicas
from app.core.profiles import (
    DEFAULT_ENGINE,
    VLLM_SMALL_BUDGET_TOKENS,
    EngineProfile,
    get_profile,
)
from app.core.spec import WorkloadSpec
from app.core.workload import DEFAULT_POISSON_REQUESTS, poisson_shares
from app.models.workload import WorkloadMixin
from app.services.resolve import resolve_device, resolve_profile

if TYPE_CHECKING:  # annotations: a command imports only the wire models it uses
    from app.models.optimize import OptimizeRequest
    from app.models.simulate import SimulateRequest


def engine_budget(request: WorkloadMixin, profile: EngineProfile) -> int:
    """``max_batched_tokens``, or the engine profile's default for the request's device when
    omitted (an unknown device falls back to the small-device default; resolving it fails
    later with the valid names)."""
    if request.max_batched_tokens is not None:
        return request.max_batched_tokens
    device = getattr(request, "device", None)
    try:
        resolved = resolve_device(device) if device is not None else None
    except ChunkwiseError:
        resolved = None
    if resolved is None:
        return profile.max_batched_tokens or VLLM_SMALL_BUDGET_TOKENS
    return profile.token_budget(resolved.hbm_capacity_gb, resolved.name, resolved.vendor)


RequestT = TypeVar("RequestT", bound=WorkloadMixin)


def with_engine_defaults(request: RequestT) -> tuple[RequestT, EngineProfile]:
    """The request with the engine profile's defaults filled in (``engine``,
    ``max_batched_tokens``, ``workload`` and the linear quantization when null or omitted), so
    the echo shows what was used, and the profile (with the request's ``engine_options``)."""
    profile = resolve_profile(request)
    update: dict[str, object] = {}
    if request.engine != profile.name:
        update["engine"] = profile.name
    if request.max_batched_tokens is None:
        update["max_batched_tokens"] = engine_budget(request, profile)
    if getattr(request, "quantize_linear_action", "") is None:  # null: derived, echoed
        update["quantize_linear_action"] = (
            profile.linear_quantization or LinearQuantAction.DISABLED.value
        )
    if getattr(request, "workload", "") is None:
        workload = profile.workload
        if getattr(request, "mode", "agg") != "agg":
            workload = "burst"  # the disaggregated searches are burst searches
        update["workload"] = workload
    return (request.model_copy(update=update) if update else request), profile


#: The workloads a length range runs through (the engine loop's classes, measured per request).
RANGED_WORKLOADS = ("closed_loop", "poisson")


def check_length_range(request: WorkloadMixin) -> None:
    """A length range (``length_range_ratio`` < 1) runs through the closed-loop and Poisson
    workloads of mode agg; a burst (closed-form waves) and the disaggregated modes replay fixed
    lengths, so they refuse it rather than ignore it."""
    ratio = request.length_range_ratio
    if ratio == limits.DEFAULT_LENGTH_RANGE_RATIO:
        return
    workload = getattr(request, "workload", "poisson")  # a plan request: poisson arrivals
    mode = getattr(request, "mode", "agg")
    if mode != "agg" or workload not in RANGED_WORKLOADS:
        raise InvalidParameterError(
            "length_range_ratio",
            ratio,
            f"{limits.DEFAULT_LENGTH_RANGE_RATIO:g} (fixed lengths) for mode {mode!r} and "
            f"workload {workload!r}: a length range runs the {' and '.join(RANGED_WORKLOADS)} "
            "workloads of mode 'agg'",
        )


def workload_spec(request: WorkloadMixin, num_devices: int, profile: EngineProfile) -> WorkloadSpec:
    check_length_range(request)
    return WorkloadSpec(
        input_length=request.input_length,
        output_length=request.output_length,
        length_range_ratio=request.length_range_ratio,
        max_batched_tokens=engine_budget(request, profile),
        prefix_cache_hit_rate=request.prefix_cache_hit_rate,
        ttft_limit_ms=getattr(request, "ttft_limit_ms", None),
        tpot_limit_ms=getattr(request, "tpot_limit_ms", None),
        num_mtp_tokens=request.num_mtp_tokens,
        mtp_acceptance_rates=tuple(request.mtp_acceptance_rates),
        num_devices=num_devices,
        **profile.spec_terms(request.input_length),
    )


def check_simulation_size(
    data: WorkloadSpec, requests: int, field: str, *, replicas: int = 1
) -> None:
    """Refuse simulations whose cost would pin a worker (bounds documented in README).

    ``requests`` is the busiest replica's share; with ``replicas > 1`` the advice names the
    total over the replicas (what ``field`` holds in ``/v1/simulate``).
    """
    chunks = data.prefill_num_chunks
    if chunks > limits.MAX_PREFILL_CHUNKS:
        raise SearchLimitError(
            f"the prompt needs {chunks} prefill chunks (effective_input_length "
            f"{data.effective_input_length} / max_batched_tokens {data.max_batched_tokens}); at "
            f"most {limits.MAX_PREFILL_CHUNKS}: raise max_batched_tokens"
        )
    if chunks * requests > limits.MAX_CHUNK_REQUESTS:
        raise SearchLimitError(
            f"prefill_num_chunks x {_per_replica(field, replicas)} = {chunks} x {requests} "
            f"exceeds {limits.MAX_CHUNK_REQUESTS}: lower {field} to <= "
            f"{limits.MAX_CHUNK_REQUESTS // chunks * replicas} or raise max_batched_tokens"
        )


def check_closed_loop_size(
    data: WorkloadSpec, clients: int, requests_per_client: int, field: str, *, replicas: int = 1
) -> None:
    """The closed loop's planning cost: requests sent per replica x prefill chunks."""
    chunks = data.prefill_num_chunks
    sent = clients * requests_per_client
    if sent * chunks > limits.MAX_CLOSED_LOOP_REQUEST_CHUNKS:
        most = max(1, limits.MAX_CLOSED_LOOP_REQUEST_CHUNKS // (requests_per_client * chunks))
        raise SearchLimitError(
            f"a closed loop of {clients} clients{_per_replica('', replicas)} x "
            f"{requests_per_client} requests x {chunks} prefill chunks exceeds "
            f"{limits.MAX_CLOSED_LOOP_REQUEST_CHUNKS}: lower {field} to <= {most * replicas}, "
            "requests_per_client, or raise max_batched_tokens"
        )


def check_poisson_size(data: WorkloadSpec, requests: int, *, replicas: int = 1) -> None:
    """A poisson run's planning cost: requests per replica x prefill chunks (arrivals cut the
    engine's runs, so it follows requests and chunks)."""
    check_simulation_size(data, 1, "num_requests")  # the chunk bound
    chunks = data.prefill_num_chunks
    if requests * chunks > limits.MAX_POISSON_REQUEST_CHUNKS:
        most = max(1, limits.MAX_POISSON_REQUEST_CHUNKS // chunks)
        raise SearchLimitError(
            f"a poisson run of {requests} requests{_per_replica('', replicas)} x {chunks} "
            f"prefill chunks exceeds {limits.MAX_POISSON_REQUEST_CHUNKS}: lower num_requests to "
            f"<= {most * replicas} or raise max_batched_tokens"
        )


def _per_replica(text: str, replicas: int) -> str:
    return f"{text} per replica" if replicas > 1 else text


def search_cap(request: OptimizeRequest, data: WorkloadSpec) -> int:
    """The optimizer's batch-size cap: a given ``max_batch_size`` is checked against the
    simulation bounds; a null one (derived) is ``DEFAULT_MAX_BATCH_SIZE`` shrunk to them (the
    echo shows it, and re-sending it asks the same question)."""
    closed = request.workload == "closed_loop"
    if request.max_batch_size is not None:
        check_simulation_size(data, request.max_batch_size, "max_batch_size")
        if closed:
            check_closed_loop_size(
                data, request.max_batch_size, request.requests_per_client, "max_batch_size"
            )
        return request.max_batch_size
    check_simulation_size(data, 1, "max_batch_size")
    cap = min(DEFAULT_MAX_BATCH_SIZE, limits.MAX_CHUNK_REQUESTS // data.prefill_num_chunks)
    if closed:
        check_closed_loop_size(data, 1, request.requests_per_client, "max_batch_size")
        per_client = request.requests_per_client * data.prefill_num_chunks
        cap = min(cap, limits.MAX_CLOSED_LOOP_REQUEST_CHUNKS // per_client)
    return cap


def _at_least_one_per_replica(field: str, total: int, dp: int) -> None:
    """Fewer than one request or client per replica is refused: an idle replica is not a
    deployment anyone asks about, and the totals would describe fewer replicas than named."""
    if total < dp:
        raise InvalidParameterError(
            field,
            total,
            f">= dp_size={dp}: {field} is the total over the {dp} data-parallel replicas and "
            "each needs at least one",
        )


def replica_split(concurrency: int, dp: int) -> list[tuple[int, int]]:
    """``concurrency`` (the total over ``dp`` replicas) as ``[(per replica, replicas), ...]``;
    uneven totals give two shares, the larger first (10 over 4: 3, 3, 2, 2)."""
    _at_least_one_per_replica("concurrency", concurrency, dp)
    split = split_over_replicas(concurrency, dp)
    if split[0][0] > limits.MAX_SIM_CONCURRENCY:
        raise InvalidParameterError(
            "concurrency",
            concurrency,
            f"<= {limits.MAX_SIM_CONCURRENCY * dp} ({limits.MAX_SIM_CONCURRENCY} per replica "
            f"over dp_size={dp})",
        )
    return split


def poisson_split(
    num_requests: int | None, max_concurrency: int | None, dp: int
) -> list[tuple[int, int | None, int]]:
    """``[(requests, max_concurrency, replicas), ...]`` of a poisson run, busiest first.

    ``num_requests`` defaults to 1000 (at least one per replica)."""
    if num_requests is None:
        num_requests = max(DEFAULT_POISSON_REQUESTS, dp)
    _at_least_one_per_replica("num_requests", num_requests, dp)
    if max_concurrency is not None:
        _at_least_one_per_replica("max_concurrency", max_concurrency, dp)
    return poisson_shares(num_requests, dp, max_concurrency)


def check_timeline_size(
    include_timeline: bool, data: WorkloadSpec, busiest: int, field: str, dp: int
) -> None:
    if include_timeline and data.prefill_num_chunks * busiest > (
        limits.MAX_TIMELINE_CHUNK_REQUESTS
    ):
        raise SearchLimitError(
            f"a step timeline needs prefill_num_chunks x {_per_replica(field, dp)} <= "
            f"{limits.MAX_TIMELINE_CHUNK_REQUESTS} (here {data.prefill_num_chunks} x "
            f"{busiest}); drop include_timeline or shrink the request"
        )


def is_light_simulation(request: SimulateRequest) -> bool:
    """Whether a simulation is cheap by its size alone (the API's light lane): at most
    ``LIGHT_SIMULATION_CHUNK_REQUESTS`` prefill chunks x requests per replica, no timeline.

    The chunk count is bounded from above without resolving anything: the smallest default
    token budget (``VLLM_SMALL_BUDGET_TOKENS``) when none is given, no prefix cache; the
    workload is the engine profile's when omitted.
    Requests are the burst's, the closed loop's clients x requests per client, or Poisson's
    ``num_requests``, per replica."""
    if request.include_timeline:
        return False
    budget = request.max_batched_tokens or VLLM_SMALL_BUDGET_TOKENS
    chunks = -(-request.input_length // budget)
    replicas = request.dp_size or max(1, (request.num_devices or 1) // request.tp_size)
    workload = request.workload or get_profile(request.engine or DEFAULT_ENGINE).workload
    if request.mode == "disagg":
        workload = "closed_loop"  # always, whatever the profile's
    if workload == "poisson":
        total = request.num_requests or DEFAULT_POISSON_REQUESTS
    elif workload == "closed_loop":
        total = (request.concurrency or 1) * request.requests_per_client
    else:
        total = request.concurrency or 1
    per_replica = -(-total // replicas)
    return chunks * per_replica <= limits.LIGHT_SIMULATION_CHUNK_REQUESTS
