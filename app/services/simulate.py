"""``POST /v1/simulate``: one configuration (burst, closed loop or poisson) over its replicas."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.core import limits
from app.core.calibration import answer_notice, at_risk
from app.core.cost import ForwardShape
from app.core.engine import SimulationResult, StepRecord, combine_replicas, plan_serving, replay
from app.core.errors import InfeasibleError
from app.core.optimizer.agg import largest_prefill_shape, limit_reason
from app.core.parallel import ParallelLayout
from app.core.scenario import Scenario
from app.core.scheduler import Scheduler
from app.core.spec import WorkloadSpec
from app.core.workload import (
    ServingResult,
    ranks_are_coupled,
    simulate_poisson_serving,
    simulate_serving,
)
from app.models.optimize import RunStats
from app.services.advice import memory_advice
from app.services.calibration import (
    uncertainty,
)
from app.services.context import ServiceContext
from app.services.cost_model import CachedServingModel, ForwardRecord, ModelFactory
from app.services.finite import finite_or_infeasible
from app.services.scenario import resolve_simulation
from app.services.sizing import (
    check_closed_loop_size,
    check_poisson_size,
    check_simulation_size,
    check_timeline_size,
    poisson_split,
    replica_split,
)

if TYPE_CHECKING:  # the wire models load with the first simulate, not with app.services
    from app.models.simulate import (
        DisaggSimulateResponse,
        ForwardShapeOut,
        ReplicaShare,
        SimulateRequest,
        SimulateResponse,
        StepOut,
    )


def simulate(
    context: ServiceContext, request: SimulateRequest, *, allow_paths: bool = False
) -> SimulateResponse | DisaggSimulateResponse:
    """One configuration: ``concurrency`` requests (or clients) in total over the replicas
    (``mode: "disagg"``: a prefill pool and a decode pool, :mod:`.disagg_simulate`).

    One MGET for every shape the plan needs, the misses computed, one pipelined write.
    """
    if request.mode == "disagg":  # its own pools, loaded when asked for
        from app.services.disagg_simulate import simulate_disagg

        return simulate_disagg(context, request, allow_paths=allow_paths)
    started = time.perf_counter()
    resolved = resolve_simulation(context, request, allow_paths=allow_paths)
    return evaluate(context, resolved.scenario, resolved.echo, started=started)


def evaluate(
    context: ServiceContext, scenario: Scenario, echo: SimulateRequest, *, started: float
) -> SimulateResponse:
    """A simulate scenario's answer (``echo`` is its ``input``): the run's size checks, then
    the burst, closed loop or Poisson run over the replicas."""
    data, serving, layout = scenario.spec, scenario.serving, scenario.layout
    assert isinstance(layout, ParallelLayout) and scenario.scheduler is not None  # one layout
    factory = ModelFactory(context, scenario.deployment)
    run = _SimulationRun(echo, scenario, data, layout, scenario.scheduler.build(), factory, started)
    if serving.workload == "poisson":
        shares = poisson_split(serving.num_requests, serving.max_concurrency, layout.dp)
        check_poisson_size(data, shares[0][0], replicas=layout.dp)
        check_timeline_size(serving.include_timeline, data, shares[0][0], "num_requests", layout.dp)
        return _simulate_poisson(run, factory(layout), shares)
    assert serving.concurrency is not None  # check_workload_fields
    split = replica_split(serving.concurrency, layout.dp)
    busiest = split[0][0]
    check_simulation_size(data, busiest, "concurrency", replicas=layout.dp)
    check_timeline_size(serving.include_timeline, data, busiest, "concurrency", layout.dp)
    model = factory(layout)
    if serving.workload == "closed_loop":
        check_closed_loop_size(
            data, busiest, serving.requests_per_client, "concurrency", replicas=layout.dp
        )
        return _simulate_closed_loop(run, model, split)
    return _simulate_burst(run, model, split)


def _simulate_burst(
    run: _SimulationRun, model: CachedServingModel, split: list[tuple[int, int]]
) -> SimulateResponse:
    """``concurrency`` requests at once per replica share: one engine plan per share, every
    shape the plans and the memory check need read in one MGET, then replayed."""
    from app.models.simulate import ReplicaShare

    serving, data, scheduler = run.scenario.serving, run.data, run.scheduler
    busiest = split[0][0]
    plans = [
        (
            plan_serving(
                data,
                size,
                scheduler,
                force_simulation=serving.force_simulation,
                interrupt=model.check_deadline,
            ),
            replicas,
        )
        for size, replicas in split
    ]
    memory_shapes = (data.decode_shape(busiest), largest_prefill_shape(data, busiest))
    shapes = [shape for plan, _ in plans for shape in plan.shapes]
    model.prefetch((*shapes, *memory_shapes))  # the request's only cache read
    result = combine_replicas(
        [
            (
                replay(
                    plan,
                    model.forward_latencies_ms(plan.shapes),
                    scheduler,
                    record_steps=serving.include_timeline and index == 0,
                ),
                replicas,
            )
            for index, (plan, replicas) in enumerate(plans)
        ]
    )
    memory = model.records(memory_shapes)
    left_gb = min(r.memory_left_gb for r in memory)
    reason = (
        f"memory: {left_gb:.2f} GB left per device"
        if left_gb < 0
        else limit_reason(data, data.reported_ttft_ms(result.ttft_ms), result.tpot_ms)
    )
    return run.response(
        result,
        memory=memory,
        reason=reason,
        split=[ReplicaShare(replicas=n, concurrency=size, num_requests=size) for size, n in split],
        batch_size=busiest,
        concurrency=result.concurrency,
    )


@dataclass(frozen=True, slots=True)
class _SimulationRun:
    """One simulate scenario while it runs, and what its response echoes (``request``)."""

    request: SimulateRequest
    scenario: Scenario
    data: WorkloadSpec
    layout: ParallelLayout
    scheduler: Scheduler
    factory: ModelFactory
    started: float

    @property
    def coupled(self) -> bool:
        """Whether the data-parallel replicas step together (attention DP + EP MoE)."""
        return ranks_are_coupled(self.factory.deployment.model.is_moe, self.layout)

    @property
    def max_num_seqs(self) -> int | None:
        """The engine profile's running cap on the device (``None``: only the KV pool)."""
        return self.scenario.deployment.running_cap()

    def response(
        self,
        result: SimulationResult | ServingResult | None,
        *,
        memory: Sequence[ForwardRecord],
        reason: str | None,
        split: list[ReplicaShare],
        **extra: Any,
    ) -> SimulateResponse:
        """The response (zeros when nothing could run: ``result is None``); the cache writes
        of the request happen here (one pipeline)."""
        from app.models.simulate import SimulateResponse

        self.factory.flush()
        data, layout = self.data, self.layout
        suggestions: list[str] = []
        if reason is not None and reason.startswith("memory"):
            in_flight = extra.get("batch_size") or 1
            advice = memory_advice(self.factory.deployment, layout, data, in_flight)
            reason, suggestions = advice.reason, list(advice.suggestions)
        metrics: dict[str, Any] = {"method": "none", "makespan_ms": 0.0}
        if isinstance(result, SimulationResult):
            metrics = {"method": result.method, "makespan_ms": result.makespan_ms}
        elif result is not None:
            metrics = {
                "method": result.method,
                "makespan_ms": result.duration_ms,
                "num_requests": result.num_requests,
                "measured_requests": result.measured_requests,
                "e2e_ms": result.e2e_ms,
                "total_throughput": result.total_throughput,
                "mean_running_batch": result.mean_running_batch,
                "mean_prefill_tokens_per_step": result.mean_prefill_tokens_per_step,
                "mean_decode_tokens_per_step": result.mean_decode_tokens_per_step,
                "max_running": result.max_running,
            }
        output = result.throughput_tokens_s if result else 0.0
        timeline, truncated = _timeline_out(result.timeline if result else None)
        if result is not None and "e2e_ms" in metrics:
            metrics["e2e_ms"] += data.ttft_overhead_ms  # the first token's wait ends later too
        ttft_ms = data.reported_ttft_ms(result.ttft_ms) if result else 0.0
        tpot_ms = result.tpot_ms if result else 0.0
        sure = uncertainty(
            self.factory.deployment,
            input_length=data.input_length,
            output_length=data.output_length,
            concurrency=self.scenario.serving.concurrency,
            ttft_ms=ttft_ms,
            tpot_ms=tpot_ms,
            throughput=output,
        )
        known = result is not None and reason is None
        confidence = (
            sure.intervals.sla_confidence(
                ttft_limit_ms=self.request.ttft_limit_ms, tpot_limit_ms=self.request.tpot_limit_ms
            )
            if known
            else None
        )
        response = SimulateResponse(
            input=self.request,
            engine=self.factory.deployment.profile.to_dict(),
            max_batched_tokens=data.max_batched_tokens,
            scheduler=self.scheduler.describe(),
            parallel=layout.label,
            num_devices=layout.num_devices,
            replica_split=split,
            effective_input_length=data.effective_input_length,
            prefill_num_chunks=data.prefill_num_chunks,
            ttft_ms=ttft_ms,
            tpot_ms=tpot_ms,
            ttft_ms_interval=sure.intervals.ttft_ms if known else None,
            tpot_ms_interval=sure.intervals.tpot_ms if known else None,
            output_throughput_interval=sure.intervals.throughput if known else None,
            sla_confidence=confidence,
            notice=answer_notice(sure.intervals, [layout.label] if at_risk(confidence) else [])
            if known
            else None,
            calibration=sure.calibration,
            output_throughput=output,
            request_throughput=result.request_throughput if result else 0.0,
            throughput_per_device=output / layout.num_devices,
            steps=result.steps if result else 0,
            memory_left_gb=min(r.memory_left_gb for r in memory),
            memory_gb=dict(memory[0].memory_gb),
            feasible=reason is None,
            reason=reason,
            suggestions=suggestions,
            timeline=timeline,
            timeline_truncated=truncated,
            stats=_single_run_stats(self.factory, self.started),
            **{**metrics, **extra},
        )
        return finite_or_infeasible(response)


def _simulate_closed_loop(
    run: _SimulationRun, model: CachedServingModel, split: list[tuple[int, int]]
) -> SimulateResponse:
    """``concurrency`` clients in total, each re-sending; KV admission queues the rest."""
    from app.models.simulate import ReplicaShare

    serving = run.scenario.serving
    assert serving.concurrency is not None
    result: ServingResult | None = None
    reason: str | None = None
    try:
        result = simulate_serving(
            run.data,
            serving.concurrency,
            model,
            run.scheduler,
            dp=run.layout.dp,
            num_requests=serving.concurrency * serving.requests_per_client,
            window=serving.window,
            max_num_seqs=run.max_num_seqs,
            record_steps=serving.include_timeline,
            coupled=run.coupled,
            plans=run.factory.context.plans,
        )
    except InfeasibleError as exc:
        reason = f"memory: {exc}"
    per_client = serving.requests_per_client
    return _serving_response(
        run,
        model,
        result,
        reason,
        in_flight=split[0][0],
        split=[
            ReplicaShare(replicas=n, concurrency=size, num_requests=size * per_client)
            for size, n in split
        ],
        batch_size=split[0][0],
        concurrency=serving.concurrency,
        workload="closed_loop",
        window=serving.window,
    )


def _simulate_poisson(
    run: _SimulationRun, model: CachedServingModel, shares: list[tuple[int, int | None, int]]
) -> SimulateResponse:
    """Requests arriving at ``request_rate`` in total; KV admission queues the rest."""
    from app.models.simulate import ReplicaShare

    serving = run.scenario.serving
    assert serving.request_rate is not None
    dp = run.layout.dp
    result: ServingResult | None = None
    reason: str | None = None
    try:
        result = simulate_poisson_serving(
            run.data,
            serving.request_rate,
            model,
            run.scheduler,
            dp=dp,
            num_requests=sum(n * replicas for n, _, replicas in shares),
            seed=serving.seed,
            max_concurrency=serving.max_concurrency,
            max_num_seqs=run.max_num_seqs,
            record_steps=serving.include_timeline,
        )
    except InfeasibleError as exc:
        reason = f"memory: {exc}"
    busiest_requests, busiest_cap, _ = shares[0]
    return _serving_response(
        run,
        model,
        result,
        reason,
        in_flight=busiest_cap or busiest_requests,
        split=[
            ReplicaShare(
                replicas=replicas,
                concurrency=cap,
                num_requests=n,
                request_rate=serving.request_rate / dp,
            )
            for n, cap, replicas in shares
        ],
        batch_size=busiest_cap,
        concurrency=serving.max_concurrency,
        workload="poisson",
        window="benchmark",
        request_rate=serving.request_rate,
        max_concurrency=serving.max_concurrency,
        seed=serving.seed,
    )


def _serving_response(
    run: _SimulationRun,
    model: CachedServingModel,
    result: ServingResult | None,
    reason: str | None,
    *,
    in_flight: int,
    split: list[ReplicaShare],
    **extra: Any,
) -> SimulateResponse:
    """A closed-loop or poisson response: memory at the running batch of the busiest replica
    (``in_flight`` requests, fewer when KV admission caps them), and the serving metrics."""
    data = run.data
    running = in_flight
    if result is not None and result.max_running is not None:
        running = min(running, result.max_running)
    memory = model.records((data.decode_shape(max(1, running)), largest_prefill_shape(data, 1)))
    if result is not None and reason is None:
        reason = limit_reason(data, data.reported_ttft_ms(result.ttft_ms), result.tpot_ms)
    if result is None:
        extra["max_running"] = 0
    return run.response(result, memory=memory, reason=reason, split=split, **extra)


def _timeline_out(steps: Sequence[StepRecord] | None) -> tuple[list[StepOut] | None, bool]:
    """The step timeline of a response (its first entries) and whether it was cut."""
    from app.models.simulate import ForwardShapeOut, StepOut

    if steps is None:
        return None, False

    def shape_out(shape: ForwardShape | None) -> ForwardShapeOut | None:
        if shape is None:
            return None
        return ForwardShapeOut(
            concurrency=shape.concurrency, query_len=shape.query_len, seq_len=shape.seq_len
        )

    kept = [
        StepOut(
            start_ms=step.start_ms,
            step_ms=step.step_ms,
            repeat=step.repeat,
            p_step=step.p_step,
            prefill=shape_out(step.prefill_shape),
            prefill_ms=step.prefill_ms,
            d_step=step.d_step,
            decode=shape_out(step.decode_shape),
            decode_ms=step.decode_ms,
            first_tokens=step.first_tokens,
            finished=step.finished,
            fused=step.fused,
        )
        for step in steps[: limits.MAX_TIMELINE_ENTRIES]
    ]
    return kept, len(steps) > limits.MAX_TIMELINE_ENTRIES


def _single_run_stats(factory: ModelFactory, started: float) -> RunStats:
    """Statistics of a request that evaluated one configuration."""
    return RunStats(
        elapsed_ms=(time.perf_counter() - started) * 1e3,
        forward_evaluations=factory.usage.computed,
        shapes=factory.shapes,
        layouts=1,
        probes=1,
        cache=factory.counters(),
    )
