"""The closed-loop workload: ``C`` clients, each re-submitting as soon as its answer completes.

The RFC's ``burst`` workload starts N requests at ``t = 0`` and measures that one burst. The
``closed_loop`` workload is what ``benchmark_serving --max-concurrency C`` or aiperf measure:
``C`` clients, each re-submitting as soon as its answer completes, until ``num_requests``
requests were sent. Requests stay aggregated in groups (cost does not grow with C) and the same
engine loop, schedulers and latency models serve both workloads (the arrival source differs:
:class:`~app.core.engine.ClosedLoop`).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from app.core.chunking import require_int
from app.core.cost import LatencyModel, interrupt_of
from app.core.engine import MAX_CONCURRENCY, ClosedLoop, evaluate_shapes, run_engine
from app.core.parallel import split_over_replicas
from app.core.scheduler import Scheduler, default_scheduler
from app.core.spec import WorkloadSpec
from app.core.workload.admission import running_cap
from app.core.workload.coupled import BusiestRank
from app.core.workload.metrics import (
    MAX_REQUESTS,
    ServingPlan,
    ServingResult,
    combine_serving,
    replay_serving,
)
from app.core.workload.windows import Window, check_window

#: Requests sent per client when ``num_requests`` is not given (serving benchmarks send ~10).
DEFAULT_REQUESTS_PER_CLIENT = 10
#: Largest data-parallel degree a serving run spreads over.
MAX_DP = 1 << 16


def default_num_requests(clients: int) -> int:
    return min(DEFAULT_REQUESTS_PER_CLIENT * clients, MAX_REQUESTS)


PlanKey = tuple[object, ...]


class PlanMemo(Protocol):
    """Where plans are memoised across simulations that differ only in their latencies or
    limits (a calibration fit evaluates the same points under many parameter sets; a search
    repeated with other limits plans the same probes): a ``dict``, or a :class:`PlanCache`."""

    def get(self, key: PlanKey, /) -> ServingPlan | None: ...

    def __setitem__(self, key: PlanKey, plan: ServingPlan, /) -> None: ...


#: Plans a :class:`PlanCache` keeps at most (its item bound is the process's setting,
#: ``APP_PLAN_CACHE_ITEMS``; a 512-client closed loop holds ~6,000 runs and ~10,000 records).
PLAN_CACHE_MAX_PLANS = 512


class PlanCache:
    """A thread-safe LRU of plans for a process: at most ``max_plans`` plans and ``max_items``
    runs plus records in all (0: none kept). It holds scheduling decisions only, never a
    latency."""

    __slots__ = ("_entries", "_items", "_lock", "max_items", "max_plans")

    def __init__(self, max_items: int, max_plans: int = PLAN_CACHE_MAX_PLANS) -> None:
        require_int("max_plans", max_plans, 1, None)
        require_int("max_items", max_items, 0, None)
        self.max_plans, self.max_items = max_plans, max_items
        self._entries: OrderedDict[PlanKey, tuple[ServingPlan, int]] = OrderedDict()
        self._items = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: PlanKey, /) -> ServingPlan | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries.move_to_end(key)
            return found[0]

    def __setitem__(self, key: PlanKey, plan: ServingPlan, /) -> None:
        records = plan.records
        items = len(plan.engine.runs) + len(records.first) + len(records.finish)
        if items > self.max_items:
            return  # larger than the whole cache: not kept
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._items -= old[1]
            self._entries[key] = (plan, items)
            self._items += items
            while len(self._entries) > self.max_plans or self._items > self.max_items:
                self._items -= self._entries.popitem(last=False)[1][1]


def _memo_plan(
    plans: PlanMemo | None,
    key: PlanKey,
    make: Callable[[], ServingPlan],
    max_running: int | None,
) -> ServingPlan:
    """The plan under ``key``, made when missing; it reports the caller's ``max_running``
    (a plan made under a cap that never bound is shared with other caps that do not)."""
    if plans is None:
        return make()
    found = plans.get(key)
    if found is None:
        found = make()
        plans[key] = found
    if found.max_running != max_running:
        found = dataclasses.replace(found, max_running=max_running)
    return found


def _plan_key(
    spec: WorkloadSpec,
    clients: int,
    scheduler: Scheduler,
    num_requests: int | None,
    window: Window,
    max_running: int | None,
    budget_replicas: int,
) -> PlanKey:
    policy = tuple(sorted((k, repr(v)) for k, v in scheduler.describe().items()))
    # The limits and the per-request front-end time only judge or shift the reported metrics:
    # they do not plan.
    planned = dataclasses.replace(
        spec, ttft_overhead_ms=0.0, ttft_limit_ms=None, tpot_limit_ms=None
    )
    if num_requests is None:
        num_requests = default_num_requests(clients)
    # A cap of at least the clients never binds (no more requests exist): the same plan as none.
    binding = max_running if max_running is not None and max_running < clients else None
    return (planned, clients, policy, num_requests, window, binding, budget_replicas)


def plan_closed_loop(
    spec: WorkloadSpec,
    clients: int,
    scheduler: Scheduler | None = None,
    *,
    num_requests: int | None = None,
    window: Window = "benchmark",
    max_running: int | None = None,
    budget_replicas: int = 1,
    interrupt: Callable[[], None] | None = None,
) -> ServingPlan:
    """One replica's closed loop of ``clients`` clients, planned (no latency needed);
    ``budget_replicas`` > 1: that many coupled ranks as one engine (:mod:`.coupled`)."""
    require_int("concurrency", clients, 1, MAX_CONCURRENCY)
    check_window(window)
    if num_requests is None:
        num_requests = default_num_requests(clients)
    require_int("num_requests", num_requests, clients, MAX_REQUESTS)
    if max_running is not None:
        require_int("max_running", max_running, 1, MAX_REQUESTS)
    scheduler = scheduler or default_scheduler()
    arrivals = ClosedLoop(
        clients, num_requests, spec.arrival_spread, turnaround=spec.client_turnaround
    )
    engine, records = run_engine(
        spec,
        clients,
        scheduler,
        arrivals,
        max_running=max_running,
        budget_replicas=budget_replicas,
        interrupt=interrupt,
    )
    return ServingPlan(
        engine=engine,
        records=records,
        clients=clients,
        num_requests=num_requests,
        window=window,
        max_running=max_running,
    )


def simulate_closed_loop(
    spec: WorkloadSpec,
    clients: int,
    latency: LatencyModel,
    scheduler: Scheduler | None = None,
    *,
    num_requests: int | None = None,
    window: Window = "benchmark",
    max_running: int | None = None,
    record_steps: bool = False,
    plans: PlanMemo | None = None,
    token_gaps: bool = False,
) -> ServingResult:
    """Plan, evaluate each distinct forward shape once, replay: one replica's closed loop
    (``plans``: reuse a plan made for the same spec, clients and policy; ``token_gaps``: with
    the gaps between tokens, :func:`~app.core.workload.metrics.replay_serving`)."""
    scheduler = scheduler or default_scheduler()
    plan = _memo_plan(
        plans,
        _plan_key(spec, clients, scheduler, num_requests, window, max_running, 1),
        lambda: plan_closed_loop(
            spec,
            clients,
            scheduler,
            num_requests=num_requests,
            window=window,
            max_running=max_running,
            interrupt=interrupt_of(latency),
        ),
        max_running,
    )
    latencies = evaluate_shapes(plan.shapes, latency)
    return replay_serving(
        plan, latencies, scheduler, record_steps=record_steps, token_gaps=token_gaps
    )


def simulate_serving(
    spec: WorkloadSpec,
    concurrency: int,
    latency: LatencyModel,
    scheduler: Scheduler | None = None,
    *,
    dp: int = 1,
    num_requests: int | None = None,
    window: Window = "benchmark",
    max_num_seqs: int | None = None,
    record_steps: bool = False,
    coupled: bool = False,
    plans: PlanMemo | None = None,
) -> ServingResult:
    """Closed-loop serving of ``concurrency`` clients over ``dp`` data-parallel replicas.

    ``coupled``: the replicas step together (attention data parallelism with expert-parallel
    MoE, whose all-to-all joins every rank in every layer), simulated as one engine whose step
    lasts as long as the busiest rank's (:func:`~app.core.workload.coupled.
    simulate_coupled_closed_loop`); otherwise each replica runs on its own.

    Each replica serves its share of the clients (``concurrency / dp``, as evenly as integers
    allow) with its own budget and KV cache; ``num_requests`` (default 10 per client) is
    shared in proportion. When the latency model knows its KV capacity, requests queue for KV
    blocks of ``input_length + output_length`` tokens; ``max_num_seqs`` and the scheduler's
    ``max_running`` cap running requests too. Throughputs add over replicas; latencies are
    request-weighted means.
    """
    require_int("concurrency", concurrency, 1, MAX_REQUESTS)
    require_int("dp", dp, 1, MAX_DP)
    if num_requests is None:
        num_requests = default_num_requests(concurrency)
    require_int("num_requests", num_requests, concurrency, MAX_REQUESTS)
    scheduler = scheduler or default_scheduler()
    max_running = running_cap(spec, latency, scheduler, max_num_seqs)
    if coupled and dp > 1:
        cap = None if max_running is None else max_running * dp
        plan = _memo_plan(
            plans,
            _plan_key(spec, concurrency, scheduler, num_requests, window, cap, dp),
            lambda: plan_closed_loop(
                spec,
                concurrency,
                scheduler,
                num_requests=num_requests,
                window=window,
                max_running=cap,
                budget_replicas=dp,
                interrupt=interrupt_of(latency),
            ),
            cap,
        )
        latencies = evaluate_shapes(plan.shapes, BusiestRank(latency, dp))
        return replay_serving(plan, latencies, scheduler, record_steps=record_steps)
    parts: list[tuple[ServingResult, int]] = []
    for clients, replicas in split_over_replicas(concurrency, dp):
        requests = max(clients, round(num_requests * clients / concurrency))
        result = simulate_closed_loop(
            spec,
            clients,
            latency,
            scheduler,
            num_requests=requests,
            window=window,
            max_running=max_running,
            record_steps=record_steps,
            plans=plans,
        )
        parts.append((result, replicas))
    return combine_serving(parts, concurrency)
