"""Where the engine's requests come from: the arrival source, a strategy of the engine loop.

Three sources, one small interface (:class:`ArrivalSource`):

- :class:`Burst`: ``N`` requests at ``t = 0`` (the RFC's workload);
- :class:`ClosedLoop`: ``C`` clients at ``t = 0``, each finish re-submits until
  ``num_requests`` were sent (``benchmark_serving --max-concurrency``), either at once or
  after the client's turnaround;
- :class:`TimedArrivals`: requests at given times (Poisson), optionally at most
  ``max_in_flight`` sent and not finished, with the clock that prices each step: the loop
  keeps the clock only for this source.

A source is used by one engine run (it keeps the state of its arrivals). Arrivals wait in the
engine's ``waiting`` queue as ``[requests, arrival]`` entries, in arrival order; ``arrival`` is
a run index (``-1``: ``t = 0``) or, for timed arrivals, an index into :attr:`sent_ms`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence

from app.core.errors import SimulationError

#: The latency of one engine step: ``(p_step, prefill_tokens, prefill_seq_len, d_step) -> ms``.
StepClock = Callable[[int, int, int, int], float]
#: Requests that wait for admission: ``[requests, arrival]`` entries in arrival order.
Waiting = deque[list[int]]
#: Requests that finished together: ``(requests, run of their first token, decode tokens)``.
Finished = tuple[int, int, int]


class ArrivalSource:
    """The interface the engine loop sees. The defaults are those of an untimed source."""

    #: Requests the run serves in all; the loop ends when that many finished.
    num_requests: int
    #: Prices one step when the loop keeps the clock (timed arrivals); ``None`` otherwise.
    clock: StepClock | None = None
    #: The run at whose end the last request was submitted (``-1``: ``t = 0``).
    last_arrival_run: int = -1

    def start(self, waiting: Waiting) -> None:
        """Put the requests present at ``t = 0`` into ``waiting``."""

    def arrive(self, now_ms: float, waiting: Waiting) -> None:
        """Requests that arrived by ``now_ms`` join ``waiting`` (timed arrivals only)."""

    def release(self, runs: int, waiting: Waiting) -> None:
        """Re-submissions held back one step arrive once ``runs`` runs were taken (closed
        loops with an arrival spread)."""

    #: Requests held back to arrive after the next run (the loop takes it as one step).
    held_total: int = 0

    def held_state(self, run: int) -> tuple[tuple[int, int, int], ...]:
        """The held requests, the ages of their arrival and of the run after which they are
        taken, at the top of ``run`` (part of a cycle's state)."""
        return ()

    @property
    def horizon_ms(self) -> float | None:
        """When the next request arrives on its own (``None``: never, or not timed)."""
        return None

    def finished(self, run: int, who: Sequence[Finished], now_ms: float, waiting: Waiting) -> None:
        """``who`` completed at the end of ``run`` (at ``now_ms`` when the clock is kept)."""

    def idle_until(self, now_ms: float, left: int) -> float:
        """Nothing runs and ``left`` requests are not done: when the engine wakes up."""
        raise SimulationError(f"{left} requests neither ran nor were left to arrive")

    #: Clients whose requests re-submit (the loop may skip whole cycles, :mod:`.cycles`);
    #: 0: the arrivals do not repeat.
    cycle_clients: int = 0
    #: Requests submitted so far (closed loops count them).
    submitted: int = 0

    def skip_cycles(self, cycles: int, submitted_per_cycle: int, runs_per_cycle: int) -> None:
        """The loop skipped ``cycles`` cycles of ``runs_per_cycle`` runs, each submitting
        ``submitted_per_cycle`` requests."""
        raise SimulationError("these arrivals do not repeat in cycles")

    @property
    def sent_ms(self) -> tuple[float, ...] | None:
        """When each arrival was sent to the engine (timed arrivals only)."""
        return None


def late_share(requests: int, spread: float) -> int:
    """Of ``requests`` re-submissions made at one step's end, how many miss the next step
    under an arrival spread of ``spread``: the nearest whole share, and never all of them (the
    first of a group to re-submit makes the next step)."""
    return min(requests - 1, math.floor(spread * requests + 0.5)) if requests > 1 else 0


def _join(waiting: Waiting, count: int, arrival: int) -> None:
    if waiting and waiting[-1][1] == arrival:
        waiting[-1][0] += count
    else:
        waiting.append([count, arrival])


class ClosedLoop(ArrivalSource):
    """``clients`` requests at ``t = 0``; each finished request is replaced by a new one that
    arrives when it finishes, until ``num_requests`` were submitted.

    ``arrival_spread`` (in ``[0, 0.5]``): the share of the requests finishing at one step's end
    whose successors reach the engine one step later (:func:`late_share`): a client's
    turnaround (reading the last token, sending the next request, the server tokenizing it)
    lands some re-submissions after the next step was scheduled, so a wave of requests that
    finished together is prefilled in two steps and the clients drift apart round after round.
    0 keeps every wave together (clients in lock step).

    ``turnaround``: the engine starts its next step as soon as one ends and reads new requests
    only between steps, while a client needs a few milliseconds to re-submit. A re-submission
    made at a step's end is scheduled after the next step, which it waits for (its TTFT counts
    from the step's end, when it was sent); when nothing is left to run, the first one wakes
    the engine and runs alone and the others wait for that step. The ``t = 0`` wave is sent to
    an idle engine: one request, then the others after its step. With a spread, the late share
    of the others is sent a step later still. Off: every re-submission makes the next step.
    """

    def __init__(
        self,
        clients: int,
        num_requests: int,
        arrival_spread: float = 0.0,
        *,
        turnaround: bool = False,
    ) -> None:
        self.clients = clients
        self.num_requests = num_requests
        self.submitted = clients
        self.done = 0  # requests finished so far
        self.arrival_spread = arrival_spread
        self.turnaround = turnaround
        # [requests, arrival run, run after which the engine takes them]
        self.held: list[list[int]] = []
        # Cycles repeat only while finishes re-submit, and over a few rounds of requests.
        self.cycle_clients = clients if num_requests >= 3 * clients else 0

    def skip_cycles(self, cycles: int, submitted_per_cycle: int, runs_per_cycle: int) -> None:
        self.submitted += cycles * submitted_per_cycle
        self.done += cycles * submitted_per_cycle
        if self.last_arrival_run >= 0:
            self.last_arrival_run += cycles * runs_per_cycle
        for part in self.held:
            part[1] += cycles * runs_per_cycle
            part[2] += cycles * runs_per_cycle

    def _hold(self, requests: int, arrival: int, after: int) -> None:
        if requests:
            self.held.append([requests, arrival, after])
            self.held_total += requests

    def start(self, waiting: Waiting) -> None:
        if self.turnaround:
            waiting.append([1, -1])
            self._hold(self.clients - 1, -1, 0)
        else:
            waiting.append([self.clients, -1])

    def finished(self, run: int, who: Sequence[Finished], now_ms: float, waiting: Waiting) -> None:
        if not who:
            return  # most runs finish nobody
        count = sum(part[0] for part in who)
        # Nothing left in flight or waiting: the engine goes idle at this step's end.
        idle = self.done + count == self.submitted and not waiting
        self.done += count
        more = min(count, self.num_requests - self.submitted)
        if more <= 0:
            return
        self.submitted += more
        if not self.turnaround:
            late = late_share(more, self.arrival_spread)
            # The late ones arrive at the end of the next run (taken as one step: see
            # ``held_total``).
            self._hold(late, run + 1, run + 1)
            self.last_arrival_run = run + 1 if late else run
            _join(waiting, more - late, run)
            return
        woken = 1 if idle else 0  # the first re-submission to an idle engine runs at once
        if woken:
            _join(waiting, woken, run)
        late = late_share(more - woken, self.arrival_spread)
        self._hold(more - woken - late, run, run + 1)
        self._hold(late, run + 1, run + 2)
        self.last_arrival_run = run + 1 if late else run

    def release(self, runs: int, waiting: Waiting) -> None:
        if not self.held:
            return
        keep = []
        for part in self.held:
            if part[2] < runs:
                _join(waiting, part[0], part[1])
                self.held_total -= part[0]
            else:
                keep.append(part)
        self.held = keep

    def held_state(self, run: int) -> tuple[tuple[int, int, int], ...]:
        return tuple((count, run - arrival, run - after) for count, arrival, after in self.held)


class Burst(ClosedLoop):
    """``requests`` requests at ``t = 0`` and nothing after them (the RFC's workload)."""

    def __init__(self, requests: int) -> None:
        super().__init__(requests, requests)


class TimedArrivals(ArrivalSource):
    """Requests that arrive at given times (an open workload) and the clock that places them.

    ``times_ms``: non-decreasing arrival times, one per request. ``max_in_flight`` caps the
    requests sent and not finished, like a benchmark client's ``--max-concurrency``: an arrival
    that finds every slot taken waits on the client side and is sent when a request finishes
    (its TTFT counts from then). ``step_ms`` prices one engine step, so the loop knows when each
    step ends and which arrivals it has seen.
    """

    def __init__(
        self, *, times_ms: tuple[float, ...], max_in_flight: int | None, step_ms: StepClock
    ) -> None:
        self.times_ms = times_ms
        self.num_requests = len(times_ms)
        self.clock = step_ms
        self.cap = max_in_flight
        self.next = 0  # index of the next arrival
        self.backlog = 0  # arrived, waiting for a free slot
        self.in_flight = 0
        self._sent_ms: list[float] = []

    @property
    def horizon_ms(self) -> float | None:
        return self.times_ms[self.next] if self.next < len(self.times_ms) else None

    @property
    def sent_ms(self) -> tuple[float, ...]:
        return tuple(self._sent_ms)

    def _send(self, count: int, at_ms: float, waiting: Waiting) -> None:
        sent = self._sent_ms
        last = len(sent) - 1
        if last >= 0 and sent[last] == at_ms and waiting and waiting[-1][1] == last:
            waiting[-1][0] += count
        else:
            sent.append(at_ms)
            waiting.append([count, last + 1])
        self.in_flight += count

    def arrive(self, now_ms: float, waiting: Waiting) -> None:
        """Arrivals up to ``now_ms``: sent when they arrived if a slot was free, else queued."""
        times = self.times_ms
        while self.next < len(times) and times[self.next] <= now_ms:
            if self.backlog == 0 and (self.cap is None or self.in_flight < self.cap):
                self._send(1, times[self.next], waiting)
            else:
                self.backlog += 1
            self.next += 1

    def finished(self, run: int, who: Sequence[Finished], now_ms: float, waiting: Waiting) -> None:
        """Requests that arrived during the run are sent, then queued arrivals take the slots of
        the finished ones."""
        self.arrive(now_ms, waiting)
        for count, *_ in who:
            self.in_flight -= count
            if self.backlog:  # only when a cap is set
                free = min(self.backlog, (self.cap or 0) - self.in_flight)
                if free > 0:
                    self.backlog -= free
                    self._send(free, now_ms, waiting)

    def idle_until(self, now_ms: float, left: int) -> float:
        horizon = self.horizon_ms
        if horizon is None:
            return super().idle_until(now_ms, left)
        return max(now_ms, horizon)  # idle until the next arrival


def steps_until(now_ms: float, horizon_ms: float | None, step_ms: float) -> int | None:
    """Fewest steps of ``step_ms`` after ``now_ms`` that reach ``horizon_ms`` (at least 1);
    ``None`` when there is no horizon or steps take no time."""
    if horizon_ms is None or step_ms <= 0.0:
        return None
    steps = max(1, math.ceil((horizon_ms - now_ms) / step_ms))
    while now_ms + steps * step_ms < horizon_ms:  # floating-point rounding
        steps += 1
    return steps
