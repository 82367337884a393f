"""The engine loop over request groups (RFC §3.1.4): policy-free, one move per run of steps.

Each iteration reads like the RFC's pseudo-code::

    admit arrivals          (the arrival source: burst, closed loop, timed)
    ask the scheduler       (the policy: how many prefill and decode requests run)
    price the step          (only when the clock is kept: timed arrivals)
    advance the groups      (prefill progress, first tokens, decode queue, finishes)

Requests stay aggregated in groups, so cost follows scheduling decisions, not tokens: a run of
identical steps (decode-only steps until the next finish, a request walking through its equal
chunks) is taken in one move, and a round-robin stretch (more ready decodes than a step takes,
nobody joining) in one call of :meth:`DecodeQueue.rotate`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from app.core.chunking import PrefillChunk
from app.core.engine.arrivals import ArrivalSource, Finished, Waiting, steps_until
from app.core.engine.cycles import CycleFinder
from app.core.engine.decode_queue import DecodeGroup, DecodeQueue
from app.core.engine.plan import CycleCopies, RequestRecords, StepRun
from app.core.errors import SimulationError
from app.core.scheduler import Scheduler, SchedulerState, StepDecision


def checked_decision(scheduler: Scheduler, state: SchedulerState) -> StepDecision:
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


def _decode_item(group: DecodeGroup, run: int, shift: int) -> tuple[int, int, int, int]:
    """A live decode group in a cycle state: tokens left, requests, runs since its first token,
    decode tokens in all."""
    return (group.rem_base - shift, group.count, run - group.first_run, group.tokens)


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


#: Loop iterations between two deadline checks (an iteration costs ~30 µs: a check every
#: ~15 ms bounds the overrun far below the 1 s the service promises).
INTERRUPT_EVERY = 512


class Engine:
    """One engine instance serving the requests of an arrival source under a scheduler.

    At most ``max_running`` requests are in prefill or decode at once (KV-cache admission); the
    others wait in arrival order and are invisible to the scheduler until admitted. With a
    clock (timed arrivals) a run of identical steps ends at the first step end at or after the
    next arrival (which the next decision sees), and an idle engine waits for the next arrival.
    With a receive interval ``recv_interval`` > 1 (SGLang's ``--scheduler-recv-interval``,
    ``SchedulerRecvSkipper``) the engine polls for new requests only at the top of an iteration
    that follows a prefill step, that of every ``recv_interval``-th decode step since the last
    poll, and when it has nothing to run: requests arriving between polls wait in ``inbox``
    (their TTFT counts from their arrival). ``output_classes``: the output lengths of a
    workload's length classes (:attr:`~app.core.spec.WorkloadSpec.output_classes`; omitted:
    ``output_length`` alone): requests reaching decode take the classes in turn, one request
    each, so a group that got its first token together splits by output length and finishes
    at as many steps.
    With a batch wait (TensorRT-LLM's
    ``batch_wait_timeout_iters`` ``wait_iters`` and ``batch_wait_max_tokens_ratio`` x budget
    ``wait_tokens``, both set; ``PyExecutor._waiting_requests``) arrivals also wait in
    ``inbox`` while decodes run: each iteration that holds them counts, and they are received
    once ``wait_iters`` iterations held them, once their prompt tokens and the running decodes
    reach ``wait_tokens``, or when no decode runs.
    An engine runs once (:meth:`run`). ``interrupt``
    (the caller's deadline check) is called every :data:`INTERRUPT_EVERY` iterations and may
    raise to abandon the run.
    """

    __slots__ = (
        "arrivals",
        "budget",
        "continue_first",
        "cycle",
        "cycles",
        "decode",
        "decode_classes",
        "done",
        "effective",
        "ends_ms",
        "entry",
        "finish_records",
        "first_records",
        "holding",
        "inbox",
        "interrupt",
        "max_running",
        "memo",
        "next_class",
        "pending",
        "pending_total",
        "poll_every",
        "reads_remaining",
        "recv_interval",
        "run_objects",
        "runs",
        "scheduler",
        "since_poll",
        "starts_ms",
        "stateless",
        "t_ms",
        "wait_iters",
        "wait_tokens",
        "waiting",
    )

    def __init__(
        self,
        chunk_plan: tuple[PrefillChunk, ...],
        output_length: int,
        max_batched_tokens: int,
        scheduler: Scheduler,
        arrivals: ArrivalSource,
        *,
        max_running: int | None = None,
        recv_interval: int = 1,
        batch_wait_iters: int = 0,
        batch_wait_tokens: float = 0.0,
        interrupt: Callable[[], None] | None = None,
        output_classes: tuple[int, ...] = (),
    ) -> None:
        self.effective = chunk_plan[-1].seq_len
        self.interrupt = interrupt
        # Decode tokens (after the first token) of each length class, and the class the next
        # request takes.
        self.decode_classes = tuple(length - 1 for length in output_classes or (output_length,))
        self.next_class = 0
        self.budget = max_batched_tokens
        self.scheduler = scheduler
        self.arrivals = arrivals
        self.max_running = max_running
        self.continue_first = scheduler.prefill_order == "continue_first"
        self.stateless = scheduler.stateless
        self.reads_remaining = scheduler.reads_prefill_remaining
        self.memo: dict[tuple[int, int, int, int], StepDecision] = {}
        self.waiting: Waiting = deque()
        self.recv_interval = recv_interval
        self.inbox: Waiting = deque()  # arrived, not yet received (recv_interval > 1)
        self.since_poll = 0  # decode steps since the last poll (recv_interval: a poll is due)
        # TensorRT-LLM's batch wait: on only with both limits (either at 0 stops every wait).
        waits = batch_wait_iters > 0 and batch_wait_tokens > 0
        self.wait_iters = batch_wait_iters if waits else 0
        self.wait_tokens = batch_wait_tokens if waits else 0.0
        self.holding = False  # the inbox was held this iteration (batch wait)
        self.poll_every = recv_interval if recv_interval > 1 else self.wait_iters
        # Where arrivals after t = 0 go: straight to admission, or to the inbox.
        self.entry = self.inbox if self.poll_every > 1 else self.waiting
        self.pending: deque[_Segment] = deque()
        self.pending_total = 0
        self.decode = DecodeQueue()
        self.done = 0
        self.runs: list[StepRun] = []
        self.run_objects: dict[tuple[int, ...], StepRun] = {}
        self.first_records: list[tuple[int, int, int]] = []
        self.finish_records: list[tuple[int, int, int, int]] = []
        self.t_ms = 0.0  # with a clock: the end of the last run
        self.starts_ms: list[float] = []
        self.ends_ms: list[float] = []
        # A closed loop's cycles repeat exactly when decisions depend on the state alone.
        repeats = arrivals.cycle_clients and self.stateless and arrivals.clock is None
        self.cycles = CycleFinder(arrivals.cycle_clients) if repeats else None
        self.cycle: CycleCopies | None = None  # the cycles skipped, once skipped

    def run(self) -> tuple[tuple[StepRun, ...], RequestRecords]:
        """The loop: admit arrivals, ask the scheduler, price the step, advance the groups."""
        arrivals, decode, pending = self.arrivals, self.decode, self.pending
        num_requests, timed = arrivals.num_requests, arrivals.clock is not None
        arrivals.start(self.waiting)
        interrupt, iterations, cycles = self.interrupt, 0, self.cycles
        while self.done < num_requests:
            iterations += 1
            if interrupt is not None and not iterations % INTERRUPT_EVERY:
                interrupt()  # the caller's deadline: raises once it passed
            if cycles is not None:
                cycles.observe(self)  # may skip whole cycles of a closed loop
                if cycles.finished:
                    cycles = None
            arrivals.arrive(self.t_ms, self.entry)
            one_step = arrivals.held_total > 0  # held requests arrive after the next step
            if one_step:
                arrivals.release(len(self.runs), self.entry)
                one_step = arrivals.held_total > 0
            if self.entry is self.inbox:
                self._poll()
            self._admit()
            if not pending and not decode.ready:
                self.t_ms = arrivals.idle_until(self.t_ms, num_requests - self.done)
                continue
            pend, remaining = (
                (pending[0].count, self.effective - pending[0].done) if pending else (0, 0)
            )
            ready = decode.ready
            decision = self._decide(ready, pend, remaining)
            all_advance = decision.d_step == ready
            # Requests still held arrive after the next step: it is taken alone; requests in the
            # inbox are received at the next poll: the run ends there.
            polling = bool(self.inbox)
            if (
                self.stateless
                and decision.p_step == 0
                and not all_advance
                and not one_step
                and not polling
            ):
                self._round_robin(decision)
                continue
            repeat = 1
            if all_advance and not one_step:
                repeat = self._repeat(decision, ready, pend, remaining)
            if polling and repeat > 1:
                repeat = 1 if decision.p_step else min(repeat, self.poll_every - self.since_poll)
            if timed:
                repeat = self._price(decision, repeat)
            self._advance(decision, repeat, all_advance)
        return tuple(self.runs), self._records()

    # ----------------------------------------------------------------------------------------
    # skip whole cycles (closed loops, :mod:`app.core.engine.cycles`)

    def cycle_signature(self) -> tuple[int, ...]:
        """Cheap figures of the state: equal whenever the states are (not conversely)."""
        pending, decode = self.pending, self.decode
        return (
            decode.ready,
            self.pending_total,
            len(pending),
            len(self.waiting),
            pending[0].done if pending else -1,
            # The decode groups' tokens left and ages, summed over their requests.
            decode.rem_moment - decode.shift * decode.ready,
            len(self.runs) * decode.ready - decode.first_moment,
            self.arrivals.held_total,
            self.since_poll,
            len(self.inbox),
            self.next_class,
        )

    def cycle_state_is(self, state: tuple[object, ...]) -> bool:
        """Whether :meth:`cycle_state` would equal ``state``, stopping at the first
        difference (most candidates differ in their first decode groups: no state is built)."""
        pending, decode, waiting, held, since_poll, inbox, next_class = state
        assert isinstance(decode, tuple)
        run, shift, i = len(self.runs), self.decode.shift, 0
        for g in self.decode.groups:
            if g.alive:
                if i == len(decode) or decode[i] != _decode_item(g, run, shift):
                    return False
                i += 1
        if i != len(decode):
            return False
        return (
            self._pending_state(run) == pending
            and self._waiting_state(run) == waiting
            and self.arrivals.held_state(run) == held
            and self.since_poll == since_poll
            and self._waiting_state(run, self.inbox) == inbox
            and self.next_class == next_class
        )

    def cycle_state(self) -> tuple[object, ...]:
        """Everything the next runs depend on, with each arrival and first token as an age
        (runs ago): equal states are followed by the same runs, shifted."""
        run, shift = len(self.runs), self.decode.shift
        return (
            self._pending_state(run),
            tuple(_decode_item(g, run, shift) for g in self.decode.groups if g.alive),
            self._waiting_state(run),
            self.arrivals.held_state(run),
            self.since_poll,
            self._waiting_state(run, self.inbox),
            self.next_class,
        )

    def _pending_state(self, run: int) -> tuple[object, ...]:
        return tuple(
            (s.done, s.count, tuple((c, run - a) for c, a in s.parts)) for s in self.pending
        )

    def _waiting_state(self, run: int, queue: Waiting | None = None) -> tuple[object, ...]:
        return tuple((c, run - a) for c, a in (self.waiting if queue is None else queue))

    def cycle_mark(self) -> tuple[int, ...]:
        """The counters a cycle is measured by: runs, records, done, submitted."""
        return (
            len(self.runs),
            len(self.first_records),
            len(self.finish_records),
            self.done,
            self.arrivals.submitted,
        )

    def skip_cycles(self, mark: tuple[int, ...]) -> bool:
        """The state is the one at ``mark``: append the runs and records since then as many
        more times as the submissions left allow, shifted, and move the state's ages along.
        Returns whether anything was skipped."""
        start, first0, finish0, done0, submitted0 = mark
        arrivals = self.arrivals
        period = len(self.runs) - start
        per_cycle = arrivals.submitted - submitted0
        if period <= 0 or per_cycle <= 0:
            return False
        cycles = (arrivals.num_requests - arrivals.submitted) // per_cycle
        if cycles <= 0:
            return False
        block = self.runs[start:]
        for _ in range(cycles):
            self.runs.extend(block)
        # The cycle's records are kept once; the copies are implied (CycleCopies).
        self.cycle = CycleCopies(
            start=start,
            period=period,
            copies=cycles,
            first_from=first0,
            first_to=len(self.first_records),
            finish_from=finish0,
            finish_to=len(self.finish_records),
        )
        off = cycles * period
        self.done += cycles * (self.done - done0)
        arrivals.skip_cycles(cycles, per_cycle, period)
        for segment in self.pending:
            for part in segment.parts:
                part[1] += off
        for part in self.waiting:
            part[1] += off
        if self.entry is self.inbox:
            for part in self.inbox:
                part[1] += off
        self.decode.shift_first_runs(off)
        return True

    # ----------------------------------------------------------------------------------------
    # admit arrivals

    def _poll(self) -> None:
        """The scheduler polls when a poll is due or it has nothing to run (its idle
        iterations reach the interval at once): the inbox joins the waiting queue. Under a batch
        wait the inbox is held while decodes run, for ``wait_iters`` iterations or until its
        prompts and the decodes reach ``wait_tokens``."""
        if self.wait_iters:
            held = sum(part[0] for part in self.inbox) * self.effective + self.decode.ready
            self.holding = bool(
                self.inbox
                and self.decode.ready
                and self.since_poll < self.wait_iters
                and held < self.wait_tokens
            )
            if self.holding:
                return
        elif self.since_poll < self.recv_interval and (self.pending or self.decode.ready):
            return
        self.since_poll = 0
        waiting = self.waiting
        while self.inbox:
            part = self.inbox.popleft()
            if waiting and waiting[-1][1] == part[1]:
                waiting[-1][0] += part[0]
            else:
                waiting.append(part)

    def _count_steps(self, prefill: bool, steps: int) -> None:
        """``steps`` steps ran: after a prefill step a poll is due (its weight, 1000 in
        SGLang, passes any interval); decode steps count towards the next poll, the polls
        in between (nothing waiting) leaving the remainder."""
        if self.entry is not self.inbox:
            return
        if self.wait_iters:  # every iteration that held the inbox counts
            if self.holding:
                self.since_poll = min(self.since_poll + steps, self.wait_iters)
            return
        interval = self.recv_interval
        if prefill:
            self.since_poll = interval
        elif steps:
            self.since_poll = (self.since_poll + steps - 1) % interval + 1

    def _admit(self) -> None:
        """Waiting requests enter prefill while the running cap allows."""
        waiting, pending = self.waiting, self.pending
        room = (
            sum(part[0] for part in waiting)
            if self.max_running is None
            else self.max_running - self.pending_total - self.decode.ready
        )
        while waiting and room > 0:
            part = waiting[0]
            take = min(part[0], room)
            if take == part[0]:
                waiting.popleft()
            else:
                part[0] -= take
            room -= take
            self.pending_total += take
            if pending and pending[-1].done == 0:
                pending[-1].count += take
                pending[-1].parts.append([take, part[1]])
            else:
                pending.append(_Segment(0, take, deque([[take, part[1]]])))

    def _finish(self, run: int, who: list[Finished]) -> None:
        """Record finishes at the end of ``run`` and tell the arrival source (its clients
        re-submit, or arrivals take the freed slots)."""
        for count, first_run, tokens in who:
            self.finish_records.append((count, first_run, run, tokens))
            self.done += count
        self.arrivals.finished(run, who, self.t_ms, self.entry)

    # ----------------------------------------------------------------------------------------
    # ask the scheduler

    def _front(self) -> tuple[int, int]:
        """Requests at the front with the same progress, and the tokens they have left."""
        if self.pending:
            return self.pending[0].count, self.effective - self.pending[0].done
        return 0, 0

    def _decide(self, ready: int, pend: int, remaining: int) -> StepDecision:
        budget = self.budget
        chunk_query_len = (budget if budget < remaining else remaining) if pend else budget
        key = (ready, pend, chunk_query_len, remaining if self.reads_remaining else -1)
        stateless = self.stateless
        decision = self.memo.get(key) if stateless else None
        if decision is None:
            state = SchedulerState(ready, pend, chunk_query_len, budget, remaining)
            decision = checked_decision(self.scheduler, state)
            if stateless:
                self.memo[key] = decision
        return decision

    def _repeat(self, decision: StepDecision, ready: int, pend: int, remaining: int) -> int:
        """How many identical steps (every decode request advancing) can be taken in one move."""
        if not self.stateless:
            return 1
        p_step, tokens = decision.p_step, decision.prefill_tokens or 0
        if p_step == 0:
            return self.decode.min_remaining()
        if p_step != pend or not (self.continue_first or len(self.pending) == 1):
            return 1
        # The front group walks through its chunks while the decision stays the same.
        limit = self.decode.min_remaining() if ready else remaining
        budget = self.budget
        if self.reads_remaining:
            state = SchedulerState(ready, pend, min(budget, remaining), budget, remaining)
            floor = self.scheduler.stable_down_to(state, decision)
            if floor is not None:
                return min(limit, 1 + (remaining - floor) // tokens)
            repeat = 1
            while repeat < limit:
                left = remaining - repeat * tokens
                if left <= 0 or self._decide(ready, pend, left) != decision:
                    break
                repeat += 1
            return repeat
        if remaining >= budget:
            # Same state (and so decision) while a full planned chunk is left.
            return min(limit, 1 + (remaining - budget) // tokens)
        return 1

    # ----------------------------------------------------------------------------------------
    # price the step (timed arrivals only)

    def _price(self, decision: StepDecision, repeat: int) -> int:
        """Cut the run at the next arrival and advance the clock over it."""
        clock = self.arrivals.clock
        assert clock is not None
        horizon = self.arrivals.horizon_ms
        p_step, d_step, tokens = decision.p_step, decision.d_step, decision.prefill_tokens or 0
        self.starts_ms.append(self.t_ms)
        if p_step == 0:
            step = clock(0, 0, 0, d_step)
            cut = steps_until(self.t_ms, horizon, step)
            repeat = repeat if cut is None else min(repeat, cut)
            self.t_ms += repeat * step
        else:
            start = self.pending[0].done
            elapsed_ms = 0.0
            for i in range(repeat):
                elapsed_ms += clock(p_step, tokens, start + (i + 1) * tokens, d_step)
                if horizon is not None and self.t_ms + elapsed_ms >= horizon:
                    repeat = i + 1
                    break
            self.t_ms += elapsed_ms
        self.ends_ms.append(self.t_ms)
        return repeat

    # ----------------------------------------------------------------------------------------
    # advance the groups

    def _advance(self, decision: StepDecision, repeat: int, all_advance: bool) -> None:
        """``repeat`` steps of ``decision``: prefill progress, first tokens, decode, finishes."""
        p_step, d_step = decision.p_step, decision.d_step
        tokens = decision.prefill_tokens or 0
        decode = self.decode
        run_index = len(self.runs)
        finished: list[Finished] = []
        # Decode: the front d_step requests (all of them when all advance) emit a token.
        selected = decode.take(d_step) if d_step and not all_advance else []
        first_tokens = 0
        prefill_start = -1
        if p_step:
            # Prefill: p_step requests at the front compute ``tokens`` more, ``repeat`` times.
            pending = self.pending
            head = pending[0]
            prefill_start = head.done
            moved = pending.popleft() if head.count == p_step else head.split_front(p_step)
            moved.done += tokens * repeat
            if moved.done >= self.effective:
                first_tokens = p_step
                self.pending_total -= p_step
                shifted = repeat if all_advance and d_step else 0
                self._first_tokens(moved, run_index, shifted, all_advance, finished)
            else:
                self._requeue_prefill(moved)
        # Decode bookkeeping: finished requests leave, the others re-queue at the back.
        if d_step and all_advance:
            finished.extend(decode.advance_all(repeat))
        if selected:
            finished.extend(decode.requeue(selected))
        self._finish(run_index, finished)
        self._count_steps(p_step > 0, repeat)
        done = sum(part[0] for part in finished) if finished else 0
        self._append_run(p_step, prefill_start, tokens, d_step, repeat, first_tokens, done)

    def _append_run(self, *fields: int) -> None:
        """Append the run of these :class:`StepRun` fields, in their order. Equal runs are one
        object (a run is frozen): a closed loop repeats its runs, round after round."""
        run = self.run_objects.get(fields)
        if run is None:
            p_step, prefill_start, tokens, d_step, repeat, first_tokens, finished = fields
            run = self.run_objects[fields] = StepRun(
                p_step=p_step,
                prefill_start=prefill_start,
                prefill_tokens=tokens,
                d_step=d_step,
                repeat=repeat,
                first_tokens=first_tokens,
                finished=finished,
            )
        self.runs.append(run)

    def _first_tokens(
        self,
        moved: _Segment,
        run_index: int,
        shifted: int,
        front: bool,
        finished: list[Finished],
    ) -> None:
        """``moved`` completed its last chunk at the end of ``run_index``: first tokens, then
        decode (or done, when the output is one token)."""
        for count, arrival in moved.parts:
            self.first_records.append((count, arrival, run_index))
        classes = self.decode_classes
        if len(classes) == 1:  # fixed lengths (the common case: no split)
            tokens = classes[0]
            if tokens == 0:
                finished.append((moved.count, run_index, 0))
            else:
                self.decode.promote(
                    moved.count, tokens + shifted, run_index, front=front, tokens=tokens
                )
            return
        # The requests take the classes in turn from ``next_class``: as even a split as whole
        # requests allow, the classes reached first taking one more.
        k, start, count = len(classes), self.next_class, moved.count
        self.next_class = (start + count) % k
        for i in range(min(k, count)):
            c = (start + i) % k
            share = count // k + (1 if i < count % k else 0)
            self._promote(share, classes[c], run_index, shifted, front, finished)

    def _promote(
        self,
        count: int,
        tokens: int,
        run_index: int,
        shifted: int,
        front: bool,
        finished: list[Finished],
    ) -> None:
        """``count`` requests with ``tokens`` decode tokens to emit start decoding (or are done,
        when the output is one token)."""
        if tokens == 0:
            finished.append((count, run_index, 0))
        else:
            # Promoted requests queue behind the unselected ones and ahead of the selected ones
            # re-queueing later (all were selected when all advance).
            self.decode.promote(count, tokens + shifted, run_index, front=front, tokens=tokens)

    def _requeue_prefill(self, moved: _Segment) -> None:
        """``moved`` has chunks left: back to the front (``continue_first``) or the back."""
        pending = self.pending
        if self.continue_first:
            if pending and pending[0].done == moved.done:
                pending[0].count += moved.count
                pending[0].parts.extendleft(reversed(moved.parts))
            else:
                pending.appendleft(moved)
        elif pending and pending[-1].done == moved.done:
            pending[-1].count += moved.count
            pending[-1].parts.extend(moved.parts)
        else:
            pending.append(moved)

    def _round_robin(self, decision: StepDecision) -> None:
        """Round robin with nobody joining decode: the whole stretch in one move."""
        d_step = decision.d_step
        clock = self.arrivals.clock
        start_ms = self.t_ms
        d_ms = clock(0, 0, 0, d_step) if clock is not None else 0.0
        max_steps = steps_until(start_ms, self.arrivals.horizon_ms, d_ms)
        run_index = len(self.runs)  # the run the next finish belongs to

        def on_finish(ready_now: int, who: list[Finished], steps: int) -> bool:
            nonlocal run_index
            self.t_ms = start_ms + steps * d_ms
            self._finish(run_index, who)
            run_index += 1
            self._admit()
            if (ready_now == 0 and not self.pending) or self.arrivals.held_total or self.inbox:
                return False
            return self._decide(ready_now, *self._front()) == decision

        steps = 0
        for repeat, who in self.decode.rotate(d_step, on_finish, max_steps):
            if clock is not None:
                self.starts_ms.append(start_ms + steps * d_ms)
                self.ends_ms.append(start_ms + (steps + repeat) * d_ms)
            steps += repeat
            self._append_run(0, -1, 0, d_step, repeat, 0, sum(part[0] for part in who))
        self._count_steps(False, steps)
        if clock is not None:
            self.t_ms = start_ms + steps * d_ms

    def _records(self) -> RequestRecords:
        timed = self.arrivals.clock is not None
        return RequestRecords(
            first=tuple(self.first_records),
            finish=tuple(self.finish_records),
            last_arrival_run=self.arrivals.last_arrival_run,
            sent_ms=self.arrivals.sent_ms,
            starts_ms=tuple(self.starts_ms) if timed else None,
            ends_ms=tuple(self.ends_ms) if timed else None,
            cycle=self.cycle,
        )
