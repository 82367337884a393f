"""The Poisson workload: ``benchmark_serving --request-rate R [--max-concurrency C]``.

Requests arrive as a Poisson process (the first at ``t = 0``, exponential gaps of mean
``1 / R``, drawn from a seeded generator), optionally at most ``C`` in flight (an arrival that
finds every slot taken waits on the client side, and its TTFT counts from when it is sent).
Arrival times do not follow from scheduling decisions, so the engine loop keeps the clock while
it plans (:class:`~app.core.engine.TimedArrivals`) and prices each step as it goes
(:class:`StepPrices`); every request counts (the ``benchmark`` window).
"""

from __future__ import annotations

import math
import random
from collections import Counter

from app.core.chunking import require_int
from app.core.cost import AnyShape, LatencyModel, MixedShape, interrupt_of
from app.core.engine import MS_PER_S, TimedArrivals, evaluate_shapes, prefill_shape, run_engine
from app.core.errors import InvalidParameterError
from app.core.parallel import split_over_replicas
from app.core.scheduler import Scheduler, default_scheduler
from app.core.spec import WorkloadSpec
from app.core.workload.admission import running_cap
from app.core.workload.closed_loop import MAX_DP
from app.core.workload.metrics import (
    MAX_REQUESTS,
    ServingPlan,
    ServingResult,
    combine_serving,
    replay_serving,
)

#: Requests of a Poisson run when ``num_requests`` is not given (benchmark_serving's
#: ``--num-prompts`` default).
DEFAULT_POISSON_REQUESTS = 1000
DEFAULT_POISSON_SEED = 0
MAX_SEED = 2**32 - 1
#: Decode batch sizes priced together around one the clock needs (one cache round trip).
DECODE_PRICE_WINDOW = 32


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
        self, spec: WorkloadSpec, latency: LatencyModel, scheduler: Scheduler, *, max_decode: int
    ) -> None:
        self._spec = spec
        self._latency = latency
        self._scheduler = scheduler
        self._chunk_plan = spec.get_prefill_chunk_plan()
        self._chunks = {(c.query_len, c.seq_len): c.index for c in self._chunk_plan}
        self._max_decode = max_decode
        self._fused = scheduler.mixed_latency == "fused"
        self.latencies: dict[AnyShape, float] = {}

    def _wanted(self, shape: AnyShape) -> list[AnyShape]:
        """``shape`` and the shapes likely next that are not priced yet."""
        wanted = [shape]
        if isinstance(shape, MixedShape):
            pass  # asked alone: the decode batch beside a chunk varies too much to guess
        elif shape.is_decode:
            low = max(1, shape.concurrency - DECODE_PRICE_WINDOW)
            high = min(self._max_decode, shape.concurrency + DECODE_PRICE_WINDOW)
            near = (self._spec.decode_shape(d) for d in range(low, high + 1))
            wanted.extend(s for s in near if s != shape and s not in self.latencies)
        else:
            index = self._chunks.get((shape.query_len, shape.seq_len))
            if index is not None:
                later = self._chunk_plan[index + 1 :]
                walk = (prefill_shape(shape.concurrency, c.query_len, c.seq_len) for c in later)
                wanted.extend(s for s in walk if s not in self.latencies)
        return wanted

    def _price(self, shape: AnyShape) -> float:
        found = self.latencies.get(shape)
        if found is not None:
            return found
        self.latencies.update(evaluate_shapes(self._wanted(shape), self._latency))
        return self.latencies[shape]

    def __call__(
        self, p_step: int, prefill_tokens: int, prefill_seq_len: int, d_step: int
    ) -> float:
        prefill = prefill_shape(p_step, prefill_tokens, prefill_seq_len)
        if self._fused and p_step and d_step:
            return self._price(MixedShape(prefill=prefill, decode=self._spec.decode_shape(d_step)))
        prefill_ms = self._price(prefill) if p_step else 0.0
        decode_ms = self._price(self._spec.decode_shape(d_step)) if d_step else 0.0
        return self._scheduler.step_latency(prefill_ms, decode_ms)


def plan_poisson(
    spec: WorkloadSpec,
    request_rate: float,
    latency: LatencyModel,
    scheduler: Scheduler | None = None,
    *,
    num_requests: int = DEFAULT_POISSON_REQUESTS,
    seed: int = DEFAULT_POISSON_SEED,
    max_concurrency: int | None = None,
    max_running: int | None = None,
) -> tuple[ServingPlan, dict[AnyShape, float]]:
    """One replica's Poisson run planned with its clock; returns the plan and the latencies
    of every shape it priced (what :func:`~app.core.workload.replay_serving` needs)."""
    times_ms = poisson_arrivals_ms(request_rate, num_requests, seed)
    for name, cap in (("max_concurrency", max_concurrency), ("max_running", max_running)):
        if cap is not None:
            require_int(name, cap, 1, MAX_REQUESTS)
    scheduler = scheduler or default_scheduler()
    caps = [c for c in (max_concurrency, max_running) if c is not None]
    prices = StepPrices(spec, latency, scheduler, max_decode=min([num_requests, *caps]))
    arrivals = TimedArrivals(times_ms=times_ms, max_in_flight=max_concurrency, step_ms=prices)
    # No clients: requests arrive on their own.
    engine, records = run_engine(
        spec, 0, scheduler, arrivals, max_running=max_running, interrupt=interrupt_of(latency)
    )
    serving = ServingPlan(
        engine=engine,
        records=records,
        clients=0,
        num_requests=num_requests,
        window="benchmark",
        max_running=max_running,
        workload="poisson",
    )
    return serving, prices.latencies


def simulate_poisson(
    spec: WorkloadSpec,
    request_rate: float,
    latency: LatencyModel,
    scheduler: Scheduler | None = None,
    *,
    num_requests: int = DEFAULT_POISSON_REQUESTS,
    seed: int = DEFAULT_POISSON_SEED,
    max_concurrency: int | None = None,
    max_running: int | None = None,
    record_steps: bool = False,
    token_gaps: bool = False,
) -> ServingResult:
    """Poisson arrivals at ``request_rate`` req/s on one replica; every request counts
    (``token_gaps``: with the gaps between tokens)."""
    scheduler = scheduler or default_scheduler()
    plan, latencies = plan_poisson(
        spec,
        request_rate,
        latency,
        scheduler,
        num_requests=num_requests,
        seed=seed,
        max_concurrency=max_concurrency,
        max_running=max_running,
    )
    return replay_serving(
        plan, latencies, scheduler, record_steps=record_steps, token_gaps=token_gaps
    )


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
    require_int("dp", dp, 1, MAX_DP)
    require_int("num_requests", num_requests, 1, MAX_REQUESTS)
    requests = _per_replica(num_requests, dp, "num_requests")
    caps: list[int | None] = [None] * dp
    if max_concurrency is not None:
        require_int("max_concurrency", max_concurrency, 1, MAX_REQUESTS)
        caps = list(_per_replica(max_concurrency, dp, "max_concurrency"))
    shares = Counter(zip(requests, caps, strict=True))
    return [(n, cap, replicas) for (n, cap), replicas in shares.items()]


def simulate_poisson_serving(
    spec: WorkloadSpec,
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
    token_gaps: bool = False,
) -> ServingResult:
    """Poisson arrivals at ``request_rate`` req/s in total over ``dp`` replicas (``token_gaps``:
    with the gaps between tokens, :attr:`ServingResult.itl_distribution_ms`).

    A load balancer that routes each request to a random replica thins one Poisson stream into
    ``dp`` independent streams of ``request_rate / dp``; the replicas are alike, so each
    distinct share (``num_requests`` and ``max_concurrency`` split as evenly as integers allow)
    is simulated once, with the same seed. KV admission and ``max_num_seqs`` cap running
    requests as in :func:`~app.core.workload.simulate_serving`. Throughputs add, latencies are
    request-weighted.
    """
    rate = check_request_rate(request_rate)
    shares = poisson_shares(num_requests, dp, max_concurrency)
    scheduler = scheduler or default_scheduler()
    max_running = running_cap(spec, latency, scheduler, max_num_seqs)
    parts: list[tuple[ServingResult, int]] = []
    for replica_requests, cap, replicas in shares:
        result = simulate_poisson(
            spec,
            rate / dp,
            latency,
            scheduler,
            num_requests=replica_requests,
            seed=seed,
            max_concurrency=cap,
            max_running=max_running,
            record_steps=record_steps and not parts,
            token_gaps=token_gaps,
        )
        parts.append((result, replicas))
    return combine_serving(parts, 0)
