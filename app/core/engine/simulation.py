"""Serving simulation of one engine instance under a burst: the entry points.

Three phases, so the latency model sees every distinct forward shape at most once per call and a
cache can fetch all shapes in one round trip:

1. **plan** (:func:`plan_serving`) — run the engine loop (:class:`~app.core.engine.loop.Engine`)
   over request *groups* (no clock needed: decisions depend on counts only) and record *runs*:
   consecutive steps with the same decision; or, for a prompt of one chunk, the closed-form
   waves (:mod:`app.core.engine.waves`);
2. **evaluate** — the plan's unique shapes go to the latency model once each
   (:func:`~app.core.engine.clock.evaluate_shapes`);
3. **replay** (:func:`replay`) — walk the runs, advance the clock, and accumulate TTFT, TPOT
   and the makespan.

Semantics follow the RFC and DIGEST: ``N`` requests arrive at ``t = 0``; a request's first token
is emitted by the step that completes its last chunk; decode steps emit one token per request;
finished decode groups leave, the others re-queue behind groups promoted from prefill. The
closed-loop and Poisson workloads (:mod:`app.core.workload`) run the same engine loop with
another arrival source.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from app.core.chunking import require_int
from app.core.cost import AnyShape, LatencyModel, interrupt_of
from app.core.engine.arrivals import ArrivalSource, Burst
from app.core.engine.clock import evaluate_shapes, replay_time_simulation
from app.core.engine.loop import Engine
from app.core.engine.plan import (
    MAX_CONCURRENCY,
    RequestRecords,
    SimulationPlan,
    SimulationResult,
)
from app.core.engine.waves import WavesPlan, plan_waves, replay_waves
from app.core.scheduler import Scheduler, default_scheduler
from app.core.spec import WorkloadSpec

AnyPlan = SimulationPlan | WavesPlan


def run_engine(
    spec: WorkloadSpec,
    concurrency: int,
    scheduler: Scheduler,
    arrivals: ArrivalSource,
    *,
    max_running: int | None = None,
    budget_replicas: int = 1,
    interrupt: Callable[[], None] | None = None,
) -> tuple[SimulationPlan, RequestRecords]:
    """One engine run over ``arrivals``: its plan (``concurrency`` requests at ``t = 0``) and
    when requests arrived, started and finished. ``budget_replicas`` ranks stepping together
    (coupled data-parallel ranks) give the step ``budget_replicas`` budgets of tokens; the
    chunks stay the spec's."""
    engine = Engine(
        spec.get_prefill_chunk_plan(),
        spec.output_length,
        spec.max_batched_tokens * budget_replicas,
        scheduler,
        arrivals,
        max_running=max_running,
        recv_interval=spec.recv_interval,
        # TensorRT-LLM skips its batch wait under attention data parallelism (coupled ranks).
        batch_wait_iters=spec.batch_wait_iters if budget_replicas == 1 else 0,
        batch_wait_tokens=spec.batch_wait_max_tokens_ratio * spec.max_batched_tokens,
        interrupt=interrupt,
        output_classes=spec.output_classes,
    )
    runs, records = engine.run()
    plan = SimulationPlan.of_runs(runs, spec, concurrency, scheduler, cycle=records.cycle)
    return plan, records


def plan_serving(
    spec: WorkloadSpec,
    concurrency: int,
    scheduler: Scheduler | None = None,
    *,
    force_simulation: bool = False,
    interrupt: Callable[[], None] | None = None,
) -> AnyPlan:
    """Plan a burst of ``concurrency`` requests: closed-form waves when the prompt is one chunk
    (unless ``force_simulation``, or a length range: its outputs finish at several steps),
    else the time simulation's runs (``interrupt``: the caller's deadline check, see
    :class:`~app.core.engine.loop.Engine`)."""
    require_int("concurrency", concurrency, 1, MAX_CONCURRENCY)
    fixed = len(spec.output_classes) == 1
    if spec.prefill_num_chunks == 1 and fixed and not force_simulation:
        return plan_waves(spec, concurrency)
    scheduler = scheduler or default_scheduler()
    return run_engine(spec, concurrency, scheduler, Burst(concurrency), interrupt=interrupt)[0]


def replay(
    plan: AnyPlan,
    latencies: Mapping[AnyShape, float],
    scheduler: Scheduler | None = None,
    *,
    record_steps: bool = False,
) -> SimulationResult:
    """Metrics of a planned burst from the latencies of its shapes."""
    if isinstance(plan, WavesPlan):
        return replay_waves(plan, latencies)
    scheduler = scheduler or default_scheduler()
    return replay_time_simulation(plan, latencies, scheduler, record_steps=record_steps)


def simulate(
    spec: WorkloadSpec,
    concurrency: int,
    latency: LatencyModel,
    scheduler: Scheduler | None = None,
    *,
    force_simulation: bool = False,
    record_steps: bool = False,
) -> SimulationResult:
    """A burst of ``concurrency`` requests on one replica: closed-form waves for one chunk, the
    time simulation for more (or when forced). ``result.method`` says which one ran."""
    scheduler = scheduler or default_scheduler()
    plan = plan_serving(
        spec,
        concurrency,
        scheduler,
        force_simulation=force_simulation,
        interrupt=interrupt_of(latency),
    )
    return replay(plan, evaluate_shapes(plan.shapes, latency), scheduler, record_steps=record_steps)
