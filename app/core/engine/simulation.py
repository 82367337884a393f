"""Serving simulation of one engine instance: group-level time simulation and closed-form waves.

Three phases, so the latency model sees every distinct forward shape at most once per call and a
cache can fetch all shapes in one round trip:

1. **plan** — run the scheduler over request *groups* (no clock needed: decisions depend on
   counts only) and record *runs*: consecutive steps with the same decision. A run of identical
   states (for example decode-only steps until the next request finishes, or one request walking
   through its chunks) is taken in one move, so cost follows scheduling decisions, not tokens;
2. **evaluate** — the plan's unique shapes go to the latency model once each (a
   :class:`ForwardShape` per forward; with a ``fused`` scheduler a mixed step is one
   :class:`MixedShape`);
3. **replay** — walk the runs, advance the clock, and accumulate TTFT, TPOT and the makespan.

Semantics follow the RFC and DIGEST: ``N`` requests arrive at ``t = 0``; a request's first token
is emitted by the step that completes its last chunk; decode steps emit one token per request;
finished decode groups leave, the others re-queue behind groups promoted from prefill. The same
engine loop (:func:`plan_runs`) also takes later arrivals and a running cap, which the
closed-loop workload (``app/core/workload.py``) uses, and arrivals at given times
(:class:`TimedArrivals`, the Poisson workload), for which it keeps the clock while planning and
prices each step as it goes (phases 1 and 2 together; phase 3 then only builds the timeline).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from app.core.chunking import (
    MAX_LENGTH_TOKENS,
    PrefillChunk,
    decode_query_len,
    decode_seq_len,
    prefill_chunk_plan,
    require_int,
)
from app.core.cost import (
    AnyShape,
    BatchLatencyModel,
    ForwardShape,
    LatencyModel,
    MixedLatencyModel,
    MixedShape,
    fused_unsupported,
    shape_order,
)
from app.core.engine.decode_queue import DecodeQueue
from app.core.errors import InvalidParameterError, SimulationError
from app.core.scheduler import Scheduler, SchedulerState, StepDecision, default_scheduler

Method = Literal["time_simulation", "closed_form_waves"]
TIME_SIMULATION: Method = "time_simulation"
CLOSED_FORM_WAVES: Method = "closed_form_waves"

MS_PER_S = 1000.0
#: Upper bound on concurrent requests of one replica; keeps a single simulation bounded.
MAX_CONCURRENCY = 1_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRun:
    """``repeat`` consecutive steps that share one decision.

    With ``p_step > 0`` step ``i`` of the run prefills ``prefill_tokens`` more tokens of the
    same ``p_step`` requests, which had ``prefill_start`` tokens done before the run (a request
    walking through its chunks); with ``p_step == 0`` the run is decode-only. ``first_tokens``
    requests emit their first token and ``finished`` requests complete at the end of the run's
    last step; nothing else changes inside a run.
    """

    p_step: int
    prefill_start: int
    prefill_tokens: int
    d_step: int
    repeat: int
    first_tokens: int
    finished: int

    def prefill_seq_len(self, step: int) -> int:
        """Context after step ``step`` (0-based) of the run."""
        return self.prefill_start + (step + 1) * self.prefill_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationPlan:
    """The scheduling decisions of one simulation, before any latency is known."""

    chunk_plan: tuple[PrefillChunk, ...]
    concurrency: int
    output_length: int
    max_batched_tokens: int
    decode_query_len: int
    decode_seq_len: int
    runs: tuple[StepRun, ...]
    #: Mixed steps are one fused forward (:class:`MixedShape`), not two combined forwards.
    fused_mixed: bool = False

    @classmethod
    def of_runs(
        cls,
        runs: tuple[StepRun, ...],
        chunk_plan: tuple[PrefillChunk, ...],
        concurrency: int,
        output_length: int,
        max_batched_tokens: int,
        scheduler: Scheduler,
        *,
        input_length: int,
        num_mtp_tokens: int,
    ) -> SimulationPlan:
        """The plan of ``runs``: the representative decode shape and the scheduler's
        mixed-step rule, the same for every workload."""
        return cls(
            chunk_plan=chunk_plan,
            concurrency=concurrency,
            output_length=output_length,
            max_batched_tokens=max_batched_tokens,
            decode_query_len=decode_query_len(num_mtp_tokens),
            decode_seq_len=decode_seq_len(input_length, output_length, num_mtp_tokens),
            runs=runs,
            fused_mixed=scheduler.mixed_latency == "fused",
        )

    @staticmethod
    def prefill_shape(p_step: int, query_len: int, seq_len: int) -> ForwardShape:
        return ForwardShape(
            is_decode=False, concurrency=p_step, query_len=query_len, seq_len=seq_len
        )

    def decode_shape(self, d_step: int) -> ForwardShape:
        return ForwardShape(
            is_decode=True,
            concurrency=d_step,
            query_len=self.decode_query_len,
            seq_len=self.decode_seq_len,
        )

    def mixed_shape(self, p_step: int, query_len: int, seq_len: int, d_step: int) -> MixedShape:
        return MixedShape(
            prefill=self.prefill_shape(p_step, query_len, seq_len), decode=self.decode_shape(d_step)
        )

    def is_fused(self, run: StepRun) -> bool:
        """Whether ``run``'s steps are fused mixed forwards (one :class:`MixedShape` each)."""
        return self.fused_mixed and run.p_step > 0 and run.d_step > 0

    @property
    def shapes(self) -> tuple[AnyShape, ...]:
        """Every distinct shape the plan needs, sorted (:func:`shape_order`)."""
        decode_steps = {run.d_step for run in self.runs if run.d_step and not self.is_fused(run)}
        # Many requests walk through the same chunks: expand each distinct walk once
        # (with the decode batch it is fused with, if any).
        walks = {
            (
                run.p_step,
                run.prefill_tokens,
                run.prefill_start,
                run.repeat,
                run.d_step if self.is_fused(run) else 0,
            )
            for run in self.runs
            if run.p_step
        }
        prefill_steps = {
            (p_step, tokens, start + (i + 1) * tokens, d_step)
            for p_step, tokens, start, repeat, d_step in walks
            for i in range(repeat)
        }
        shapes: list[AnyShape] = [self.decode_shape(d) for d in decode_steps]
        shapes.extend(
            self.mixed_shape(p_step, tokens, seq_len, d_step)
            if d_step
            else self.prefill_shape(p_step, tokens, seq_len)
            for p_step, tokens, seq_len, d_step in prefill_steps
        )
        return tuple(sorted(shapes, key=shape_order))

    @property
    def steps(self) -> int:
        return sum(run.repeat for run in self.runs)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRecord:
    """One entry of the step timeline (``repeat`` identical consecutive steps).

    ``fused``: the prefill and decode parts ran as one forward, so both took the whole step
    (``prefill_ms == decode_ms == step_ms``).
    """

    start_ms: float
    step_ms: float
    repeat: int
    p_step: int
    prefill_shape: ForwardShape | None
    prefill_ms: float
    d_step: int
    decode_shape: ForwardShape | None
    decode_ms: float
    first_tokens: int
    finished: int
    fused: bool = False

    @property
    def end_ms(self) -> float:
        return self.start_ms + self.step_ms * self.repeat


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationResult:
    """Metrics of one replica serving ``concurrency`` requests that arrive at ``t = 0``."""

    method: Method
    concurrency: int
    ttft_ms: float
    tpot_ms: float
    makespan_ms: float
    output_throughput: float  # output tokens / s
    request_throughput: float  # requests / s
    prefill_num_chunks: int
    steps: int
    forward_evaluations: int
    timeline: tuple[StepRecord, ...] | None = None


# --------------------------------------------------------------------------------------------
# validation


def check_serving_args(
    chunk_plan: Sequence[PrefillChunk],
    concurrency: int,
    output_length: int,
    max_batched_tokens: int,
    input_length: int | None,
    num_mtp_tokens: int,
) -> tuple[tuple[PrefillChunk, ...], int]:
    require_int("concurrency", concurrency, 1, MAX_CONCURRENCY)
    require_int("output_length", output_length, 1, MAX_LENGTH_TOKENS)
    require_int("max_batched_tokens", max_batched_tokens, 1, MAX_LENGTH_TOKENS)
    require_int("num_mtp_tokens", num_mtp_tokens, 0, 16)
    plan = tuple(chunk_plan)
    if not plan:
        raise InvalidParameterError("chunk_plan", plan, "a non-empty chunk plan")
    expected = prefill_chunk_plan(plan[-1].seq_len, max_batched_tokens)
    if plan != expected:
        raise InvalidParameterError(
            "chunk_plan",
            [c.query_len for c in plan],
            f"the plan of {plan[-1].seq_len} tokens in chunks of max_batched_tokens="
            f"{max_batched_tokens}",
        )
    effective = plan[-1].seq_len
    if input_length is None:
        input_length = effective
    require_int("input_length", input_length, effective, MAX_LENGTH_TOKENS)
    return plan, input_length


# --------------------------------------------------------------------------------------------
# phase 1: plan


def _decide(scheduler: Scheduler, state: SchedulerState) -> StepDecision:
    """Ask the scheduler, check the answer, and resolve ``prefill_tokens`` (0 without prefill)."""
    decision = scheduler.decide(state)
    p_step, d_step, tokens = decision.p_step, decision.d_step, decision.prefill_tokens
    for name, value, upper in (
        ("p_step", p_step, state.pending_prefill),
        ("d_step", d_step, state.ready_decode),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= upper:
            raise SimulationError(
                f"scheduler {scheduler.name!r} returned {name}={value!r} for {state}; "
                f"it must be an integer in [0, {upper}]"
            )
    if p_step == 0 and d_step == 0:
        raise SimulationError(
            f"scheduler {scheduler.name!r} made no progress (p_step = d_step = 0) for {state}"
        )
    if p_step == 0:
        return StepDecision(0, d_step, 0)
    if tokens is None:
        return StepDecision(p_step, d_step, state.chunk_query_len)
    upper = min(state.prefill_remaining, state.max_batched_tokens)
    if not isinstance(tokens, int) or isinstance(tokens, bool) or not 1 <= tokens <= upper:
        raise SimulationError(
            f"scheduler {scheduler.name!r} returned prefill_tokens={tokens!r} for {state}; "
            f"it must be an integer in [1, {upper}]"
        )
    return decision


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestRecords:
    """When requests arrived, emitted their first token and finished, as run indices.

    A run index ``r`` means "at the end of run ``r``"; ``-1`` means ``t = 0``.
    ``first``: ``(requests, arrival, first_token_run)``;
    ``finish``: ``(requests, first_token_run, finish_run)``.

    Without timed arrivals, ``arrival`` is a run index too. With them (``sent_ms`` set), it
    indexes ``sent_ms``, the time each arrival was sent to the engine, and the clock ran while
    planning: run ``r`` started at ``starts_ms[r]`` and ended at ``ends_ms[r]`` (idle gaps
    between runs are possible).
    """

    first: tuple[tuple[int, int, int], ...]
    finish: tuple[tuple[int, int, int], ...]
    last_arrival_run: int
    sent_ms: tuple[float, ...] | None = None
    starts_ms: tuple[float, ...] | None = None
    ends_ms: tuple[float, ...] | None = None


#: The latency of one engine step: ``(p_step, prefill_tokens, prefill_seq_len, d_step) -> ms``.
StepClock = Callable[[int, int, int, int], float]


@dataclass(frozen=True, slots=True, kw_only=True)
class TimedArrivals:
    """Requests that arrive at given times (an open workload) and the clock that places them.

    ``times_ms``: non-decreasing arrival times, one per request. ``max_in_flight`` caps the
    requests sent and not finished, like a benchmark client's ``--max-concurrency``: an arrival
    that finds every slot taken waits on the client side and is sent when a request finishes
    (its TTFT counts from then). ``step_ms`` prices one engine step, so the loop knows when each
    step ends and which arrivals it has seen.
    """

    times_ms: tuple[float, ...]
    max_in_flight: int | None
    step_ms: StepClock


class _ArrivalQueue:
    """The client side of timed arrivals: who arrived, who was sent, who waits for a slot."""

    __slots__ = ("backlog", "cap", "in_flight", "next", "sent_ms", "times_ms")

    def __init__(self, arrivals: TimedArrivals) -> None:
        self.times_ms = arrivals.times_ms
        self.cap = arrivals.max_in_flight
        self.next = 0  # index of the next arrival
        self.backlog = 0  # arrived, waiting for a free slot
        self.in_flight = 0
        self.sent_ms: list[float] = []

    @property
    def horizon_ms(self) -> float | None:
        """When the next request arrives (``None``: every request arrived)."""
        return self.times_ms[self.next] if self.next < len(self.times_ms) else None

    def _send(self, count: int, at_ms: float, waiting: deque[list[int]]) -> None:
        last = len(self.sent_ms) - 1
        if last >= 0 and self.sent_ms[last] == at_ms and waiting and waiting[-1][1] == last:
            waiting[-1][0] += count
        else:
            self.sent_ms.append(at_ms)
            waiting.append([count, last + 1])
        self.in_flight += count

    def arrive(self, now_ms: float, waiting: deque[list[int]]) -> None:
        """Arrivals up to ``now_ms``: sent when they arrived if a slot was free, else queued."""
        times = self.times_ms
        while self.next < len(times) and times[self.next] <= now_ms:
            if self.backlog == 0 and (self.cap is None or self.in_flight < self.cap):
                self._send(1, times[self.next], waiting)
            else:
                self.backlog += 1
            self.next += 1

    def release(self, finished: int, now_ms: float, waiting: deque[list[int]]) -> None:
        """``finished`` requests completed at ``now_ms``: queued arrivals take their slots."""
        self.in_flight -= finished
        if self.backlog:  # only when a cap is set
            free = min(self.backlog, (self.cap or 0) - self.in_flight)
            if free > 0:
                self.backlog -= free
                self._send(free, now_ms, waiting)


def steps_until(now_ms: float, horizon_ms: float | None, step_ms: float) -> int | None:
    """Fewest steps of ``step_ms`` after ``now_ms`` that reach ``horizon_ms`` (at least 1);
    ``None`` when there is no horizon or steps take no time."""
    if horizon_ms is None or step_ms <= 0.0:
        return None
    steps = max(1, math.ceil((horizon_ms - now_ms) / step_ms))
    while now_ms + steps * step_ms < horizon_ms:  # floating-point rounding
        steps += 1
    return steps


class _Segment:
    """Consecutive pending requests with the same prefill progress (``done`` tokens);
    ``parts`` keeps their arrival runs."""

    __slots__ = ("count", "done", "parts")

    def __init__(self, done: int, count: int, parts: deque[list[int]]) -> None:
        self.done = done
        self.count = count
        self.parts = parts  # [requests, arrival_run], in queue order

    def split_front(self, count: int) -> _Segment:
        """Detach the first ``count`` requests (``count < self.count``)."""
        taken: deque[list[int]] = deque()
        need = count
        while need:
            part = self.parts[0]
            if part[0] > need:
                part[0] -= need
                taken.append([need, part[1]])
                need = 0
            else:
                taken.append(self.parts.popleft())
                need -= part[0]
        self.count -= count
        return _Segment(self.done, count, taken)


def plan_runs(
    plan: tuple[PrefillChunk, ...],
    clients: int,
    output_length: int,
    max_batched_tokens: int,
    scheduler: Scheduler,
    *,
    num_requests: int,
    max_running: int | None = None,
    arrivals: TimedArrivals | None = None,
) -> tuple[tuple[StepRun, ...], RequestRecords]:
    """The engine loop over request groups, without a clock unless arrivals are timed.

    ``clients`` requests arrive at ``t = 0``; while fewer than ``num_requests`` have been
    submitted, each finished request is replaced by a new one arriving when it finishes (a
    closed loop; ``num_requests == clients`` is the RFC's burst). At most ``max_running``
    requests are in prefill or decode at once (KV-cache admission); the others wait in arrival
    order and are invisible to the scheduler until admitted.

    With ``arrivals`` (and ``clients == 0``) requests arrive at the given times instead (an open
    workload, e.g. Poisson): the loop keeps the clock with ``arrivals.step_ms``, a run of
    identical steps ends at the first step end at or after the next arrival (which the next
    decision sees), and an idle engine waits for the next arrival.
    """
    effective = plan[-1].seq_len
    decode_tokens = output_length - 1  # tokens left after the first one
    continue_first = scheduler.prefill_order == "continue_first"
    stateless = scheduler.stateless
    reads_remaining = scheduler.reads_prefill_remaining
    memo: dict[tuple[int, int, int, int], StepDecision] = {}

    waiting: deque[list[int]] = deque([[clients, -1]] if clients else ())  # [requests, arrival]
    pending: deque[_Segment] = deque()
    pending_total = 0
    decode = DecodeQueue()
    submitted = clients
    last_arrival_run = -1
    done = 0
    runs: list[StepRun] = []
    first_records: list[tuple[int, int, int]] = []
    finish_records: list[tuple[int, int, int]] = []
    queue = _ArrivalQueue(arrivals) if arrivals is not None else None
    t_ms = 0.0  # with timed arrivals: the end of the last run
    starts_ms: list[float] = []
    ends_ms: list[float] = []

    def decide(ready: int, pend: int, remaining: int) -> StepDecision:
        chunk_query_len = min(max_batched_tokens, remaining) if pend else max_batched_tokens
        key = (ready, pend, chunk_query_len, remaining if reads_remaining else -1)
        decision = memo.get(key) if stateless else None
        if decision is None:
            state = SchedulerState(ready, pend, chunk_query_len, max_batched_tokens, remaining)
            decision = _decide(scheduler, state)
            if stateless:
                memo[key] = decision
        return decision

    def admit() -> None:
        nonlocal pending_total
        room = (
            sum(part[0] for part in waiting)
            if max_running is None
            else max_running - pending_total - decode.ready
        )
        while waiting and room > 0:
            part = waiting[0]
            take = min(part[0], room)
            if take == part[0]:
                waiting.popleft()
            else:
                part[0] -= take
            room -= take
            pending_total += take
            if pending and pending[-1].done == 0:
                pending[-1].count += take
                pending[-1].parts.append([take, part[1]])
            else:
                pending.append(_Segment(0, take, deque([[take, part[1]]])))

    def finish(run: int, who: list[tuple[int, int]]) -> None:
        """Record finishes at the end of ``run``; their clients submit the next requests (or,
        with timed arrivals, requests that arrived during the run are sent and take the slots
        of the finished ones)."""
        nonlocal done, submitted, last_arrival_run
        if queue is not None:
            queue.arrive(t_ms, waiting)
            for count, first_run in who:
                finish_records.append((count, first_run, run))
                done += count
                queue.release(count, t_ms, waiting)
            return
        for count, first_run in who:
            finish_records.append((count, first_run, run))
            done += count
            more = min(count, num_requests - submitted)
            if more > 0:
                submitted += more
                last_arrival_run = run
                if waiting and waiting[-1][1] == run:
                    waiting[-1][0] += more
                else:
                    waiting.append([more, run])

    def front_state() -> tuple[int, int]:
        """Requests at the front with the same progress, and the tokens they have left."""
        if pending:
            return pending[0].count, effective - pending[0].done
        return 0, 0

    def timed_run(p_step: int, tokens: int, d_step: int, repeat: int) -> int:
        """With timed arrivals: cut the run at the next arrival and advance the clock."""
        nonlocal t_ms
        assert arrivals is not None and queue is not None
        horizon = queue.horizon_ms
        if p_step == 0:
            step = arrivals.step_ms(0, 0, 0, d_step)
            cut = steps_until(t_ms, horizon, step)
            repeat = repeat if cut is None else min(repeat, cut)
            t_ms += repeat * step
            return repeat
        start = pending[0].done
        elapsed_ms = 0.0
        for i in range(repeat):
            elapsed_ms += arrivals.step_ms(p_step, tokens, start + (i + 1) * tokens, d_step)
            if horizon is not None and t_ms + elapsed_ms >= horizon:
                repeat = i + 1
                break
        t_ms += elapsed_ms
        return repeat

    while done < num_requests:
        if queue is not None:
            queue.arrive(t_ms, waiting)
        admit()
        if queue is not None and not pending and not decode.ready:
            horizon = queue.horizon_ms
            if horizon is None:
                raise SimulationError(
                    f"{num_requests - done} requests neither ran nor were left to arrive"
                )
            t_ms = max(t_ms, horizon)  # idle until the next arrival
            continue
        pend, remaining = front_state()
        ready = decode.ready
        decision = decide(ready, pend, remaining)
        p_step, d_step, tokens = decision.p_step, decision.d_step, decision.prefill_tokens or 0
        all_advance = d_step == ready

        if stateless and p_step == 0 and not all_advance:
            # Round robin with nobody joining decode: the whole stretch in one move.
            stretch_runs = [len(runs)]  # index of the run the next finish belongs to
            stretch_start_ms = t_ms
            d_ms = arrivals.step_ms(0, 0, 0, d_step) if arrivals is not None else 0.0
            max_steps = steps_until(t_ms, queue.horizon_ms, d_ms) if queue is not None else None

            def on_finish(
                ready_now: int,
                who: list[tuple[int, int]],
                steps: int,
                stretch_runs: list[int] = stretch_runs,
                decision: StepDecision = decision,
                start_ms: float = stretch_start_ms,
                d_ms: float = d_ms,
            ) -> bool:
                nonlocal t_ms
                t_ms = start_ms + steps * d_ms
                finish(stretch_runs[0], who)
                stretch_runs[0] += 1
                admit()
                if ready_now == 0 and not pending:
                    return False
                return decide(ready_now, *front_state()) == decision

            stretch_steps = 0
            for repeat, who in decode.rotate(d_step, on_finish, max_steps):
                if queue is not None:
                    starts_ms.append(stretch_start_ms + stretch_steps * d_ms)
                    stretch_steps += repeat
                    ends_ms.append(stretch_start_ms + stretch_steps * d_ms)
                runs.append(
                    StepRun(
                        p_step=0,
                        prefill_start=-1,
                        prefill_tokens=0,
                        d_step=d_step,
                        repeat=repeat,
                        first_tokens=0,
                        finished=sum(count for count, _ in who),
                    )
                )
            if queue is not None:
                t_ms = stretch_start_ms + stretch_steps * d_ms
            continue

        # How many identical steps can be taken in one move.
        repeat = 1
        if stateless and all_advance:
            if p_step == 0:
                repeat = decode.min_remaining()
            elif p_step == pend and (continue_first or len(pending) == 1):
                # The front group walks through its chunks while the decision stays the same.
                limit = decode.min_remaining() if ready else remaining
                if reads_remaining:
                    state = SchedulerState(
                        ready,
                        pend,
                        min(max_batched_tokens, remaining),
                        max_batched_tokens,
                        remaining,
                    )
                    floor = scheduler.stable_down_to(state, decision) if pend else None
                    if floor is not None:
                        repeat = min(limit, 1 + (remaining - floor) // tokens)
                    while floor is None and repeat < limit:
                        left = remaining - repeat * tokens
                        if left <= 0 or decide(ready, pend, left) != decision:
                            break
                        repeat += 1
                elif remaining >= max_batched_tokens:
                    # Same state (and so decision) while a full planned chunk is left.
                    repeat = min(limit, 1 + (remaining - max_batched_tokens) // tokens)

        if queue is not None:
            starts_ms.append(t_ms)
            repeat = timed_run(p_step, tokens, d_step, repeat)
            ends_ms.append(t_ms)

        run_index = len(runs)
        finished_now: list[tuple[int, int]] = []
        # Decode: the front d_step requests (all of them when all advance) emit a token.
        selected = decode.take(d_step) if d_step and not all_advance else []

        # Prefill: p_step requests at the front compute ``tokens`` more, ``repeat`` times.
        first_tokens = 0
        prefill_start = -1
        if p_step:
            front = pending[0]
            prefill_start = front.done
            moved = pending.popleft() if front.count == p_step else front.split_front(p_step)
            pending_total -= p_step
            moved.done += tokens * repeat
            if moved.done >= effective:
                first_tokens = p_step
                for count, arrival in moved.parts:
                    first_records.append((count, arrival, run_index))
                if decode_tokens == 0:
                    finished_now.append((p_step, run_index))
                else:
                    # Promoted requests queue behind the unselected ones and ahead of the
                    # selected ones re-queueing below (all were selected when all advance).
                    shifted = repeat if all_advance and d_step else 0
                    decode.promote(p_step, decode_tokens + shifted, run_index, front=all_advance)
            else:
                pending_total += p_step
                if continue_first:
                    if pending and pending[0].done == moved.done:
                        pending[0].count += p_step
                        pending[0].parts.extendleft(reversed(moved.parts))
                    else:
                        pending.appendleft(moved)
                elif pending and pending[-1].done == moved.done:
                    pending[-1].count += p_step
                    pending[-1].parts.extend(moved.parts)
                else:
                    pending.append(moved)

        # Decode bookkeeping: finished requests leave, the others re-queue at the back.
        if d_step and all_advance:
            finished_now.extend(decode.advance_all(repeat))
        finished_now.extend(decode.requeue(selected))
        finish(run_index, finished_now)
        runs.append(
            StepRun(
                p_step=p_step,
                prefill_start=prefill_start,
                prefill_tokens=tokens,
                d_step=d_step,
                repeat=repeat,
                first_tokens=first_tokens,
                finished=sum(count for count, _ in finished_now),
            )
        )

    records = RequestRecords(
        first=tuple(first_records),
        finish=tuple(finish_records),
        last_arrival_run=last_arrival_run,
        sent_ms=tuple(queue.sent_ms) if queue is not None else None,
        starts_ms=tuple(starts_ms) if queue is not None else None,
        ends_ms=tuple(ends_ms) if queue is not None else None,
    )
    return tuple(runs), records


def plan_chunked_prefill(
    chunk_plan: Sequence[PrefillChunk],
    concurrency: int,
    output_length: int,
    max_batched_tokens: int,
    scheduler: Scheduler | None = None,
    *,
    input_length: int | None = None,
    num_mtp_tokens: int = 0,
) -> SimulationPlan:
    """Phase 1: the scheduling decisions of the time simulation, as runs of identical steps."""
    plan, input_length = check_serving_args(
        chunk_plan, concurrency, output_length, max_batched_tokens, input_length, num_mtp_tokens
    )
    scheduler = scheduler or default_scheduler()
    runs, _ = plan_runs(
        plan,
        concurrency,
        output_length,
        max_batched_tokens,
        scheduler,
        num_requests=concurrency,
    )
    return SimulationPlan.of_runs(
        runs,
        plan,
        concurrency,
        output_length,
        max_batched_tokens,
        scheduler,
        input_length=input_length,
        num_mtp_tokens=num_mtp_tokens,
    )


# --------------------------------------------------------------------------------------------
# phase 2: evaluate


def evaluate_shapes(shapes: Sequence[AnyShape], latency: LatencyModel) -> dict[AnyShape, float]:
    """Latency of each distinct shape, asking the model once per shape (or once in all).

    A :class:`MixedShape` needs a :class:`MixedLatencyModel` (or a batch model that costs it);
    any other model raises :class:`~app.core.errors.UnsupportedError`.
    """
    unique = tuple(dict.fromkeys(shapes))
    if isinstance(latency, BatchLatencyModel):
        found = latency.forward_latencies_ms(unique)
        values = {shape: float(found[shape]) for shape in unique}
    else:
        values = {}
        for shape in unique:
            if isinstance(shape, MixedShape):
                if not isinstance(latency, MixedLatencyModel):
                    raise fused_unsupported(latency)
                values[shape] = float(latency.mixed_ms(shape))
                continue
            method = latency.decode_ms if shape.is_decode else latency.prefill_ms
            values[shape] = float(method(shape.concurrency, shape.query_len, shape.seq_len))
    for shape, value in values.items():
        if not value >= 0.0 or value == float("inf"):
            raise SimulationError(f"latency model returned {value!r} ms for {shape}")
    return values


# --------------------------------------------------------------------------------------------
# phase 3: replay


def run_clock(
    plan: SimulationPlan,
    latencies: Mapping[AnyShape, float],
    scheduler: Scheduler,
    *,
    record_steps: bool = False,
    starts_ms: Sequence[float] | None = None,
) -> tuple[list[float], tuple[StepRecord, ...] | None]:
    """The time at the end of every run, and the step timeline when asked for.

    A mixed step costs ``scheduler.step_latency(prefill, decode)``, or the latency of its
    :class:`MixedShape` when the plan fuses mixed steps (both parts then span the step). Runs
    follow each other back to back unless ``starts_ms`` says when each one started (timed
    arrivals: the engine may idle between runs).
    """
    t_ms = 0.0
    ends: list[float] = []
    timeline: list[StepRecord] = []
    decode_ms: dict[int, float] = {0: 0.0}
    prefill_ms: dict[tuple[int, int, int], float] = {}
    mixed_ms: dict[tuple[int, int, int, int], float] = {}
    # Duration of a prefill walk beside a decode batch, when the scheduler is pure.
    walk_ms: dict[tuple[int, int, int, int, int], float] = {}
    for index, run in enumerate(plan.runs):
        if starts_ms is not None:
            t_ms = starts_ms[index]
        fused = plan.is_fused(run)
        d_ms = 0.0
        if not fused:
            known = decode_ms.get(run.d_step)
            if known is None:
                known = decode_ms[run.d_step] = latencies[plan.decode_shape(run.d_step)]
            d_ms = known
        d_shape = plan.decode_shape(run.d_step) if record_steps and run.d_step else None
        walk = (run.p_step, run.prefill_tokens, run.prefill_start, run.repeat, run.d_step)
        if run.p_step and not record_steps and scheduler.stateless and walk in walk_ms:
            t_ms += walk_ms[walk]
        elif run.p_step:
            walk_start_ms = t_ms
            for i in range(run.repeat):
                key = (run.p_step, run.prefill_tokens, run.prefill_seq_len(i))
                if fused:
                    mixed_key = (*key, run.d_step)
                    step_ms = mixed_ms.get(mixed_key, -1.0)
                    if step_ms < 0.0:
                        shape = plan.mixed_shape(*key, run.d_step)
                        step_ms = mixed_ms[mixed_key] = latencies[shape]
                    p_ms = d_ms = step_ms
                else:
                    p_ms = prefill_ms.get(key, -1.0)
                    if p_ms < 0.0:
                        p_ms = prefill_ms[key] = latencies[plan.prefill_shape(*key)]
                    step_ms = scheduler.step_latency(p_ms, d_ms)
                if record_steps:
                    last = i == run.repeat - 1
                    timeline.append(
                        StepRecord(
                            start_ms=t_ms,
                            step_ms=step_ms,
                            repeat=1,
                            p_step=run.p_step,
                            prefill_shape=plan.prefill_shape(*key),
                            prefill_ms=p_ms,
                            d_step=run.d_step,
                            decode_shape=d_shape,
                            decode_ms=d_ms,
                            first_tokens=run.first_tokens if last else 0,
                            finished=run.finished if last else 0,
                            fused=fused,
                        )
                    )
                t_ms += step_ms
            walk_ms[walk] = t_ms - walk_start_ms
        else:
            step_ms = scheduler.step_latency(0.0, d_ms)
            if record_steps:
                timeline.append(
                    StepRecord(
                        start_ms=t_ms,
                        step_ms=step_ms,
                        repeat=run.repeat,
                        p_step=0,
                        prefill_shape=None,
                        prefill_ms=0.0,
                        d_step=run.d_step,
                        decode_shape=d_shape,
                        decode_ms=d_ms,
                        first_tokens=run.first_tokens,
                        finished=run.finished,
                    )
                )
            t_ms += step_ms * run.repeat
        ends.append(t_ms)
    return ends, tuple(timeline) if record_steps else None


def replay_chunked_prefill(
    plan: SimulationPlan,
    latencies: Mapping[AnyShape, float],
    scheduler: Scheduler | None = None,
    *,
    record_steps: bool = False,
) -> SimulationResult:
    """Phase 3: advance the clock over the planned runs and compute the metrics."""
    scheduler = scheduler or default_scheduler()
    ends, timeline = run_clock(plan, latencies, scheduler, record_steps=record_steps)
    first_token_sum = 0.0
    finish_sum = 0.0
    makespan_ms = 0.0
    for run, t_ms in zip(plan.runs, ends, strict=True):
        first_token_sum += run.first_tokens * t_ms
        if run.finished:
            finish_sum += run.finished * t_ms
            makespan_ms = t_ms
    n = plan.concurrency
    decode_tokens = plan.output_length - 1
    tpot_ms = (finish_sum - first_token_sum) / n / decode_tokens if decode_tokens else 0.0
    return SimulationResult(
        method=TIME_SIMULATION,
        concurrency=n,
        ttft_ms=min(first_token_sum / n, makespan_ms),  # a mean never exceeds the max
        tpot_ms=max(tpot_ms, 0.0),
        makespan_ms=makespan_ms,
        output_throughput=_per_s(n * plan.output_length, makespan_ms),
        request_throughput=_per_s(n, makespan_ms),
        prefill_num_chunks=len(plan.chunk_plan),
        steps=plan.steps,
        forward_evaluations=len(latencies),
        timeline=timeline,
    )


def combine_replicas(parts: Sequence[tuple[SimulationResult, int]]) -> SimulationResult:
    """Data-parallel replicas as one result: ``[(one replica's result, how many replicas)]``.

    Throughputs, requests and steps add; TTFT and TPOT are request-weighted means; the makespan
    is the slowest replica's; the timeline is the first part's (one replica's steps).
    """
    if not parts:
        raise InvalidParameterError("parts", parts, "at least one replica result")
    first = parts[0][0]
    if len(parts) == 1 and parts[0][1] == 1:
        return first
    requests = sum(r.concurrency * n for r, n in parts)

    def mean(attribute: str) -> float:
        return sum(float(getattr(r, attribute)) * r.concurrency * n for r, n in parts) / requests

    return SimulationResult(
        method=first.method,
        concurrency=requests,
        ttft_ms=mean("ttft_ms"),
        tpot_ms=mean("tpot_ms"),
        makespan_ms=max(r.makespan_ms for r, _ in parts),
        output_throughput=sum(r.output_throughput * n for r, n in parts),
        request_throughput=sum(r.request_throughput * n for r, n in parts),
        prefill_num_chunks=first.prefill_num_chunks,
        steps=sum(r.steps * n for r, n in parts),
        forward_evaluations=sum(r.forward_evaluations for r, _ in parts),
        timeline=first.timeline,
    )


def _per_s(count: int, elapsed_ms: float) -> float:
    return MS_PER_S * count / elapsed_ms if elapsed_ms > 0 else 0.0


def simulate_chunked_prefill(
    chunk_plan: Sequence[PrefillChunk],
    concurrency: int,
    output_length: int,
    max_batched_tokens: int,
    latency: LatencyModel,
    scheduler: Scheduler | None = None,
    *,
    input_length: int | None = None,
    num_mtp_tokens: int = 0,
    record_steps: bool = False,
) -> SimulationResult:
    """Time simulation of ``concurrency`` requests arriving at ``t = 0`` on one replica."""
    scheduler = scheduler or default_scheduler()
    sim_plan = plan_chunked_prefill(
        chunk_plan,
        concurrency,
        output_length,
        max_batched_tokens,
        scheduler,
        input_length=input_length,
        num_mtp_tokens=num_mtp_tokens,
    )
    latencies = evaluate_shapes(sim_plan.shapes, latency)
    return replay_chunked_prefill(sim_plan, latencies, scheduler, record_steps=record_steps)


# --------------------------------------------------------------------------------------------
# closed-form waves (K == 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class WavesPlan:
    """Shapes of the closed-form path: full prefill waves, the remainder wave, one decode."""

    effective_input_length: int
    concurrency: int
    output_length: int
    per_wave: int
    full_waves: int
    remainder: int
    decode: ForwardShape

    def wave_shape(self, requests: int) -> ForwardShape:
        e = self.effective_input_length
        return ForwardShape(is_decode=False, concurrency=requests, query_len=e, seq_len=e)

    @property
    def shapes(self) -> tuple[ForwardShape, ...]:
        shapes = [self.decode]
        if self.full_waves:
            shapes.append(self.wave_shape(self.per_wave))
        if self.remainder:
            shapes.append(self.wave_shape(self.remainder))
        return tuple(sorted(set(shapes)))


def plan_closed_form_waves(
    effective_input_length: int,
    concurrency: int,
    output_length: int,
    max_batched_tokens: int,
    *,
    input_length: int | None = None,
    num_mtp_tokens: int = 0,
) -> WavesPlan:
    chunk_plan = prefill_chunk_plan(effective_input_length, max_batched_tokens)
    if len(chunk_plan) != 1:
        raise InvalidParameterError(
            "effective_input_length",
            effective_input_length,
            f"<= max_batched_tokens={max_batched_tokens} for the closed-form waves (K == 1)",
        )
    _, input_length = check_serving_args(
        chunk_plan, concurrency, output_length, max_batched_tokens, input_length, num_mtp_tokens
    )
    per_wave = max_batched_tokens // effective_input_length
    return WavesPlan(
        effective_input_length=effective_input_length,
        concurrency=concurrency,
        output_length=output_length,
        per_wave=per_wave,
        full_waves=concurrency // per_wave,
        remainder=concurrency % per_wave,
        decode=ForwardShape(
            is_decode=True,
            concurrency=concurrency,
            query_len=decode_query_len(num_mtp_tokens),
            seq_len=decode_seq_len(input_length, output_length, num_mtp_tokens),
        ),
    )


def replay_closed_form_waves(
    plan: WavesPlan, latencies: Mapping[AnyShape, float]
) -> SimulationResult:
    """The RFC's compatibility formulas (DIGEST "Single chunk")."""
    c, n, r = plan.concurrency, plan.full_waves, plan.remainder
    lp = latencies[plan.wave_shape(plan.per_wave)] if n else 0.0
    lr = latencies[plan.wave_shape(r)] if r else 0.0
    ld = latencies[plan.decode]
    ttft_ms = (plan.per_wave * lp * n * (n + 1) / 2 + (n * lp + lr) * r) / c
    e2e_ms = ttft_ms + ld * plan.output_length
    return SimulationResult(
        method=CLOSED_FORM_WAVES,
        concurrency=c,
        ttft_ms=ttft_ms,
        tpot_ms=e2e_ms / plan.output_length,
        makespan_ms=e2e_ms,
        output_throughput=_per_s(plan.output_length * c, e2e_ms),
        request_throughput=_per_s(c, e2e_ms),
        prefill_num_chunks=1,
        steps=n + (1 if r else 0) + plan.output_length,
        forward_evaluations=len(latencies),
    )


def closed_form_waves(
    effective_input_length: int,
    concurrency: int,
    output_length: int,
    max_batched_tokens: int,
    latency: LatencyModel,
    *,
    input_length: int | None = None,
    num_mtp_tokens: int = 0,
) -> SimulationResult:
    """Closed-form prefill waves then decode, valid when the prompt fits in one chunk."""
    plan = plan_closed_form_waves(
        effective_input_length,
        concurrency,
        output_length,
        max_batched_tokens,
        input_length=input_length,
        num_mtp_tokens=num_mtp_tokens,
    )
    return replay_closed_form_waves(plan, evaluate_shapes(plan.shapes, latency))


# --------------------------------------------------------------------------------------------
# single entry point


AnyPlan = SimulationPlan | WavesPlan


def plan_serving(
    chunk_plan: Sequence[PrefillChunk],
    concurrency: int,
    output_length: int,
    max_batched_tokens: int,
    scheduler: Scheduler | None = None,
    *,
    input_length: int | None = None,
    num_mtp_tokens: int = 0,
    force_simulation: bool = False,
) -> AnyPlan:
    """Pick the method by chunk count (K == 1 -> closed-form waves unless forced) and plan it."""
    plan = tuple(chunk_plan)
    if len(plan) == 1 and not force_simulation:
        return plan_closed_form_waves(
            plan[0].seq_len if plan else 0,
            concurrency,
            output_length,
            max_batched_tokens,
            input_length=input_length,
            num_mtp_tokens=num_mtp_tokens,
        )
    return plan_chunked_prefill(
        plan,
        concurrency,
        output_length,
        max_batched_tokens,
        scheduler,
        input_length=input_length,
        num_mtp_tokens=num_mtp_tokens,
    )


def replay(
    plan: AnyPlan,
    latencies: Mapping[AnyShape, float],
    scheduler: Scheduler | None = None,
    *,
    record_steps: bool = False,
) -> SimulationResult:
    if isinstance(plan, WavesPlan):
        return replay_closed_form_waves(plan, latencies)
    return replay_chunked_prefill(plan, latencies, scheduler, record_steps=record_steps)


def simulate(
    chunk_plan: Sequence[PrefillChunk],
    concurrency: int,
    output_length: int,
    max_batched_tokens: int,
    latency: LatencyModel,
    scheduler: Scheduler | None = None,
    *,
    input_length: int | None = None,
    num_mtp_tokens: int = 0,
    force_simulation: bool = False,
    record_steps: bool = False,
) -> SimulationResult:
    """Single entry point: closed-form waves for K == 1, time simulation for K > 1 (or forced).

    ``result.method`` says which one ran.
    """
    scheduler = scheduler or default_scheduler()
    plan = plan_serving(
        chunk_plan,
        concurrency,
        output_length,
        max_batched_tokens,
        scheduler,
        input_length=input_length,
        num_mtp_tokens=num_mtp_tokens,
        force_simulation=force_simulation,
    )
    return replay(plan, evaluate_shapes(plan.shapes, latency), scheduler, record_steps=record_steps)
