"""The resolver: a request resolved once, at the service boundary, into a
:class:`~app.core.scenario.Scenario` (the question as core values) and its echo (the request
as it ran: every default the resolution chose, given).

Every check of the request's fields and every lookup (catalog, custom device, inline
config.json, engine profile and overrides, stored calibration, scheduler) happens here, in the
order a client sees its errors; the evaluation below (:mod:`.simulate`, :mod:`.optimize`)
reads the Scenario only, and puts the echo in its answer. Re-sending an echo resolves to the
same Scenario (same :attr:`~app.core.scenario.Scenario.key`), so it gets the same answer.

    request --resolve_*--> Resolved(scenario, echo) --evaluation--> answer (input: the echo)

    resolve_simulation          simulate, mode agg (one layout)
    resolve_disagg_simulation   simulate, mode disagg (two pools)
    resolve_search              optimize, modes agg, disagg_prefill, disagg_decode, pd_ratio
    resolve_disagg_search       optimize, mode disagg
    resolve_plan                plan
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from app.core import limits
from app.core.calibration import CalibrationProfile
from app.core.errors import InvalidParameterError
from app.core.optimizer.agg import SEARCHED_WORKLOADS
from app.core.optimizer.capacity import Sla
from app.core.parallel import ParallelLayout
from app.core.profiles import EngineProfile
from app.core.scenario import (
    CapacityTarget,
    DisaggPools,
    DisaggSearchSpace,
    ResolvedDeployment,
    Scenario,
    SchedulerChoice,
    SearchSpace,
    ServingRun,
)
from app.core.spec import WorkloadSpec
from app.models.workload import DeploymentMixin, WorkloadMixin
from app.services.calibration import calibrated, calibrated_profile, resolve_calibration
from app.services.resolve import (
    check_inline_parts,
    request_scheduler,
    resolve_deployment,
    resolved_echo,
)
from app.services.simulate_fields import (
    check_agg_request,
    check_workload_fields,
    with_device_count,
)
from app.services.sizing import (
    check_closed_loop_size,
    check_poisson_size,
    check_simulation_size,
    search_cap,
    with_engine_defaults,
    workload_spec,
)

if TYPE_CHECKING:
    from app.models.capacity import PlanRequest
    from app.models.optimize import OptimizeRequest
    from app.models.simulate import SimulateRequest
    from app.services.context import ServiceContext

RequestT = TypeVar("RequestT", bound=WorkloadMixin)


@dataclass(frozen=True, slots=True)
class Resolved(Generic[RequestT]):
    """A request resolved: the question (``scenario``) and the request as it ran (``echo``,
    the answer's ``input``: every value of the scenario a request can give, given)."""

    scenario: Scenario
    echo: RequestT


def scenario_echo(request: RequestT, scenario: Scenario) -> RequestT:
    """The echo of ``scenario``: ``request`` with the scenario's resolved values given (the
    attention quantization run, the scheduler with every option, a search's batch cap)."""
    scheduler = scenario.scheduler
    resolved: dict[str, object] = {}
    if isinstance(scenario.search, SearchSpace):
        resolved["max_batch_size"] = scenario.search.max_batch_size
    elif isinstance(scenario.search, DisaggSearchSpace):
        resolved["max_batch_size"] = scenario.search.max_clients
    return resolved_echo(
        request,
        scenario.deployment,
        None if scheduler is None else scheduler.build(),
        **resolved,
    )


def _calibrated(
    context: ServiceContext, request: WorkloadMixin, profile: EngineProfile
) -> tuple[EngineProfile, CalibrationProfile | None]:
    """The request's calibration (a stored id or inline) and the profile with its fitted
    host and front-end times."""
    calibration = resolve_calibration(context, request.calibration)
    return calibrated_profile(profile, calibration), calibration


def _deployment(
    request: DeploymentMixin,
    profile: EngineProfile,
    calibration: CalibrationProfile | None,
    *,
    allow_paths: bool,
) -> ResolvedDeployment:
    """The catalog objects the request names, run by ``profile``, with the calibration's
    fitted device efficiencies."""
    deployment = resolve_deployment(request, allow_paths=allow_paths, profile=profile)
    return calibrated(deployment, calibration)


def resolve_simulation(
    context: ServiceContext, request: SimulateRequest, *, allow_paths: bool = False
) -> Resolved[SimulateRequest]:
    """An aggregated ``/v1/simulate`` request (mode agg) resolved: one layout."""
    check_inline_parts(request)
    check_agg_request(request)
    request, profile = with_engine_defaults(with_device_count(request))
    check_workload_fields(request)
    profile, calibration = _calibrated(context, request, profile)
    deployment = _deployment(request, profile, calibration, allow_paths=allow_paths)
    assert request.dp_size is not None  # with_device_count derived it
    layout = ParallelLayout(tp=request.tp_size, dp=request.dp_size, ep=request.ep_size)
    spec = workload_spec(request, layout.num_devices, profile)
    scheduler = request_scheduler(request, profile, deployment.device)
    assert request.workload is not None  # with_engine_defaults filled it in
    scenario = Scenario(
        operation="simulate",
        deployment=deployment,
        spec=spec,
        serving=ServingRun(
            workload=request.workload,
            window=request.window,
            concurrency=request.concurrency,
            requests_per_client=request.requests_per_client,
            request_rate=request.request_rate,
            num_requests=request.num_requests,
            max_concurrency=request.max_concurrency,
            seed=request.seed,
            include_timeline=request.include_timeline,
            force_simulation=request.force_simulation,
        ),
        scheduler=SchedulerChoice.of(scheduler),
        layout=layout,
    )
    return Resolved(scenario, scenario_echo(request, scenario))


def search_devices(request: OptimizeRequest) -> int:
    """Devices of the searched instance: the prefill instance in pd_ratio, else all of them."""
    if request.mode == "pd_ratio":
        return request.prefill_devices_per_instance or max(1, request.num_devices // 2)
    return request.num_devices


def _check_search(request: OptimizeRequest, spec: WorkloadSpec) -> int:
    """The workload and the search size; the batch cap."""
    if request.workload not in SEARCHED_WORKLOADS:
        raise InvalidParameterError(
            "workload",
            request.workload,
            f"one of {', '.join(SEARCHED_WORKLOADS)}: the optimizer searches concurrency, not a "
            "request rate (simulate a poisson workload one rate at a time: POST /v1/simulate)",
        )
    max_batch = search_cap(request, spec)
    if request.workload != "burst" and request.mode != "agg":
        raise InvalidParameterError(
            "workload", request.workload, f"'burst' for mode {request.mode!r} (closed_loop: agg)"
        )
    return max_batch


def resolve_search(
    context: ServiceContext, request: OptimizeRequest, *, allow_paths: bool = False
) -> Resolved[OptimizeRequest]:
    """An ``/v1/optimize`` request of the aggregated family (agg, disagg_prefill,
    disagg_decode, pd_ratio) resolved: the search space. Only mode agg runs a step scheduler
    (the others price prefill jobs and decode batches on their own)."""
    check_inline_parts(request)
    if request.max_workers is not None:
        raise InvalidParameterError(
            "max_workers", request.max_workers, f"omitted for mode {request.mode!r} (mode disagg)"
        )
    request, profile = with_engine_defaults(request)
    profile, calibration = _calibrated(context, request, profile)
    spec = workload_spec(request, search_devices(request), profile)
    max_batch = _check_search(request, spec)
    deployment = _deployment(request, profile, calibration, allow_paths=allow_paths)
    scheduler = (
        SchedulerChoice.of(request_scheduler(request, profile, deployment.device))
        if request.mode == "agg"
        else None
    )
    assert request.workload is not None  # with_engine_defaults filled it in
    scenario = Scenario(
        operation="optimize",
        deployment=deployment,
        spec=spec,
        serving=ServingRun(
            workload=request.workload,
            window=request.window,
            requests_per_client=request.requests_per_client,
            force_simulation=request.force_simulation,
        ),
        scheduler=scheduler,
        search=SearchSpace(
            mode=request.mode,
            num_devices=request.num_devices,
            tp_sizes=None if request.tp_sizes is None else tuple(request.tp_sizes),
            ep_sizes=None if request.ep_sizes is None else tuple(request.ep_sizes),
            max_batch_size=max_batch,
            prefill_devices_per_instance=request.prefill_devices_per_instance,
            decode_devices_per_instance=request.decode_devices_per_instance,
            serving_overhead_ms=request.serving_overhead_ms,
            top_k=request.top_k,
            include_probes=request.include_probes,
        ),
    )
    return Resolved(scenario, scenario_echo(request, scenario))


def resolve_plan(context: ServiceContext, request: PlanRequest) -> Resolved[PlanRequest]:
    """A ``/v1/plan`` request resolved: one replica layout, Poisson arrivals, the target."""
    check_inline_parts(request)
    request, profile = with_engine_defaults(request)
    profile, calibration = _calibrated(context, request, profile)
    deployment = _deployment(request, profile, calibration, allow_paths=False)
    layout = ParallelLayout(tp=request.tp_size, dp=request.dp_size, ep=request.ep_size)
    spec = workload_spec(request, layout.num_devices, profile)
    scheduler = request_scheduler(request, profile, deployment.device)
    rate = request.request_rate
    if rate is None:
        assert request.output_token_rate is not None  # the model's validator
        rate = request.output_token_rate / request.output_length
    scenario = Scenario(
        operation="plan",
        deployment=deployment,
        spec=spec,
        serving=ServingRun(
            workload="poisson",
            window="benchmark",
            num_requests=request.num_requests,
            seed=request.seed,
        ),
        scheduler=SchedulerChoice.of(scheduler),
        layout=layout,
        target=CapacityTarget(
            request_rate=rate,
            sla=Sla(
                ttft_limit_ms=request.ttft_limit_ms,
                tpot_limit_ms=request.tpot_limit_ms,
                percentile=request.percentile,
                ttft_overhead_ms=spec.ttft_overhead_ms,
            ),
            headroom=request.headroom,
            price_per_device_hour=request.price_per_device_hour,
        ),
    )
    return Resolved(scenario, scenario_echo(request, scenario))


def resolve_disagg_simulation(
    context: ServiceContext, request: SimulateRequest, *, allow_paths: bool = False
) -> Resolved[SimulateRequest]:
    """A ``/v1/simulate`` request with mode disagg resolved: two pools, no step scheduler."""
    from app.services import disagg_fields as fields

    check_inline_parts(request)
    fields.check_simulate_fields(request)
    request, profile = with_engine_defaults(fields.with_pool_defaults(request))
    prefill, decode = (fields.pool_layout(request, pool) for pool in fields.POOLS)
    workers = {pool: int(getattr(request, f"{pool}_workers")) for pool in fields.POOLS}
    num_devices = fields.check_devices(
        request,
        workers["prefill"] * prefill.num_devices,
        workers["decode"] * decode.num_devices,
    )
    request = request.model_copy(update={"num_devices": num_devices})
    deployment = resolve_deployment(request, allow_paths=allow_paths, profile=profile)
    spec = workload_spec(request, num_devices, profile)
    assert request.workload is not None  # with_pool_defaults filled it in
    serving = ServingRun(
        workload=request.workload,
        window=request.window,
        concurrency=request.concurrency,
        requests_per_client=request.requests_per_client,
        request_rate=request.request_rate,
        num_requests=request.num_requests,
        seed=request.seed,
    )
    _check_disagg_run_size(serving, spec)
    pools = DisaggPools(
        prefill_workers=workers["prefill"],
        prefill_layout=prefill,
        decode_workers=workers["decode"],
        decode_layout=decode,
        decode_deployment=fields.decode_deployment(
            request, deployment, profile, allow_paths=allow_paths
        ),
        link=fields.pool_link(request),
    )
    scenario = Scenario(
        operation="simulate",
        deployment=deployment,
        spec=spec,
        serving=serving,
        scheduler=None,  # prefill jobs and decode steps run in separate pools
        layout=pools,
    )
    return Resolved(scenario, scenario_echo(request, scenario))


def _check_disagg_run_size(serving: ServingRun, spec: WorkloadSpec) -> None:
    """A disaggregated run's planning cost: Poisson requests, or clients x requests each."""
    if serving.workload == "poisson":
        assert serving.num_requests is not None  # with_pool_defaults filled it in
        check_poisson_size(spec, serving.num_requests)
        return
    assert serving.concurrency is not None  # check_simulate_fields
    check_simulation_size(spec, 1, "concurrency")  # the prefill chunk bound
    check_closed_loop_size(spec, serving.concurrency, serving.requests_per_client, "concurrency")


def resolve_disagg_search(
    request: OptimizeRequest, *, allow_paths: bool = False
) -> Resolved[OptimizeRequest]:
    """An ``/v1/optimize`` request with mode disagg resolved: every worker layout of each
    pool, the client bound searched (the echo's ``max_batch_size``), no step scheduler."""
    from app.services import disagg_fields as fields

    check_inline_parts(request)
    fields.check_search_fields(request)
    request, profile = with_engine_defaults(fields.searched_request(request))
    prefill, decode = (fields.pool_layouts(request, pool) for pool in fields.POOLS)
    spec = workload_spec(request, request.num_devices, profile)
    check_simulation_size(spec, 1, "max_batch_size")  # the prefill chunk bound
    per_client = request.requests_per_client * spec.prefill_num_chunks
    # The wire's bound on max_batch_size is the search's too, so the echo can be re-sent.
    max_clients = min(
        limits.MAX_SEARCH_BATCH_SIZE,
        max(1, limits.MAX_CLOSED_LOOP_REQUEST_CHUNKS // per_client),
    )
    if request.max_batch_size is not None:  # null: derived, the bound above
        check_closed_loop_size(
            spec, request.max_batch_size, request.requests_per_client, "max_batch_size"
        )
        max_clients = request.max_batch_size
    deployment = resolve_deployment(request, allow_paths=allow_paths, profile=profile)
    assert request.max_workers is not None  # searched_request filled it in
    scenario = Scenario(
        operation="optimize",
        deployment=deployment,
        spec=spec,
        serving=ServingRun(
            workload="closed_loop",
            window=request.window,
            requests_per_client=request.requests_per_client,
        ),
        scheduler=None,
        search=DisaggSearchSpace(
            num_devices=request.num_devices,
            prefill_layouts=tuple(prefill),
            decode_layouts=tuple(decode),
            max_workers=request.max_workers,
            max_clients=max_clients,
            top_k=request.top_k,
            include_probes=request.include_probes,
        ),
    )
    return Resolved(scenario, scenario_echo(request, scenario))
