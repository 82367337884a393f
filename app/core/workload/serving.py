"""Serving workloads over time: a closed loop of clients, or requests arriving at a rate.

The RFC's ``burst`` workload starts N requests at ``t = 0`` and measures that one burst. The
``closed_loop`` workload is what ``benchmark_serving --max-concurrency C`` or aiperf measure:
``C`` clients, each re-submitting as soon as its answer completes, until ``num_requests``
requests were sent. Requests stay aggregated in groups (cost does not grow with C) and the same
engine loop, schedulers and latency models serve both workloads.

Two measurement windows:

- ``benchmark``: every one of the ``num_requests`` requests counts, from ``t = 0`` to the last
  completion, as serving benchmarks report their means (the first wave, where all clients start
  together, is part of the mean);
- ``steady_state``: discards the warm-up (until the first ``C`` requests completed) and the
  drain (after the last submission); TTFT is averaged over requests that arrived and got their
  first token inside the window, TPOT over requests that decoded inside it, throughput counts
  the tokens emitted inside it.

KV-cache admission: ``max_running`` caps the requests in prefill or decode at once (the KV
blocks of ``input_length + output_length`` tokens each must fit); the others queue, and their
wait is part of their TTFT. A latency model that knows its KV capacity
(:class:`KvAdmissionModel`, e.g. the runner adapter) sets the cap in :func:`simulate_serving`.

The ``poisson`` workload is ``benchmark_serving --request-rate R [--max-concurrency C]``:
requests arrive as a Poisson process (the first at ``t = 0``, exponential gaps of mean
``1 / R``, drawn from a seeded generator), optionally at most ``C`` in flight (an arrival that
finds every slot taken waits on the client side, and its TTFT counts from when it is sent).
Arrival times do not follow from scheduling decisions, so the engine loop keeps the clock while
it plans (:class:`~app.core.engine.TimedArrivals`) and prices each step as it goes; every
request counts (the ``benchmark`` window).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from app.core.chunking import PrefillChunk, decode_query_len, decode_seq_len, require_int
from app.core.cost import AnyShape, ForwardShape, KvAdmissionModel, LatencyModel, MixedShape
from app.core.engine import (
    MS_PER_S,
    RequestRecords,
    SimulationPlan,
    StepRecord,
    TimedArrivals,
    check_serving_args,
    evaluate_shapes,
    plan_runs,
    run_clock,
)
from app.core.errors import InfeasibleError, InvalidParameterError
from app.core.parallel import split_over_replicas
from app.core.scheduler import Scheduler, default_scheduler
from app.core.spec import WorkloadSpec

Workload = Literal["burst", "closed_loop", "poisson"]
WORKLOADS: tuple[Workload, ...] = ("burst", "closed_loop", "poisson")
Window = Literal["benchmark", "steady_state"]
WINDOWS: tuple[Window, ...] = ("benchmark", "steady_state")
CLOSED_LOOP_SIMULATION = "closed_loop_simulation"
POISSON_SIMULATION = "poisson_simulation"

#: Requests sent per client when ``num_requests`` is not given (serving benchmarks send ~10).
DEFAULT_REQUESTS_PER_CLIENT = 10
MAX_REQUESTS = 10_000_000
#: Requests of a Poisson run when ``num_requests`` is not given (benchmark_serving's
#: ``--num-prompts`` default).
DEFAULT_POISSON_REQUESTS = 1000
DEFAULT_POISSON_SEED = 0
MAX_SEED = 2**32 - 1
#: Decode batch sizes priced together around one the clock needs (one cache round trip).
DECODE_PRICE_WINDOW = 32


@dataclass(frozen=True, slots=True, kw_only=True)
class ClosedLoopPlan:
    """The scheduling decisions of one closed-loop run, before any latency is known."""

    engine: SimulationPlan
    records: RequestRecords
    clients: int
    num_requests: int
    input_length: int
    window: Window
    max_running: int | None
    workload: Workload = "closed_loop"

    @property
    def shapes(self) -> tuple[AnyShape, ...]:
        return self.engine.shapes


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingResult:
    """Serving metrics under a closed loop of ``clients`` clients or Poisson arrivals
    (``clients == 0``: nobody re-sends)."""

    method: str
    workload: Workload
    window: Window
    clients: int
    num_requests: int
    measured_requests: int
    ttft_ms: float
    tpot_ms: float
    e2e_ms: float
    output_throughput: float  # output tokens / s
    total_throughput: float  # (input + output) tokens / s
    request_throughput: float  # requests / s
    mean_running_batch: float  # requests per engine step (prefill + decode)
    mean_prefill_tokens_per_step: float
    mean_decode_tokens_per_step: float
    duration_ms: float
    max_running: int | None
    prefill_num_chunks: int
    steps: int
    forward_evaluations: int
    timeline: tuple[StepRecord, ...] | None = None


def plan_closed_loop(
    chunk_plan: Sequence[PrefillChunk],
    clients: int,
    output_length: int,
    max_batched_tokens: int,
    scheduler: Scheduler | None = None,
    *,
    input_length: int | None = None,
    num_mtp_tokens: int = 0,
    num_requests: int | None = None,
    window: Window = "benchmark",
    max_running: int | None = None,
) -> ClosedLoopPlan:
    plan, input_length = check_serving_args(
        chunk_plan, clients, output_length, max_batched_tokens, input_length, num_mtp_tokens
    )
    if window not in WINDOWS:
        raise InvalidParameterError("window", window, f"one of {', '.join(WINDOWS)}")
    if num_requests is None:
        num_requests = min(DEFAULT_REQUESTS_PER_CLIENT * clients, MAX_REQUESTS)
    require_int("num_requests", num_requests, clients, MAX_REQUESTS)
    if max_running is not None:
        require_int("max_running", max_running, 1, MAX_REQUESTS)
    scheduler = scheduler or default_scheduler()
    runs, records = plan_runs(
        plan,
        clients,
        output_length,
        max_batched_tokens,
        scheduler,
        num_requests=num_requests,
        max_running=max_running,
    )
    engine = SimulationPlan.of_runs(
        runs,
        plan,
        clients,
        output_length,
        max_batched_tokens,
        scheduler,
        input_length=input_length,
        num_mtp_tokens=num_mtp_tokens,
    )
    return ClosedLoopPlan(
        engine=engine,
        records=records,
        clients=clients,
        num_requests=num_requests,
        input_length=input_length,
        window=window,
        max_running=max_running,
    )


def replay_closed_loop(
    plan: ClosedLoopPlan,
    latencies: Mapping[AnyShape, float],
    scheduler: Scheduler | None = None,
    *,
    record_steps: bool = False,
) -> ServingResult:
    scheduler = scheduler or default_scheduler()
    engine = plan.engine
    records = plan.records
    if records.ends_ms is not None and records.sent_ms is not None:
        # Timed arrivals: the clock ran while planning (idle gaps included).
        ends = list(records.ends_ms)
        timeline = (
            run_clock(engine, latencies, scheduler, record_steps=True, starts_ms=records.starts_ms)[
                1
            ]
            if record_steps
            else None
        )
    else:
        ends, timeline = run_clock(engine, latencies, scheduler, record_steps=record_steps)

    def at(run: int) -> float:
        return ends[run] if run >= 0 else 0.0

    sent_ms = records.sent_ms
    arrived = at if sent_ms is None else sent_ms.__getitem__

    output_length = engine.output_length
    decode_tokens = output_length - 1
    if plan.window == "benchmark":
        start_ms, end_ms = 0.0, ends[-1]
        first = records.first
        finish = records.finish
    else:
        start_ms, end_ms = _steady_window(plan, ends)
        first = tuple(r for r in records.first if at(r[1]) >= start_ms and at(r[2]) <= end_ms)
        finish = tuple(r for r in records.finish if at(r[1]) >= start_ms and at(r[2]) <= end_ms)
        if not first or not finish:
            raise InvalidParameterError(
                "num_requests",
                plan.num_requests,
                "large enough that some requests run entirely inside the steady-state window",
            )
    measured_first = sum(r[0] for r in first)
    measured_finish = sum(r[0] for r in finish)
    ttft_ms = sum(c * (at(f) - arrived(a)) for c, a, f in first) / measured_first
    decode_ms = sum(c * (at(e) - at(f)) for c, f, e in finish) / measured_finish
    tpot_ms = decode_ms / decode_tokens if decode_tokens else 0.0

    duration_ms = end_ms - start_ms
    steps = prefill_tokens = decode_step_tokens = batch = 0
    output_tokens = input_tokens = completed = 0
    chunk_plan = engine.chunk_plan
    for run, t_ms in zip(engine.runs, ends, strict=True):
        if not start_ms < t_ms <= end_ms:
            continue
        steps += run.repeat
        prefill_tokens += run.p_step * run.prefill_tokens * run.repeat
        decode_step_tokens += run.d_step * run.repeat
        batch += (run.p_step + run.d_step) * run.repeat
        output_tokens += run.first_tokens + run.d_step * run.repeat
        input_tokens += run.first_tokens * plan.input_length
        completed += run.finished

    def per_s(count: float) -> float:
        return MS_PER_S * count / duration_ms if duration_ms > 0 else 0.0

    return ServingResult(
        method=POISSON_SIMULATION if plan.workload == "poisson" else CLOSED_LOOP_SIMULATION,
        workload=plan.workload,
        window=plan.window,
        clients=plan.clients,
        num_requests=plan.num_requests,
        measured_requests=measured_first,
        ttft_ms=ttft_ms,
        tpot_ms=tpot_ms,
        e2e_ms=ttft_ms + decode_ms,
        output_throughput=per_s(output_tokens),
        total_throughput=per_s(output_tokens + input_tokens),
        request_throughput=per_s(completed),
        mean_running_batch=batch / steps if steps else 0.0,
        mean_prefill_tokens_per_step=prefill_tokens / steps if steps else 0.0,
        mean_decode_tokens_per_step=decode_step_tokens / steps if steps else 0.0,
        duration_ms=duration_ms,
        max_running=plan.max_running,
        prefill_num_chunks=len(chunk_plan),
        steps=engine.steps,
        forward_evaluations=len(latencies),
        timeline=timeline,
    )


def _steady_window(plan: ClosedLoopPlan, ends: list[float]) -> tuple[float, float]:
    """From the end of the warm-up (first ``clients`` completions) to the last submission."""
    completed = 0
    start_ms = None
    for run, t_ms in zip(plan.engine.runs, ends, strict=True):
        completed += run.finished
        if completed >= plan.clients:
            start_ms = t_ms
            break
    last = plan.records.last_arrival_run
    end_ms = ends[last] if last >= 0 else 0.0
    if start_ms is None or end_ms <= start_ms:
        raise InvalidParameterError(
            "num_requests",
            plan.num_requests,
            f"large enough that submissions go on after the first {plan.clients} completions "
            "(the steady-state window starts there and ends at the last submission)",
        )
    return start_ms, end_ms


def simulate_closed_loop(
    chunk_plan: Sequence[PrefillChunk],
    clients: int,
    output_length: int,
    max_batched_tokens: int,
    latency: LatencyModel,
    scheduler: Scheduler | None = None,
    *,
    input_length: int | None = None,
    num_mtp_tokens: int = 0,
    num_requests: int | None = None,
    window: Window = "benchmark",
    max_running: int | None = None,
    record_steps: bool = False,
) -> ServingResult:
    """Plan, evaluate each distinct forward shape once, replay: one closed-loop run."""
    scheduler = scheduler or default_scheduler()
    plan = plan_closed_loop(
        chunk_plan,
        clients,
        output_length,
        max_batched_tokens,
        scheduler,
        input_length=input_length,
        num_mtp_tokens=num_mtp_tokens,
        num_requests=num_requests,
        window=window,
        max_running=max_running,
    )
    latencies = evaluate_shapes(plan.shapes, latency)
    return replay_closed_loop(plan, latencies, scheduler, record_steps=record_steps)


def simulate_serving(
    data: WorkloadSpec,
    concurrency: int,
    latency: LatencyModel,
    scheduler: Scheduler | None = None,
    *,
    dp: int = 1,
    num_requests: int | None = None,
    window: Window = "benchmark",
    max_num_seqs: int | None = None,
    record_steps: bool = False,
) -> ServingResult:
    """Closed-loop serving of ``concurrency`` clients over ``dp`` data-parallel replicas.

    Each replica serves its share of the clients (``concurrency / dp``, as evenly as integers
    allow) with its own budget and KV cache; ``num_requests`` (default 10 per client) is
    shared in proportion. When the latency model knows its KV capacity, requests queue for KV
    blocks of ``input_length + output_length`` tokens; ``max_num_seqs`` and the scheduler's
    ``max_running`` cap running requests too. Throughputs add over replicas; latencies are
    request-weighted means.
    """
    require_int("concurrency", concurrency, 1, MAX_REQUESTS)
    require_int("dp", dp, 1, 1 << 16)
    if num_requests is None:
        num_requests = min(DEFAULT_REQUESTS_PER_CLIENT * concurrency, MAX_REQUESTS)
    require_int("num_requests", num_requests, concurrency, MAX_REQUESTS)
    scheduler = scheduler or default_scheduler()
    max_running = running_cap(data, latency, scheduler, max_num_seqs)
    parts: list[tuple[ServingResult, int]] = []
    for clients, replicas in split_over_replicas(concurrency, dp):
        requests = max(clients, round(num_requests * clients / concurrency))
        result = simulate_closed_loop(
            data.get_prefill_chunk_plan(),
            clients,
            data.output_length,
            data.max_batched_tokens,
            latency,
            scheduler,
            input_length=data.input_length,
            num_mtp_tokens=data.num_mtp_tokens,
            num_requests=requests,
            window=window,
            max_running=max_running,
            record_steps=record_steps,
        )
        parts.append((result, replicas))
    if len(parts) == 1 and parts[0][1] == 1:
        return parts[0][0]
    return _combine(parts, concurrency)


def running_cap(
    data: WorkloadSpec, latency: LatencyModel, scheduler: Scheduler, max_num_seqs: int | None
) -> int | None:
    """Requests one replica runs at once: ``max_num_seqs``, the policy's cap, and the KV cache
    (when the latency model knows its capacity); ``None`` when nothing caps them."""
    if max_num_seqs is not None:
        require_int("max_num_seqs", max_num_seqs, 1, MAX_REQUESTS)
    caps = [c for c in (max_num_seqs, scheduler.max_running) if c is not None]
    max_running = min(caps) if caps else None
    if isinstance(latency, KvAdmissionModel):
        context = data.input_length + data.output_length
        kv_cap = latency.kv_capacity_requests(context, data.max_batched_tokens)
        if kv_cap < 1:
            raise InfeasibleError(
                f"the KV cache of one request ({context} tokens) does not fit next to the "
                "weights, the reserve and the activations"
            )
        max_running = kv_cap if max_running is None else min(max_running, kv_cap)
    return max_running


def _combine(parts: list[tuple[ServingResult, int]], concurrency: int) -> ServingResult:
    """Totals over replicas: throughputs add, latencies are request-weighted means."""
    measured = sum(r.measured_requests * n for r, n in parts)
    steps = sum(r.steps * n for r, n in parts)

    def mean(attribute: str) -> float:
        weighted = sum(float(getattr(r, attribute)) * r.measured_requests * n for r, n in parts)
        return weighted / measured

    def per_step(attribute: str) -> float:
        return sum(float(getattr(r, attribute)) * r.steps * n for r, n in parts) / steps

    def total(attribute: str) -> float:
        return sum(float(getattr(r, attribute)) * n for r, n in parts)

    first = parts[0][0]
    return ServingResult(
        method=first.method,
        workload=first.workload,
        window=first.window,
        clients=concurrency,
        num_requests=sum(r.num_requests * n for r, n in parts),
        measured_requests=measured,
        ttft_ms=mean("ttft_ms"),
        tpot_ms=mean("tpot_ms"),
        e2e_ms=mean("e2e_ms"),
        output_throughput=total("output_throughput"),
        total_throughput=total("total_throughput"),
        request_throughput=total("request_throughput"),
        mean_running_batch=per_step("mean_running_batch"),
        mean_prefill_tokens_per_step=per_step("mean_prefill_tokens_per_step"),
        mean_decode_tokens_per_step=per_step("mean_decode_tokens_per_step"),
        duration_ms=max(r.duration_ms for r, _ in parts),
        max_running=first.max_running,
        prefill_num_chunks=first.prefill_num_chunks,
        steps=steps,
        forward_evaluations=sum(r.forward_evaluations for r, _ in parts),
        timeline=first.timeline,
    )


# --------------------------------------------------------------------------------------------
# Poisson arrivals (an open workload: requests do not wait for each other)


def check_request_rate(request_rate: object) -> float:
    if (
        not isinstance(request_rate, int | float)
        or isinstance(request_rate, bool)
        or not math.isfinite(request_rate)
        or request_rate <= 0
    ):
        raise InvalidParameterError(
            "request_rate", request_rate, "a finite number of requests per second > 0"
        )
    return float(request_rate)


def poisson_arrivals_ms(request_rate: float, num_requests: int, seed: int) -> tuple[float, ...]:
    """Arrival times of ``num_requests`` requests of a Poisson process of ``request_rate`` req/s.

    The first request arrives at ``t = 0`` and the gaps are exponential with mean
    ``1 / request_rate``, as ``benchmark_serving --request-rate`` sends them; the same ``seed``
    gives the same times.
    """
    rate = check_request_rate(request_rate)
    require_int("num_requests", num_requests, 1, MAX_REQUESTS)
    require_int("seed", seed, 0, MAX_SEED)
    draw = random.Random(seed).expovariate
    mean_gap_ms = MS_PER_S / rate
    t_ms = 0.0
    times = [t_ms]
    for _ in range(num_requests - 1):
        t_ms += draw(1.0) * mean_gap_ms
        times.append(t_ms)
    return tuple(times)


class StepPrices:
    """Prices engine steps for a clock that runs while planning; asks each shape once.

    Shapes the loop is likely to need next are asked in the same call (the batch interface of a
    cached model answers them in one round trip): decode batch sizes near the one needed (the
    running batch drifts by a few requests between steps) and, for a planned chunk, the rest of
    the chunk plan at the same batch (a request walks through its chunks). Chunks a policy cuts
    to the budget left are asked as the loop meets them. A ``fused`` scheduler's mixed step is
    one :class:`MixedShape`, as :func:`~app.core.engine.run_clock` costs it, asked alone.
    ``latencies`` holds every shape asked.
    """

    def __init__(
        self,
        latency: LatencyModel,
        scheduler: Scheduler,
        *,
        chunk_plan: Sequence[PrefillChunk],
        decode_query_len: int,
        decode_seq_len: int,
        max_decode: int,
    ) -> None:
        self._latency = latency
        self._scheduler = scheduler
        self._chunks = {(c.query_len, c.seq_len): c.index for c in chunk_plan}
        self._chunk_plan = tuple(chunk_plan)
        self._decode_query_len = decode_query_len
        self._decode_seq_len = decode_seq_len
        self._max_decode = max_decode
        self._fused = scheduler.mixed_latency == "fused"
        self.latencies: dict[AnyShape, float] = {}

    def _decode_shape(self, d_step: int) -> ForwardShape:
        return ForwardShape(
            is_decode=True,
            concurrency=d_step,
            query_len=self._decode_query_len,
            seq_len=self._decode_seq_len,
        )

    def _price(self, shape: AnyShape) -> float:
        found = self.latencies.get(shape)
        if found is not None:
            return found
        wanted = [shape]
        if isinstance(shape, MixedShape):
            pass  # asked alone: the decode batch beside a chunk varies too much to guess
        elif shape.is_decode:
            low = max(1, shape.concurrency - DECODE_PRICE_WINDOW)
            high = min(self._max_decode, shape.concurrency + DECODE_PRICE_WINDOW)
            near = (self._decode_shape(d) for d in range(low, high + 1))
            wanted.extend(s for s in near if s != shape and s not in self.latencies)
        else:
            index = self._chunks.get((shape.query_len, shape.seq_len))
            if index is not None:
                later = self._chunk_plan[index + 1 :]
                walk = (
                    SimulationPlan.prefill_shape(shape.concurrency, c.query_len, c.seq_len)
                    for c in later
                )
                wanted.extend(s for s in walk if s not in self.latencies)
        self.latencies.update(evaluate_shapes(wanted, self._latency))
        return self.latencies[shape]

    def __call__(
        self, p_step: int, prefill_tokens: int, prefill_seq_len: int, d_step: int
    ) -> float:
        prefill = SimulationPlan.prefill_shape(p_step, prefill_tokens, prefill_seq_len)
        if self._fused and p_step and d_step:
            return self._price(MixedShape(prefill=prefill, decode=self._decode_shape(d_step)))
        prefill_ms = self._price(prefill) if p_step else 0.0
        decode_ms = self._price(self._decode_shape(d_step)) if d_step else 0.0
        return self._scheduler.step_latency(prefill_ms, decode_ms)


def plan_poisson(
    chunk_plan: Sequence[PrefillChunk],
    request_rate: float,
    output_length: int,
    max_batched_tokens: int,
    latency: LatencyModel,
    scheduler: Scheduler | None = None,
    *,
    input_length: int | None = None,
    num_mtp_tokens: int = 0,
    num_requests: int = DEFAULT_POISSON_REQUESTS,
    seed: int = DEFAULT_POISSON_SEED,
    max_concurrency: int | None = None,
    max_running: int | None = None,
) -> tuple[ClosedLoopPlan, dict[AnyShape, float]]:
    """One replica's Poisson run planned with its clock; returns the plan and the latencies
    of every shape it priced (what :func:`replay_closed_loop` needs)."""
    # No clients: requests arrive on their own (the concurrency check is for its range only).
    plan, input_length = check_serving_args(
        chunk_plan, 1, output_length, max_batched_tokens, input_length, num_mtp_tokens
    )
    times_ms = poisson_arrivals_ms(request_rate, num_requests, seed)
    for name, cap in (("max_concurrency", max_concurrency), ("max_running", max_running)):
        if cap is not None:
            require_int(name, cap, 1, MAX_REQUESTS)
    scheduler = scheduler or default_scheduler()
    caps = [c for c in (max_concurrency, max_running) if c is not None]
    prices = StepPrices(
        latency,
        scheduler,
        chunk_plan=plan,
        decode_query_len=decode_query_len(num_mtp_tokens),
        decode_seq_len=decode_seq_len(input_length, output_length, num_mtp_tokens),
        max_decode=min([num_requests, *caps]),
    )
    runs, records = plan_runs(
        plan,
        0,
        output_length,
        max_batched_tokens,
        scheduler,
        num_requests=num_requests,
        max_running=max_running,
        arrivals=TimedArrivals(times_ms=times_ms, max_in_flight=max_concurrency, step_ms=prices),
    )
    engine = SimulationPlan.of_runs(
        runs,
        plan,
        0,
        output_length,
        max_batched_tokens,
        scheduler,
        input_length=input_length,
        num_mtp_tokens=num_mtp_tokens,
    )
    serving = ClosedLoopPlan(
        engine=engine,
        records=records,
        clients=0,
        num_requests=num_requests,
        input_length=input_length,
        window="benchmark",
        max_running=max_running,
        workload="poisson",
    )
    return serving, prices.latencies


def simulate_poisson(
    chunk_plan: Sequence[PrefillChunk],
    request_rate: float,
    output_length: int,
    max_batched_tokens: int,
    latency: LatencyModel,
    scheduler: Scheduler | None = None,
    *,
    input_length: int | None = None,
    num_mtp_tokens: int = 0,
    num_requests: int = DEFAULT_POISSON_REQUESTS,
    seed: int = DEFAULT_POISSON_SEED,
    max_concurrency: int | None = None,
    max_running: int | None = None,
    record_steps: bool = False,
) -> ServingResult:
    """Poisson arrivals at ``request_rate`` req/s on one replica; every request counts."""
    scheduler = scheduler or default_scheduler()
    plan, latencies = plan_poisson(
        chunk_plan,
        request_rate,
        output_length,
        max_batched_tokens,
        latency,
        scheduler,
        input_length=input_length,
        num_mtp_tokens=num_mtp_tokens,
        num_requests=num_requests,
        seed=seed,
        max_concurrency=max_concurrency,
        max_running=max_running,
    )
    return replay_closed_loop(plan, latencies, scheduler, record_steps=record_steps)


def _per_replica(total: int, dp: int, name: str) -> list[int]:
    """``total`` over ``dp`` replicas, one entry per replica (at least one each)."""
    if total < dp:
        raise InvalidParameterError(name, total, f">= dp={dp} (at least one per replica)")
    return [size for size, n in split_over_replicas(total, dp) for _ in range(n)]


def poisson_shares(
    num_requests: int, dp: int, max_concurrency: int | None = None
) -> list[tuple[int, int | None, int]]:
    """How a Poisson run spreads over ``dp`` replicas: ``[(requests, max_concurrency, how many
    replicas), ...]``, the busiest first; both totals split as evenly as integers allow."""
    require_int("dp", dp, 1, 1 << 16)
    require_int("num_requests", num_requests, 1, MAX_REQUESTS)
    requests = _per_replica(num_requests, dp, "num_requests")
    caps: list[int | None] = [None] * dp
    if max_concurrency is not None:
        require_int("max_concurrency", max_concurrency, 1, MAX_REQUESTS)
        caps = list(_per_replica(max_concurrency, dp, "max_concurrency"))
    shares = Counter(zip(requests, caps, strict=True))
    return [(n, cap, replicas) for (n, cap), replicas in shares.items()]


def simulate_poisson_serving(
    data: WorkloadSpec,
    request_rate: float,
    latency: LatencyModel,
    scheduler: Scheduler | None = None,
    *,
    dp: int = 1,
    num_requests: int = DEFAULT_POISSON_REQUESTS,
    seed: int = DEFAULT_POISSON_SEED,
    max_concurrency: int | None = None,
    max_num_seqs: int | None = None,
    record_steps: bool = False,
) -> ServingResult:
    """Poisson arrivals at ``request_rate`` req/s in total over ``dp`` replicas.

    A load balancer that routes each request to a random replica thins one Poisson stream into
    ``dp`` independent streams of ``request_rate / dp``; the replicas are alike, so each
    distinct share (``num_requests`` and ``max_concurrency`` split as evenly as integers allow)
    is simulated once, with the same seed. KV admission and ``max_num_seqs`` cap running
    requests as in :func:`simulate_serving`. Throughputs add, latencies are request-weighted.
    """
    rate = check_request_rate(request_rate)
    shares = poisson_shares(num_requests, dp, max_concurrency)
    scheduler = scheduler or default_scheduler()
    max_running = running_cap(data, latency, scheduler, max_num_seqs)
    parts: list[tuple[ServingResult, int]] = []
    for replica_requests, cap, replicas in shares:
        result = simulate_poisson(
            data.get_prefill_chunk_plan(),
            rate / dp,
            data.output_length,
            data.max_batched_tokens,
            latency,
            scheduler,
            input_length=data.input_length,
            num_mtp_tokens=data.num_mtp_tokens,
            num_requests=replica_requests,
            seed=seed,
            max_concurrency=cap,
            max_running=max_running,
            record_steps=record_steps and not parts,
        )
        parts.append((result, replicas))
    if len(parts) == 1 and parts[0][1] == 1:
        return parts[0][0]
    return _combine(parts, 0)
