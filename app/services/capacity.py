"""``POST /v1/plan`` / ``chunkwise plan``: the replicas and devices a target traffic needs
under an SLA (:mod:`app.core.optimizer.capacity`), resolved like a simulate request (engine
profile, calibration, catalog), with every forward through the latency cache."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.core import limits
from app.core.errors import InfeasibleError
from app.core.optimizer.capacity import Sla, infeasible_plan, plan_capacity
from app.core.parallel import ParallelLayout
from app.core.workload import ranks_are_coupled, simulate_poisson_serving, simulate_serving
from app.core.workload.admission import running_cap
from app.core.workload.metrics import ServingResult
from app.services.calibration import calibrated, calibrated_profile, resolve_calibration
from app.services.context import ServiceContext
from app.services.cost_model import ModelFactory
from app.services.finite import finite_or_infeasible
from app.services.resolve import request_scheduler, resolve_deployment
from app.services.sizing import check_poisson_size, with_engine_defaults, workload_spec

if TYPE_CHECKING:
    from app.models.capacity import PlanRequest, PlanResponse

#: Requests each client sends in the saturation probe (a closed loop at the running cap).
SATURATION_REQUESTS_PER_CLIENT = 3


def plan(context: ServiceContext, request: PlanRequest) -> PlanResponse:
    """The capacity plan of one replica layout (see the core module)."""
    from app.models.capacity import PlanResponse

    request, profile = with_engine_defaults(request)
    calibration = resolve_calibration(context, request.calibration)
    profile = calibrated_profile(profile, calibration)
    deployment = calibrated(resolve_deployment(request, profile=profile), calibration)
    layout = ParallelLayout(tp=request.tp_size, dp=request.dp_size, ep=request.ep_size)
    data = workload_spec(request, layout.num_devices, profile)
    scheduler = request_scheduler(request, profile, deployment.device)
    dp = layout.dp
    check_poisson_size(data, max(1, request.num_requests // dp), replicas=dp)
    factory = ModelFactory(context, deployment)
    model = factory(layout)
    device = deployment.device
    cap = profile.running_cap(device.hbm_capacity_gb, device.name)
    coupled = ranks_are_coupled(deployment.model.is_moe, layout)
    target = request.request_rate
    if target is None:
        assert request.output_token_rate is not None  # the model's validator
        target = request.output_token_rate / request.output_length
    sla = Sla(
        ttft_limit_ms=request.ttft_limit_ms,
        tpot_limit_ms=request.tpot_limit_ms,
        percentile=request.percentile,
        ttft_overhead_ms=data.ttft_overhead_ms,
    )
    saturated = 0.0
    try:
        running = running_cap(data, model, scheduler, cap) or limits.MAX_SIM_CONCURRENCY
        clients = min(running, limits.MAX_SIM_CONCURRENCY) * dp
        saturated = simulate_serving(
            data,
            clients,
            model,
            scheduler,
            dp=dp,
            num_requests=clients * SATURATION_REQUESTS_PER_CLIENT,
            max_num_seqs=cap,
            coupled=coupled,
        ).request_throughput

        def at_rate(rate: float) -> ServingResult:
            return simulate_poisson_serving(
                data,
                rate,
                model,
                scheduler,
                dp=dp,
                num_requests=max(request.num_requests, dp),
                seed=request.seed,
                max_num_seqs=cap,
            )

        result = plan_capacity(
            simulate=at_rate,
            saturated_rate=saturated,
            sla=sla,
            target_rate=target,
            headroom=request.headroom,
            devices_per_replica=layout.num_devices,
            output_length=request.output_length,
            price_per_device_hour=request.price_per_device_hour,
        )
    except InfeasibleError as exc:
        result = infeasible_plan(target, request.headroom, f"memory: {exc}")
    factory.flush()
    ttft = tpot = None
    if result.at_rate is not None and result.reason is None:
        ttft, tpot = sla.statistic(result.at_rate)
    response = PlanResponse(
        input=request,
        engine=profile.to_dict(),
        parallel=layout.label,
        devices_per_replica=layout.num_devices,
        target_request_rate=target,
        sustainable_request_rate=result.sustainable_rate,
        saturated_request_rate=saturated,
        replicas=result.replicas,
        devices=result.devices,
        utilisation=result.utilisation,
        ttft_ms=ttft,
        tpot_ms=tpot,
        statistic=sla.statistic_name,
        cost_per_hour=result.cost_per_hour,
        cost_per_million_output_tokens=result.cost_per_million_output_tokens,
        feasible=result.reason is None,
        reason=result.reason,
    )
    return finite_or_infeasible(response)
