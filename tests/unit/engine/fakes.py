"""Test doubles for the engine: latency models and a per-request reference simulator."""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import takewhile

from app.core.chunking import PrefillChunk
from app.core.cost import AnyShape, ForwardShape, MixedShape
from app.core.engine import TimedArrivals, run_engine
from app.core.engine.plan import RequestRecords
from app.core.scheduler import Scheduler, SchedulerState, StepDecision, make_scheduler
from app.core.spec import WorkloadSpec


def spec(
    effective_input_length: int,
    max_batched_tokens: int,
    output_length: int,
    *,
    input_length: int | None = None,
    num_mtp_tokens: int = 0,
) -> WorkloadSpec:
    """The workload spec of a prompt whose uncached part is ``effective_input_length`` tokens
    (of ``input_length``, the default being no prefix-cache hit): the hit rate is the smallest
    float that leaves exactly that many tokens to prefill."""
    length = effective_input_length if input_length is None else input_length
    rate = (length - effective_input_length) / length
    while True:
        data = WorkloadSpec(
            input_length=length,
            output_length=output_length,
            max_batched_tokens=max_batched_tokens,
            prefix_cache_hit_rate=rate,
            num_mtp_tokens=num_mtp_tokens,
            mtp_acceptance_rates=(1.0,) * num_mtp_tokens,
        )
        if data.effective_input_length <= effective_input_length:
            assert data.effective_input_length == effective_input_length
            return data
        rate = math.nextafter(rate, 1.0)


class ConstantLatency:
    """Every forward costs the same; counts the shapes it is asked for. It cannot cost a fused
    mixed step (no ``mixed_ms``)."""

    def __init__(self, prefill_ms: float = 1.0, decode_ms: float = 1.0) -> None:
        self._prefill_ms = prefill_ms
        self._decode_ms = decode_ms
        self.calls: Counter[AnyShape] = Counter()

    def prefill_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        self.calls[
            ForwardShape(
                is_decode=False, concurrency=concurrency, query_len=query_len, seq_len=seq_len
            )
        ] += 1
        return self._prefill_ms

    def decode_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        self.calls[
            ForwardShape(
                is_decode=True, concurrency=concurrency, query_len=query_len, seq_len=seq_len
            )
        ] += 1
        return self._decode_ms


class LinearLatency(ConstantLatency):
    """Roofline-ish fake: fixed cost plus work proportional to tokens and context."""

    def __init__(
        self,
        base_ms: float = 2.0,
        per_token_ms: float = 0.01,
        per_context_ms: float = 0.0001,
        memory_gb_per_token: float = 0.0,
        memory_gb: float = 1e9,
    ) -> None:
        super().__init__()
        self.base_ms = base_ms
        self.per_token_ms = per_token_ms
        self.per_context_ms = per_context_ms
        self.memory_gb_per_token = memory_gb_per_token
        self.memory_gb = memory_gb

    def _cost(self, concurrency: int, query_len: int, seq_len: int) -> float:
        return (
            self.base_ms
            + self.per_token_ms * concurrency * query_len
            + self.per_context_ms * concurrency * seq_len
        )

    def prefill_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        super().prefill_ms(concurrency, query_len, seq_len)
        return self._cost(concurrency, query_len, seq_len)

    def decode_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        super().decode_ms(concurrency, query_len, seq_len)
        return self._cost(concurrency, query_len, seq_len)

    def mixed_ms(self, shape: MixedShape) -> float:
        """One forward over both parts: the fixed cost once, tokens and context of both."""
        self.calls[shape] += 1
        p, d = shape.prefill, shape.decode
        return (
            self._cost(p.concurrency, p.query_len, p.seq_len)
            + self._cost(d.concurrency, d.query_len, d.seq_len)
            - self.base_ms
        )

    def memory_left_gb(
        self, is_decode: bool, concurrency: int, query_len: int, seq_len: int
    ) -> float:
        return self.memory_gb - self.memory_gb_per_token * concurrency * seq_len


@dataclass
class ScriptedScheduler(Scheduler):
    """Returns decisions from a script, whatever the state; records what it saw."""

    script: Sequence[tuple[int, int]]
    combine: str = "sum"
    seen: list[SchedulerState] = field(default_factory=list)
    stateless = False
    name = "scripted"

    def decide(self, state: SchedulerState) -> StepDecision:
        p, d = self.script[len(self.seen)]
        self.seen.append(state)
        return StepDecision(p, d)

    def step_latency(self, prefill_latency: float, decode_latency: float) -> float:
        return prefill_latency + decode_latency


@dataclass(frozen=True)
class ReferenceResult:
    ttft_ms: float
    tpot_ms: float
    makespan_ms: float
    steps: int
    arrival: dict[int, float] = field(default_factory=dict)
    first: dict[int, float] = field(default_factory=dict)
    finish: dict[int, float] = field(default_factory=dict)
    started: dict[int, float] = field(default_factory=dict)


def _at_progress(progress: int, request: list[int]) -> bool:
    return request[1] == progress


def reference_simulation(
    plan: Sequence[PrefillChunk],
    concurrency: int,
    output_length: int,
    max_batched_tokens: int,
    latency: ConstantLatency,
    scheduler: Scheduler,
    input_length: int,
    num_mtp_tokens: int = 0,
    *,
    num_requests: int | None = None,
    max_running: int | None = None,
    arrival_times: Sequence[float] | None = None,
    max_in_flight: int | None = None,
    arrival_spread: float = 0.0,
    client_turnaround: bool = False,
) -> ReferenceResult:
    """The DIGEST's step loop, one request at a time, no groups, no fast-forward.

    With ``num_requests > concurrency`` each finished request's client submits the next one at
    its finish time (closed loop); ``max_running`` caps requests in prefill or decode.

    With ``arrival_times`` (and ``concurrency == 0``) request ``i`` arrives at
    ``arrival_times[i]``; it is sent then if fewer than ``max_in_flight`` are in flight, else
    when one finishes (``arrival`` holds the send times). Arrivals are seen at the first step
    end at or after them (before that step's finishes free their slots); an idle engine waits
    for the next arrival. ``started`` holds when each request's first prefill step began.
    ``arrival_spread``: of the requests finishing at one step's end, the nearest whole share
    (never all) re-submit at the next step's end.

    ``client_turnaround``: a re-submission sent at a step's end is admitted after the next
    step, unless nothing at all is in flight (then the first of them is admitted at once); a
    late one (``arrival_spread``) is sent at the next step's end and admitted after the step
    after it. The ``t = 0`` clients: one at once, the others (sent at 0) after the first step.
    """
    timed = arrival_times is not None
    total = (
        len(arrival_times)
        if arrival_times is not None
        else concurrency
        if num_requests is None
        else num_requests
    )
    effective = plan[-1].seq_len
    sent_first = 1 if client_turnaround and not timed else concurrency
    waiting: deque[int] = deque(range(sent_first))
    # client turnaround: sent, admitted after the next step; sent after the next step
    due: list[int] = list(range(sent_first, concurrency))
    sent_late: list[int] = []
    arrival = dict.fromkeys(range(concurrency), 0.0)
    started: dict[int, float] = {}
    backlog: deque[int] = deque()
    next_arrival = 0
    in_flight = 0
    submitted = concurrency
    held: list[int] = []  # closed loop: re-submitted one step late

    def send(rid: int, at_ms: float) -> None:
        nonlocal in_flight
        arrival[rid] = at_ms
        waiting.append(rid)
        in_flight += 1

    def arrive(now_ms: float) -> None:
        nonlocal next_arrival
        while arrival_times is not None and next_arrival < total:
            if arrival_times[next_arrival] > now_ms:
                break
            rid = next_arrival
            next_arrival += 1
            if not backlog and (max_in_flight is None or in_flight < max_in_flight):
                send(rid, arrival_times[rid])
            else:
                backlog.append(rid)

    pending: deque[list[int]] = deque()  # [request id, tokens prefilled]
    decode: deque[list[int]] = deque()
    first: dict[int, float] = {}
    finish: dict[int, float] = {}
    t = 0.0
    steps = 0
    q_dec = 1 + num_mtp_tokens
    ctx_dec = input_length + output_length // 2 + q_dec
    while len(finish) < total:
        arrive(t)
        while waiting and (max_running is None or len(pending) + len(decode) < max_running):
            pending.append([waiting.popleft(), 0])
        if timed and not pending and not decode:
            assert arrival_times is not None
            t = max(t, arrival_times[next_arrival])
            continue
        if pending:
            done = pending[0][1]
            pend = len(list(takewhile(partial(_at_progress, done), pending)))
            remaining = effective - done
            q = min(max_batched_tokens, remaining)
        else:
            done, pend, remaining, q = 0, 0, 0, max_batched_tokens
        decision = scheduler.decide(
            SchedulerState(len(decode), pend, q, max_batched_tokens, remaining)
        )
        p, d = decision.p_step, decision.d_step
        tokens = decision.prefill_tokens or q
        assert p or d
        for rid, progress in list(pending)[:p]:
            if progress == 0:
                started[rid] = t
        if p and d and scheduler.mixed_latency == "fused":
            assert isinstance(latency, LinearLatency)
            t += latency.mixed_ms(
                MixedShape(
                    prefill=ForwardShape(
                        is_decode=False, concurrency=p, query_len=tokens, seq_len=done + tokens
                    ),
                    decode=ForwardShape(
                        is_decode=True, concurrency=d, query_len=q_dec, seq_len=ctx_dec
                    ),
                )
            )
        else:
            p_ms = latency.prefill_ms(p, tokens, done + tokens) if p else 0.0
            d_ms = latency.decode_ms(d, q_dec, ctx_dec) if d else 0.0
            t += scheduler.step_latency(p_ms, d_ms)
        steps += 1
        selected_decode = [decode.popleft() for _ in range(d)]
        selected_prefill = [pending.popleft() for _ in range(p)]
        advanced = []
        done_now = []
        for rid, progress in selected_prefill:
            if progress + tokens >= effective:
                first[rid] = t
                if output_length == 1:
                    done_now.append(rid)
                else:
                    decode.append([rid, output_length - 1])
            else:
                advanced.append([rid, progress + tokens])
        if scheduler.prefill_order == "continue_first":
            pending.extendleft(reversed(advanced))
        else:
            pending.extend(advanced)
        for req in selected_decode:
            req[1] -= 1
            if req[1] == 0:
                done_now.append(req[0])
            else:
                decode.append(req)
        arrive(t)
        held_now: list[int] = []
        for rid in done_now:
            finish[rid] = t
            if timed:
                in_flight -= 1
                if backlog and (max_in_flight is None or in_flight < max_in_flight):
                    send(backlog.popleft(), t)
        if not timed and client_turnaround:
            idle = not (pending or decode or waiting or due or sent_late)
            waiting.extend(due)  # sent at the step before: admitted from now on
            for rid in sent_late:  # late from the step before: sent now
                arrival[rid] = t
            due = sent_late
            count = min(len(done_now), total - submitted)
            new_ids = list(range(submitted, submitted + count))
            submitted += count
            for rid in new_ids:
                arrival[rid] = t
            woken = 1 if idle and count else 0
            rest = count - woken
            # Independent of the engine's rule: the nearest whole share, never all of them.
            late = min(rest - 1, math.floor(arrival_spread * rest + 0.5)) if rest > 1 else 0
            waiting.extend(new_ids[:woken])
            due = due + new_ids[woken : count - late]
            sent_late = new_ids[count - late :]
        elif not timed:
            count = min(len(done_now), total - submitted)
            # Independent of the engine's rule: the nearest whole share, never all of them.
            late = min(count - 1, math.floor(arrival_spread * count + 0.5)) if count > 1 else 0
            for j in range(count):
                if j < count - late:
                    arrival[submitted] = t
                    waiting.append(submitted)
                else:
                    held_now.append(submitted)
                submitted += 1
            for rid in held:  # late from the step before: they arrive now
                arrival[rid] = t
                waiting.append(rid)
            held = held_now
    n = total
    ttft = sum(first[i] - arrival[i] for i in range(n)) / n
    tpot = (
        sum(finish[i] - first[i] for i in range(n)) / n / (output_length - 1)
        if output_length > 1
        else 0.0
    )
    return ReferenceResult(ttft, tpot, max(finish.values()), steps, arrival, first, finish, started)


def one_ms_step(p_step: int, tokens: int, seq_len: int, d_step: int) -> float:
    """A step clock where every step, prefill or decode, lasts 1 ms."""
    return 1.0


def ttft_spans(records: RequestRecords) -> list[float]:
    """Each first token's time from its request's arrival (timed arrivals), in ms."""
    assert records.ends_ms is not None and records.sent_ms is not None
    return [records.ends_ms[run] - records.sent_ms[a] for _, a, run in records.first]


def one_ms_ttfts(data: WorkloadSpec, scheduler: str, times_ms: tuple[float, ...]) -> list[float]:
    """The TTFTs (ms) of requests arriving at ``times_ms`` to an engine of 1-ms steps."""
    arrivals = TimedArrivals(times_ms=times_ms, max_in_flight=None, step_ms=one_ms_step)
    _, records = run_engine(data, 1, make_scheduler(scheduler), arrivals)
    return ttft_spans(records)
