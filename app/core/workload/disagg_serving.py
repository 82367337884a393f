"""Disaggregated serving: a prefill pool and a decode pool, one set of clients.

Closed loop (:func:`simulate_disagg_serving`): ``concurrency`` clients send a request, wait
for its last token and send the next, until ``num_requests`` were sent (the closed loop of
:mod:`.closed_loop`, over the whole deployment). Open loop (:func:`simulate_disagg_poisson`):
requests arrive at given times (a Poisson process's, :func:`~app.core.workload.poisson.
poisson_arrivals_ms`) whatever the deployment answers, so queues grow without bound when the
rate exceeds what a pool serves. A request goes through four stages:

1. **Prefill queue.** It joins the queue of the least loaded prefill unit (fewest requests
   queued or in progress; ties to the lowest index).
2. **Prefill.** A free unit takes up to ``max(1, budget // first_chunk)`` waiting requests per
   rank (the profile's token budget over the chunk plan, :meth:`WorkloadSpec.
   get_prefill_chunk_plan`) and runs them through every chunk in prefill-only steps: a job of
   fixed duration, the sum of the chunks' prefill forwards at that batch (each forward includes
   the engine's per-iteration host time, as every step the serving model prices does).
3. **KV transfer.** The job's prompts' KV cache moves to the least loaded decode unit (fewest
   running or waiting requests): ``fixed_ms + requests * bytes_per_request / bytes_per_s``
   (:class:`KvTransfer`; the caller picks the bandwidth of the interconnect tier between the
   pools).
4. **Decode.** The decode unit admits arrived requests at a step boundary while fewer than its
   running cap (``max_num_seqs`` and the KV pool) run; every step emits one token per running
   request and costs the decode forward of the running batch at the spec's representative
   context (:meth:`WorkloadSpec.decode_shape`). Runs of identical steps (no finish, no arrival
   that could be admitted) are taken in one move, and a run is cut at the first step boundary
   after a new arrival, so cost follows scheduling events, not tokens.

When the client gets the first token is the engine's choice (``first_token``):

- ``"decode_step"``: at the end of the request's first decode step (the decode worker computes
  it); the decode side then runs ``output_length`` steps. TTFT = prefill queue + prefill +
  transfer + decode admission wait + one decode step.
- ``"admission"``: when the decode worker takes the request in (it streams the token the
  prefill computed, which came with the KV); ``output_length - 1`` decode steps. TTFT = prefill
  queue + prefill + transfer + decode admission wait.
- ``"prefill"``: when the prefill job ends (the front end streams the prefill worker's token
  before the request moves on); ``output_length - 1`` decode steps. TTFT = prefill queue +
  prefill; the transfer and the decode admission wait fall between the first and second
  tokens, so they count in TPOT.

TPOT = the time from the first token to the last over ``output_length - 1``. With a length range
(``spec.length_range_ratio`` < 1) every request prefills the mean prompt (the chunk plan's) and
decodes the mean output (``spec.mean_output_length``): no per-request lengths here.

A unit is one engine instance: a worker with independent attention data-parallel ranks is that
many units (one rank each); a worker whose ranks are coupled (attention DP with expert-parallel
MoE, :mod:`.coupled`) is one unit of ``ranks`` ranks whose step takes ``ranks`` budgets (or
running caps) and costs the busiest rank's share (:class:`~app.core.workload.coupled.
BusiestRank`).

Requests stay in groups (those that travel together: one prefill job, one decode admission),
so the cost grows with prefill jobs and decode events, not with clients or tokens.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from app.core.chunking import require_int
from app.core.cost import LatencyModel
from app.core.engine import evaluate_shapes, prefill_shape
from app.core.errors import InvalidParameterError, SimulationError
from app.core.limits import FirstToken, Pool
from app.core.spec import WorkloadSpec
from app.core.workload.closed_loop import default_num_requests
from app.core.workload.coupled import BusiestRank
from app.core.workload.metrics import MAX_REQUESTS

MS_PER_S = 1e3
FIRST_TOKEN_RULES: tuple[FirstToken, ...] = ("prefill", "admission", "decode_step")


@dataclass(frozen=True, slots=True, kw_only=True)
class KvTransfer:
    """How long a prefill job's KV cache takes to reach its decode unit.

    ``bytes_per_request``: the KV one request's prompt holds on one device of the prefill
    worker (every device sends its own share over its own link); ``bandwidth_bytes_per_s``:
    one device's link of the tier between the pools, efficiency included; ``fixed_ms``: the
    per-transfer cost that does not scale with bytes (handshake, block descriptors, completion
    notice). The requests of one job share the link, so their bytes add up.
    """

    bytes_per_request: float
    bandwidth_bytes_per_s: float
    fixed_ms: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.bytes_per_request) and self.bytes_per_request >= 0):
            raise InvalidParameterError(
                "bytes_per_request", self.bytes_per_request, "a number >= 0"
            )
        if not (math.isfinite(self.bandwidth_bytes_per_s) and self.bandwidth_bytes_per_s > 0):
            raise InvalidParameterError(
                "bandwidth_bytes_per_s", self.bandwidth_bytes_per_s, "a number > 0"
            )
        if not (math.isfinite(self.fixed_ms) and self.fixed_ms >= 0):
            raise InvalidParameterError("fixed_ms", self.fixed_ms, "a number >= 0")

    def time_ms(self, requests: int) -> float:
        return self.fixed_ms + requests * self.bytes_per_request / self.bandwidth_bytes_per_s * (
            MS_PER_S
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefillPool:
    """``workers`` prefill workers of ``ranks`` attention data-parallel ranks each;
    ``latency``: one rank's model; ``max_requests_per_rank``: a cap on one job's requests
    per rank (e.g. the prompts whose KV fits), besides the token budget."""

    workers: int
    latency: LatencyModel
    ranks: int = 1
    coupled: bool = False
    max_requests_per_rank: int | None = None

    def __post_init__(self) -> None:
        require_int("prefill_workers", self.workers, 1, MAX_REQUESTS)
        require_int("prefill_ranks", self.ranks, 1, MAX_REQUESTS)
        if self.max_requests_per_rank is not None:
            require_int("max_requests_per_rank", self.max_requests_per_rank, 1, MAX_REQUESTS)


@dataclass(frozen=True, slots=True, kw_only=True)
class DecodePool:
    """``workers`` decode workers of ``ranks`` attention data-parallel ranks each;
    ``latency``: one rank's model; ``max_running``: requests one rank runs at once."""

    workers: int
    latency: LatencyModel
    max_running: int
    ranks: int = 1
    coupled: bool = False

    def __post_init__(self) -> None:
        require_int("decode_workers", self.workers, 1, MAX_REQUESTS)
        require_int("decode_ranks", self.ranks, 1, MAX_REQUESTS)
        require_int("max_running", self.max_running, 1, MAX_REQUESTS)


@dataclass(frozen=True, slots=True, kw_only=True)
class DisaggServingResult:
    """Means over every request (the benchmark window: all requests from t = 0)."""

    ttft_ms: float
    tpot_ms: float
    e2e_ms: float
    makespan_ms: float
    throughput_tokens_s: float
    request_throughput_s: float
    num_requests: int
    #: Mean wait for a prefill unit, for the KV transfer, and for a decode slot (ms).
    prefill_queue_ms: float
    transfer_ms: float
    decode_wait_ms: float
    #: Busy share of the pool's units over the makespan.
    prefill_utilisation: float
    decode_utilisation: float
    #: The pool requests wait for most (queue time), see :func:`binding_pool`.
    binding_pool: Pool
    prefill_jobs: int
    decode_runs: int
    forward_evaluations: int


def binding_pool(prefill_wait_ms: float, decode_wait_ms: float, pu: float, du: float) -> Pool:
    """The pool that limits the deployment: the one requests queue for longer (a prefill unit
    vs a decode slot); without queueing, the busier pool."""
    if prefill_wait_ms != decode_wait_ms:
        return "prefill" if prefill_wait_ms > decode_wait_ms else "decode"
    return "prefill" if pu >= du else "decode"


# -- units and prices (shared with the disaggregated search) --------------------------------
def units_per_worker(pool: PrefillPool | DecodePool) -> int:
    """Engine units of one worker: one of all its ranks when they are coupled, else one per
    rank."""
    return 1 if pool.coupled else pool.ranks


def unit_model(pool: PrefillPool | DecodePool) -> LatencyModel:
    """One unit's step model: the busiest rank's share when a unit has several ranks."""
    ranks = pool.ranks // units_per_worker(pool)
    return BusiestRank(pool.latency, ranks) if ranks > 1 else pool.latency


def prefill_job_max(spec: WorkloadSpec, prefill: PrefillPool) -> int:
    """Requests one prefill job of a unit holds: the token budget over the first chunk per
    rank (at most ``max_requests_per_rank``), times the unit's ranks."""
    per_rank = max(1, spec.max_batched_tokens // spec.get_prefill_chunk_plan()[0].query_len)
    if prefill.max_requests_per_rank is not None:
        per_rank = min(per_rank, prefill.max_requests_per_rank)
    return per_rank * (prefill.ranks // units_per_worker(prefill))


def prefill_job_ms(spec: WorkloadSpec, model: LatencyModel, requests: int) -> float:
    """One prefill job of ``requests`` prompts: the sum of its chunks' forwards."""
    shapes = [
        prefill_shape(requests, chunk.query_len, chunk.seq_len)
        for chunk in spec.get_prefill_chunk_plan()
    ]
    latencies = evaluate_shapes(shapes, model)
    return math.fsum(latencies[s] for s in shapes)


def decode_step_ms(spec: WorkloadSpec, model: LatencyModel, running: int) -> float:
    """One decode step of ``running`` requests at the spec's representative context."""
    shape = spec.decode_shape(running)
    return evaluate_shapes((shape,), model)[shape]


# -- the simulation --------------------------------------------------------------------------
@dataclass(slots=True)
class _Group:
    """Requests that travel together: ``count`` of them, ``arrivals_ms`` the sum of their
    arrival times (means need only the sums)."""

    count: int
    arrivals_ms: float
    stage_ms: float = 0.0  # the sum of when they entered the current queue
    first_ms: float = 0.0  # the sum of their first-token times, once known

    def split(self, count: int) -> _Group:
        """Take ``count`` requests off this group (their share of the sums goes with them)."""
        share = count / self.count
        part = _Group(count, self.arrivals_ms * share, self.stage_ms * share, self.first_ms * share)
        self.count -= count
        self.arrivals_ms -= part.arrivals_ms
        self.stage_ms -= part.stage_ms
        self.first_ms -= part.first_ms
        return part


@dataclass(slots=True)
class _PrefillUnit:
    queue: deque[_Group] = field(default_factory=deque)
    queued: int = 0
    in_progress: int = 0
    busy_ms: float = 0.0


@dataclass(slots=True)
class _DecodeUnit:
    waiting: list[tuple[float, int, _Group]] = field(default_factory=list)  # (ready, seq, group)
    waiting_count: int = 0
    running: list[tuple[int, int, _Group]] = field(default_factory=list)  # heap by last step
    running_count: int = 0
    steps_done: int = 0
    run_start_ms: float = 0.0
    run_step_ms: float = 0.0
    run_steps: int = 0
    version: int = 0
    idle: bool = True
    wake_ms: float = math.inf
    busy_ms: float = 0.0


@dataclass(slots=True)
class _Totals:
    first_token_ms: float = 0.0
    arrivals_ms: float = 0.0
    finish_ms: float = 0.0
    tpot_ms: float = 0.0
    prefill_queue_ms: float = 0.0
    transfer_ms: float = 0.0
    decode_wait_ms: float = 0.0
    finished: int = 0
    makespan_ms: float = 0.0


_PREFILL_DONE = 0
_DECODE_BOUNDARY = 1
_ARRIVAL = 2


def least_loaded_spread(count: int, loads: list[int]) -> Iterator[tuple[int, int]]:
    """``count`` requests given one by one to the least loaded unit (ties: lowest index), as
    ``(unit, requests)`` pairs: water-filling over the sorted loads."""
    if len(loads) == 1:  # one unit takes them all
        if count:
            yield 0, count
        return
    if count == 1:  # the common case: the least loaded unit, the lowest index among equals
        yield min(range(len(loads)), key=loads.__getitem__), 1
        return
    order = sorted(range(len(loads)), key=loads.__getitem__)  # stable: ties by index
    level = loads[order[0]]
    filled = 1
    left = count
    while True:
        while filled < len(order) and loads[order[filled]] <= level:
            filled += 1
        if filled == len(order) or (loads[order[filled]] - level) * filled >= left:
            each, extra = divmod(left, filled)
            level += each
            for rank, i in enumerate(sorted(order[:filled])):
                given = level - loads[i] + (1 if rank < extra else 0)
                if given:
                    yield i, given
            return
        left -= (loads[order[filled]] - level) * filled
        level = loads[order[filled]]


class _Simulation:
    """One run's clock, queues and totals (see the module docstring)."""

    def __init__(
        self,
        spec: WorkloadSpec,
        concurrency: int,
        prefill: PrefillPool,
        decode: DecodePool,
        transfer: KvTransfer,
        num_requests: int,
        first_token: FirstToken,
        arrivals_ms: tuple[float, ...] | None = None,
    ) -> None:
        self.spec = spec
        self.concurrency = concurrency
        #: Open loop: the requests' arrival times (a finish sends nothing); None: closed loop.
        self.arrivals_ms = arrivals_ms
        self.num_requests = num_requests
        self.transfer = transfer
        # prefill units: coupled workers step their ranks together, others are one rank each
        self.prefill_units = [
            _PrefillUnit() for _ in range(prefill.workers * units_per_worker(prefill))
        ]
        self.prefill_model = unit_model(prefill)
        self.job_max = prefill_job_max(spec, prefill)
        self.job_prices: dict[int, float] = {}
        self.decode_units = [
            _DecodeUnit() for _ in range(decode.workers * units_per_worker(decode))
        ]
        self.decode_model = unit_model(decode)
        self.decode_cap = decode.max_running * (decode.ranks // units_per_worker(decode))
        self.step_prices: dict[int, float] = {}
        output = spec.mean_output_length
        self.first_token = first_token
        self.decode_steps = output if first_token == "decode_step" else output - 1
        self.tpot_steps = output - 1
        self.events: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.sent = 0
        self.totals = _Totals()
        self.prefill_jobs = 0
        self.decode_runs = 0
        self.jobs: dict[int, _Group] = {}

    # -- prices ------------------------------------------------------------------------------
    def job_ms(self, requests: int) -> float:
        found = self.job_prices.get(requests)
        if found is None:
            found = self.job_prices[requests] = prefill_job_ms(
                self.spec, self.prefill_model, requests
            )
        return found

    def step_ms(self, running: int) -> float:
        found = self.step_prices.get(running)
        if found is None:
            found = self.step_prices[running] = decode_step_ms(
                self.spec, self.decode_model, running
            )
        return found

    # -- events ------------------------------------------------------------------------------
    def push(self, t_ms: float, kind: int, unit: int, version: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t_ms, self.seq, kind, unit, version))

    def submit(self, t_ms: float, count: int) -> None:
        """``count`` clients send their next request at ``t_ms`` (while requests remain)."""
        count = min(count, self.num_requests - self.sent)
        if count <= 0:
            return
        self.sent += count
        loads = [u.queued + u.in_progress for u in self.prefill_units]
        for i, n in least_loaded_spread(count, loads):
            unit = self.prefill_units[i]
            unit.queue.append(_Group(n, n * t_ms, n * t_ms))
            unit.queued += n
            if not unit.in_progress:
                self.start_job(i, t_ms)

    def resubmit(self, t_ms: float, count: int) -> None:
        """``count`` requests finished at ``t_ms``: their clients send the next ones (closed
        loop; an open loop's requests arrive on their own schedule)."""
        if self.arrivals_ms is None:
            self.submit(t_ms, count)

    def start_job(self, index: int, t_ms: float) -> None:
        unit = self.prefill_units[index]
        take = min(self.job_max, unit.queued)
        job = _Group(0, 0.0)
        while job.count < take:
            front = unit.queue[0]
            part = front if front.count <= take - job.count else front.split(take - job.count)
            if part is front:
                unit.queue.popleft()
            job.count += part.count
            job.arrivals_ms += part.arrivals_ms
            job.stage_ms += part.stage_ms
        unit.queued -= take
        unit.in_progress = take
        self.totals.prefill_queue_ms += take * t_ms - job.stage_ms
        duration = self.job_ms(take)
        unit.busy_ms += duration
        self.prefill_jobs += 1
        self.jobs[index] = job
        self.push(t_ms + duration, _PREFILL_DONE, index)

    def prefill_done(self, index: int, t_ms: float) -> None:
        unit = self.prefill_units[index]
        job = self.jobs.pop(index)
        unit.in_progress = 0
        if unit.queued:
            self.start_job(index, t_ms)
        transfer_ms = self.transfer.time_ms(job.count)
        ready_ms = t_ms + transfer_ms
        self.totals.transfer_ms += transfer_ms * job.count
        loads = [u.running_count + u.waiting_count for u in self.decode_units]
        if self.first_token == "prefill":
            job.first_ms = job.count * t_ms
        for i, n in least_loaded_spread(job.count, loads):
            part = job if n == job.count else job.split(n)
            part.stage_ms = n * ready_ms
            self.arrive(i, ready_ms, part, t_ms)

    def arrive(self, index: int, ready_ms: float, group: _Group, now_ms: float) -> None:
        unit = self.decode_units[index]
        self.seq += 1
        bisect.insort(unit.waiting, (ready_ms, self.seq, group))
        unit.waiting_count += group.count
        if unit.idle:
            if ready_ms < unit.wake_ms:
                unit.wake_ms = ready_ms
                unit.version += 1
                self.push(ready_ms, _DECODE_BOUNDARY, index, unit.version)
            return
        if unit.running_count >= self.decode_cap:
            return
        # cut the current run at the first step boundary at or after the arrival
        end_ms = unit.run_start_ms + unit.run_steps * unit.run_step_ms
        if ready_ms >= end_ms:
            return
        steps = max(1, math.ceil((max(ready_ms, now_ms) - unit.run_start_ms) / unit.run_step_ms))
        if steps < unit.run_steps:
            unit.run_steps = steps
            unit.version += 1
            self.push(
                unit.run_start_ms + steps * unit.run_step_ms, _DECODE_BOUNDARY, index, unit.version
            )

    def boundary(self, index: int, t_ms: float) -> None:
        unit = self.decode_units[index]
        totals = self.totals
        if not unit.idle:
            unit.steps_done += unit.run_steps
            unit.busy_ms += unit.run_steps * unit.run_step_ms
        unit.idle = False
        unit.wake_ms = math.inf
        finished = 0
        while unit.running and unit.running[0][0] <= unit.steps_done:
            _, _, group = heapq.heappop(unit.running)
            self.finish(group, t_ms)
            unit.running_count -= group.count
            finished += group.count
        if finished:
            self.resubmit(t_ms, finished)
        admitted: list[_Group] = []
        while unit.waiting and unit.waiting[0][0] <= t_ms and unit.running_count < self.decode_cap:
            room = self.decode_cap - unit.running_count
            _, _, front = unit.waiting[0]
            group = front if front.count <= room else front.split(room)
            if group is front:
                unit.waiting.pop(0)
            unit.waiting_count -= group.count
            unit.running_count += group.count
            totals.decode_wait_ms += group.count * t_ms - group.stage_ms
            admitted.append(group)
        step_ms = self.step_ms(unit.running_count) if unit.running_count else 0.0
        for group in admitted:
            if self.first_token == "admission":
                group.first_ms = group.count * t_ms
            elif self.first_token == "decode_step":
                group.first_ms = group.count * (t_ms + step_ms)
            if self.decode_steps == 0:  # one output token, already out
                self.finish(group, t_ms)
                unit.running_count -= group.count
                self.resubmit(t_ms, group.count)
                continue
            self.seq += 1
            end = unit.steps_done + self.decode_steps
            heapq.heappush(unit.running, (end, self.seq, group))
        if unit.running_count == 0:
            unit.idle = True
            if unit.waiting:
                unit.wake_ms = max(unit.waiting[0][0], t_ms)
                unit.version += 1
                self.push(unit.wake_ms, _DECODE_BOUNDARY, index, unit.version)
            return
        step_ms = self.step_ms(unit.running_count)
        steps = unit.running[0][0] - unit.steps_done
        if unit.waiting and unit.running_count < self.decode_cap:
            next_ms = unit.waiting[0][0]
            steps = min(steps, max(1, math.ceil((next_ms - t_ms) / step_ms)))
        unit.run_start_ms = t_ms
        unit.run_step_ms = step_ms
        unit.run_steps = steps
        unit.version += 1
        self.decode_runs += 1
        self.push(t_ms + steps * step_ms, _DECODE_BOUNDARY, index, unit.version)

    def finish(self, group: _Group, t_ms: float) -> None:
        totals = self.totals
        totals.first_token_ms += group.first_ms
        totals.arrivals_ms += group.arrivals_ms
        totals.finish_ms += group.count * t_ms
        if self.tpot_steps:
            totals.tpot_ms += (group.count * t_ms - group.first_ms) / self.tpot_steps
        totals.finished += group.count
        totals.makespan_ms = max(totals.makespan_ms, t_ms)

    def run(self) -> None:
        arrivals = self.arrivals_ms
        if arrivals is None:
            self.submit(0.0, self.concurrency)
        else:  # requests arriving together travel as one group
            for t_ms, count in _runs(arrivals):
                self.push(t_ms, _ARRIVAL, count)
        units = self.decode_units
        while self.events:
            t_ms, _, kind, index, version = heapq.heappop(self.events)
            if kind == _PREFILL_DONE:
                self.prefill_done(index, t_ms)
            elif kind == _ARRIVAL:
                self.submit(t_ms, index)
            elif version == units[index].version:
                self.boundary(index, t_ms)


def _runs(times_ms: tuple[float, ...]) -> Iterator[tuple[float, int]]:
    """Equal consecutive times as (time, count) pairs."""
    for t_ms, equal in itertools.groupby(times_ms):
        yield t_ms, sum(1 for _ in equal)


def simulate_disagg_serving(
    spec: WorkloadSpec,
    concurrency: int,
    prefill: PrefillPool,
    decode: DecodePool,
    transfer: KvTransfer,
    *,
    num_requests: int | None = None,
    first_token: FirstToken = "decode_step",
) -> DisaggServingResult:
    """Closed-loop serving of ``concurrency`` clients over a prefill pool and a decode pool
    (see the module docstring); ``num_requests`` defaults to 10 per client, all counted."""
    require_int("concurrency", concurrency, 1, MAX_REQUESTS)
    _check_first_token(first_token)
    if num_requests is None:
        num_requests = default_num_requests(concurrency)
    require_int("num_requests", num_requests, concurrency, MAX_REQUESTS)
    sim = _Simulation(spec, concurrency, prefill, decode, transfer, num_requests, first_token)
    sim.run()
    return _result(spec, sim)


def simulate_disagg_poisson(
    spec: WorkloadSpec,
    arrivals_ms: tuple[float, ...],
    prefill: PrefillPool,
    decode: DecodePool,
    transfer: KvTransfer,
    *,
    first_token: FirstToken = "decode_step",
) -> DisaggServingResult:
    """Open-loop serving of requests arriving at ``arrivals_ms`` (non-decreasing, from 0) over
    a prefill pool and a decode pool; every request counts (see the module docstring)."""
    require_int("num_requests", len(arrivals_ms), 1, MAX_REQUESTS)
    if any(
        not (math.isfinite(t) and t >= 0.0) or (i and t < arrivals_ms[i - 1])
        for i, t in enumerate(arrivals_ms)
    ):
        raise InvalidParameterError(
            "arrivals_ms", arrivals_ms[:8], "finite times >= 0 in non-decreasing order"
        )
    _check_first_token(first_token)
    n = len(arrivals_ms)
    sim = _Simulation(spec, n, prefill, decode, transfer, n, first_token, arrivals_ms)
    sim.run()
    return _result(spec, sim)


def _check_first_token(first_token: str) -> None:
    if first_token not in FIRST_TOKEN_RULES:
        raise InvalidParameterError("first_token", first_token, f"one of {FIRST_TOKEN_RULES}")


def _result(spec: WorkloadSpec, sim: _Simulation) -> DisaggServingResult:
    """The finished run's means, utilisations and binding pool."""
    num_requests = sim.num_requests
    t = sim.totals
    n = t.finished
    if n != num_requests:  # pragma: no cover - a broken invariant, not an input error
        raise SimulationError(f"{n} of {num_requests} requests finished")
    makespan = t.makespan_ms
    prefill_util = sum(u.busy_ms for u in sim.prefill_units) / (len(sim.prefill_units) * makespan)
    decode_util = sum(u.busy_ms for u in sim.decode_units) / (len(sim.decode_units) * makespan)
    prefill_queue = t.prefill_queue_ms / n
    decode_wait = t.decode_wait_ms / n
    return DisaggServingResult(
        ttft_ms=spec.reported_ttft_ms((t.first_token_ms - t.arrivals_ms) / n),
        tpot_ms=t.tpot_ms / n,
        e2e_ms=spec.reported_ttft_ms(0.0) + (t.finish_ms - t.arrivals_ms) / n,
        makespan_ms=makespan,
        throughput_tokens_s=n * spec.mean_output_length / makespan * MS_PER_S,
        request_throughput_s=n / makespan * MS_PER_S,
        num_requests=n,
        prefill_queue_ms=prefill_queue,
        transfer_ms=t.transfer_ms / n,
        decode_wait_ms=decode_wait,
        prefill_utilisation=prefill_util,
        decode_utilisation=decode_util,
        binding_pool=binding_pool(prefill_queue, decode_wait, prefill_util, decode_util),
        prefill_jobs=sim.prefill_jobs,
        decode_runs=sim.decode_runs,
        forward_evaluations=len(sim.job_prices) + len(sim.step_prices),
    )
