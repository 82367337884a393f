"""``POST /v1/plan`` / ``chunkwise plan``: the replicas and devices a target traffic needs
under an SLA (:mod:`app.core.optimizer.capacity`), resolved like a simulate request (engine
profile, calibration, catalog), with every forward through the latency cache."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.core import limits
from app.core.errors import InfeasibleError
from app.core.optimizer.capacity import infeasible_plan, plan_capacity
from app.core.parallel import ParallelLayout
from app.core.scenario import Scenario
from app.core.workload import ranks_are_coupled, simulate_poisson_serving, simulate_serving
from app.core.workload.admission import running_cap
from app.core.workload.metrics import ServingResult
from app.services.context import ServiceContext
from app.services.cost_model import ModelFactory
from app.services.finite import finite_or_infeasible
from app.services.scenario import resolve_plan
from app.services.sizing import check_poisson_size

if TYPE_CHECKING:
    from app.models.capacity import PlanRequest, PlanResponse

#: Requests each client sends in the saturation probe (a closed loop at the running cap).
SATURATION_REQUESTS_PER_CLIENT = 3


def plan(context: ServiceContext, request: PlanRequest) -> PlanResponse:
    """The capacity plan of one replica layout (see the core module)."""
    resolved = resolve_plan(context, request)
    return evaluate_plan(context, resolved.scenario, resolved.echo)


def evaluate_plan(context: ServiceContext, scenario: Scenario, echo: PlanRequest) -> PlanResponse:
    """A plan scenario's answer (``echo`` is its ``input``)."""
    from app.models.capacity import PlanResponse

    data, layout, target = scenario.spec, scenario.layout, scenario.target
    assert isinstance(layout, ParallelLayout) and target is not None
    assert scenario.scheduler is not None  # a plan scenario
    num_requests = scenario.serving.num_requests
    assert num_requests is not None  # a plan's default is the wire's
    deployment = scenario.deployment
    scheduler = scenario.scheduler.build()
    dp = layout.dp
    check_poisson_size(data, max(1, num_requests // dp), replicas=dp)
    factory = ModelFactory(context, deployment)
    model = factory(layout)
    cap = deployment.running_cap()
    coupled = ranks_are_coupled(deployment.model.is_moe, layout)
    sla = target.sla
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
                num_requests=max(num_requests, dp),
                seed=scenario.serving.seed,
                max_num_seqs=cap,
            )

        result = plan_capacity(
            simulate=at_rate,
            saturated_rate=saturated,
            sla=sla,
            target_rate=target.request_rate,
            headroom=target.headroom,
            devices_per_replica=layout.num_devices,
            output_length=data.output_length,
            price_per_device_hour=target.price_per_device_hour,
        )
    except InfeasibleError as exc:
        result = infeasible_plan(target.request_rate, target.headroom, f"memory: {exc}")
    factory.flush()
    ttft = tpot = None
    if result.at_rate is not None and result.reason is None:
        ttft, tpot = sla.statistic(result.at_rate)
    response = PlanResponse(
        input=echo,
        engine=deployment.profile.to_dict(),
        parallel=layout.label,
        devices_per_replica=layout.num_devices,
        target_request_rate=target.request_rate,
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
