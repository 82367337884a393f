"""What a serving run measures: its plan, its result, and the replay that computes one.

A serving run (closed loop or Poisson) is one engine run (:class:`ServingPlan`); its replay
walks the clock (or reads the clock kept while planning), picks the measurement window
(:mod:`app.core.workload.windows`) and reports means over the requests measured in it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from app.core.cost import AnyShape
from app.core.engine import (
    RequestRecords,
    SimulationPlan,
    StepRecord,
    StepRun,
    per_s,
    replica_total,
    run_clock,
    weighted_mean,
)
from app.core.errors import InvalidParameterError
from app.core.scheduler import Scheduler, default_scheduler
from app.core.workload.windows import Window, measured_records

Workload = Literal["burst", "closed_loop", "poisson"]
#: Request records in the loop's order as ``(records, run offset)`` pieces
#: (:meth:`~app.core.engine.plan.CycleCopies.segments`).
Pieces = Iterable[tuple[Sequence[tuple[int, ...]], int]]
WORKLOADS: tuple[Workload, ...] = ("burst", "closed_loop", "poisson")
#: The workload a request gets when it names none: the RFC's burst.
DEFAULT_WORKLOAD: Workload = "burst"
CLOSED_LOOP_SIMULATION = "closed_loop_simulation"
POISSON_SIMULATION = "poisson_simulation"
#: Largest accepted request count (and client count, running cap) of one serving run.
MAX_REQUESTS = 10_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingPlan:
    """The scheduling decisions of one closed-loop or Poisson run, before any latency is known.

    ``clients == 0``: nobody re-sends (Poisson arrivals).
    """

    engine: SimulationPlan
    records: RequestRecords
    clients: int
    num_requests: int
    window: Window
    max_running: int | None
    workload: Workload = "closed_loop"

    @property
    def input_length(self) -> int:
        """The prompt every request prefills (a length range's mean)."""
        return self.engine.spec.mean_input_length

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
    throughput_tokens_s: float  # output tokens / s
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
    #: Every measured request's TTFT and TPOT as ``(value_ms, requests)`` groups, ascending
    #: (the requests of a group share their runs): the percentiles' source.
    ttft_distribution_ms: tuple[tuple[float, int], ...] = ()
    tpot_distribution_ms: tuple[tuple[float, int], ...] = ()
    #: Every gap between two consecutive tokens of a request, over the steps that end in the
    #: window, as ``(gap_ms, gaps)`` groups, ascending (:func:`_token_gaps`; empty unless the
    #: simulation was asked for them, ``token_gaps``).
    itl_distribution_ms: tuple[tuple[float, int], ...] = ()

    def ttft_percentile_ms(self, q: float) -> float:
        return weighted_percentile(self.ttft_distribution_ms, q)

    def tpot_percentile_ms(self, q: float) -> float:
        return weighted_percentile(self.tpot_distribution_ms, q)

    def itl_percentile_ms(self, q: float) -> float:
        """The ``q``-th percentile of the gaps between tokens (a benchmark client's ITL with
        one token per streamed chunk)."""
        return weighted_percentile(self.itl_distribution_ms, q)


def weighted_percentile(distribution: Sequence[tuple[float, int]], q: float) -> float:
    """The ``q``-th percentile (0 < q < 100) of grouped values: the smallest value with at
    least ``q`` % of the requests at or below it (nearest rank)."""
    if not 0 < q < 100:
        raise InvalidParameterError("percentile", q, "a number in (0, 100)")
    total = sum(count for _, count in distribution)
    if total == 0:
        return 0.0
    rank = q / 100 * total
    seen = 0
    for value, count in distribution:
        seen += count
        if seen >= rank:
            return value
    return distribution[-1][0]


def _distribution(groups: Iterable[tuple[float, int]]) -> tuple[tuple[float, int], ...]:
    merged: dict[float, int] = {}
    for value, count in groups:
        merged[value] = merged.get(value, 0) + count
    return tuple(sorted(merged.items()))


def _run_ends(
    plan: ServingPlan,
    latencies: Mapping[AnyShape, float],
    scheduler: Scheduler,
    record_steps: bool,
) -> tuple[list[float], tuple[StepRecord, ...] | None]:
    """When every run ended, and the timeline when asked for."""
    records = plan.records
    if records.ends_ms is not None and records.sent_ms is not None:
        # Timed arrivals: the clock ran while planning (idle gaps included).
        timeline = None
        if record_steps:
            starts_ms = records.starts_ms
            timeline = run_clock(
                plan.engine, latencies, scheduler, record_steps=True, starts_ms=starts_ms
            )[1]
        return list(records.ends_ms), timeline
    return run_clock(plan.engine, latencies, scheduler, record_steps=record_steps)


@dataclass(slots=True)
class _WindowTotals:
    """Tokens, steps and completions of the runs that end inside the window."""

    steps: int = 0
    prefill_tokens: int = 0
    decode_step_tokens: int = 0
    batch: int = 0
    output_tokens: int = 0
    input_tokens: int = 0
    completed: int = 0

    @classmethod
    def over(
        cls, plan: ServingPlan, ends: Sequence[float], start_ms: float, end_ms: float
    ) -> _WindowTotals:
        runs = plan.engine.runs
        if ends and start_ms < ends[0] and ends[-1] <= end_ms:
            # Every run ends inside (the benchmark window): the plan's totals, summed once.
            whole = plan.engine.derived("window_totals", lambda: cls._whole(plan))
            return cls(*whole)
        inside = [run for run, t_ms in zip(runs, ends, strict=True) if start_ms < t_ms <= end_ms]
        return cls._sum(inside, plan.input_length)

    @classmethod
    def _whole(cls, plan: ServingPlan) -> tuple[int, ...]:
        """The totals of every run: a skipped cycle's copies are its runs' totals again."""
        whole = [0] * len(dataclasses.fields(cls))
        for runs, times in plan.engine.weighted_runs():
            part = dataclasses.astuple(cls._sum(runs, plan.input_length))
            whole = [w + times * p for w, p in zip(whole, part, strict=True)]
        return tuple(whole)

    @classmethod
    def _sum(cls, runs: Iterable[StepRun], input_length: int) -> _WindowTotals:
        totals = cls()
        for run in runs:
            totals.steps += run.repeat
            totals.prefill_tokens += run.p_step * run.prefill_tokens * run.repeat
            totals.decode_step_tokens += run.d_step * run.repeat
            totals.batch += (run.p_step + run.d_step) * run.repeat
            totals.output_tokens += run.first_tokens + run.d_step * run.repeat
            totals.input_tokens += run.first_tokens * input_length
            totals.completed += run.finished
        return totals

    def per_step(self, count: int) -> float:
        return count / self.steps if self.steps else 0.0


def _spans(
    pieces: Pieces,
    at: Sequence[float],
    since: Sequence[float],
) -> tuple[list[int], list[float]]:
    """Each record's requests and its span ``at[to] - since[from]``, over ``(records, run
    offset)`` pieces in the loop's order (:meth:`CycleCopies.segments`: a skipped cycle's
    copies walked without being written out)."""
    counts: list[int] = []
    values: list[float] = []
    for records, off in pieces:
        counts.extend([r[0] for r in records])
        values.extend([at[r[2] + off] - since[r[1] + off] for r in records])
    return counts, values


def _token_gaps(
    plan: ServingPlan, ends: Sequence[float], start_ms: float, end_ms: float
) -> tuple[tuple[float, int], ...]:
    """The gaps between consecutive tokens of the requests, grouped: every step's decode
    requests each emit one token at the step's end, one step after their previous one, so each
    of a step's ``d_step`` decode tokens follows a gap of that step's duration (a step that
    also prefills stalls them for longer: the tail of the gaps). A run's steps share its mean
    duration (a decode run's are equal; a prefill run walks one request group's chunks).
    Steps that end inside the window count (runs that idle do not decode: a gap never spans
    an idle time)."""
    starts = plan.records.starts_ms
    groups: list[tuple[float, int]] = []
    previous_ms = 0.0
    for index, (run, run_end_ms) in enumerate(zip(plan.engine.runs, ends, strict=True)):
        run_start_ms = previous_ms if starts is None else starts[index]
        previous_ms = run_end_ms
        if run.d_step and start_ms < run_end_ms <= end_ms:
            groups.append(((run_end_ms - run_start_ms) / run.repeat, run.d_step * run.repeat))
    return _distribution(groups)


def _busy_arrivals(runs: Sequence[StepRun], first: Sequence[tuple[int, ...]]) -> set[int]:
    """The runs at whose end the engine still had work besides the requests sent then: a
    decode in the next run, or an earlier request not yet at its first token (``first``:
    every first-token record, copies expanded)."""
    busy = {run for run in range(len(runs) - 1) if runs[run + 1].d_step}
    latest = -1  # the latest first token of the requests that arrived before ``arrival``
    by_arrival: dict[int, int] = {}
    for _count, arrival, first_run in first:
        by_arrival[arrival] = max(by_arrival.get(arrival, -1), first_run)
    for arrival in sorted(by_arrival):
        if arrival >= 0 and latest > arrival:
            busy.add(arrival)
        latest = max(latest, by_arrival[arrival])
    return busy


def _resubmit_waits(
    pieces: Pieces,
    plan: ServingPlan,
    ends: Sequence[float],
    steps: int,
) -> list[float]:
    """Each first-token record's wait before the scheduler saw it, over the pieces
    :func:`_spans` walks. A closed loop's re-submission is sent when its predecessor finished
    at the end of run ``a`` (its TTFT counts from there), but an engine with other work went
    on without it: it reaches the scheduler ``steps`` steps later (the step that started
    without it and, under async or overlap scheduling, the one formed while that step ran:
    :attr:`~app.core.spec.WorkloadSpec.resubmit_steps`). Those steps last the run's mean step
    (the engine never idles in a closed loop while it has work), added here rather than
    replayed step by step: a replay that holds the requests back puts lock-step waves of
    clients behind each other's prefills. An engine with nothing else to do (:func:`
    _busy_arrivals`) takes the request at once; the requests present at ``t = 0`` never wait.
    """
    engine = plan.engine
    runs = engine.runs
    # Figures of the plan alone: computed once per plan, whatever the latencies replayed.
    total_steps = engine.derived("total_steps", lambda: sum(run.repeat for run in runs))
    busy = engine.derived("busy_arrivals", lambda: _busy_arrivals(runs, plan.records.all_first()))
    wait_ms = steps * ends[-1] / total_steps
    return [
        wait_ms if record[1] + off in busy else 0.0 for records, off in pieces for record in records
    ]


def _decode_tokens(pieces: Pieces) -> list[int]:
    """Each finish record's decode tokens per request, over the pieces :func:`_spans` walks."""
    return [r[3] for records, _ in pieces for r in records]


def replay_serving(
    plan: ServingPlan,
    latencies: Mapping[AnyShape, float],
    scheduler: Scheduler | None = None,
    *,
    record_steps: bool = False,
    token_gaps: bool = False,
) -> ServingResult:
    """The metrics of a planned serving run from the latencies of its shapes (``token_gaps``:
    with the gaps between tokens, :attr:`ServingResult.itl_distribution_ms`, a pass over every
    run that only the inter-token-latency replays read)."""
    scheduler = scheduler or default_scheduler()
    ends, timeline = _run_ends(plan, latencies, scheduler, record_steps)
    # The end of every run, and of run -1 (t = 0) at index -1.
    at = [*ends, 0.0]
    sent_ms = plan.records.sent_ms
    arrived = at if sent_ms is None else sent_ms
    start_ms, end_ms, first, finish, cycle = measured_records(
        plan.records,
        plan.engine.runs,
        ends,
        window=plan.window,
        clients=plan.clients,
        num_requests=plan.num_requests,
    )
    spec = plan.engine.spec

    def first_pieces() -> Pieces:
        return [(first, 0)] if cycle is None else cycle.segments(first, cycle.first_span)

    def finish_pieces() -> Pieces:
        return [(finish, 0)] if cycle is None else cycle.segments(finish, cycle.finish_span)

    counts_first, ttfts = _spans(first_pieces(), at, arrived)
    counts_finish, decodes = _spans(finish_pieces(), at, at)
    # The scheduling points a re-submission misses beyond the one a client's turnaround makes
    # it wait for in the loop (:class:`~app.core.engine.arrivals.ClosedLoop`).
    added_steps = spec.resubmit_steps - (1 if spec.client_turnaround else 0)
    if added_steps > 0 and sent_ms is None:
        waits = _resubmit_waits(first_pieces(), plan, ends, added_steps)
        ttfts = [v + w for v, w in zip(ttfts, waits, strict=True)]
    measured_first = sum(counts_first)
    measured_finish = sum(counts_finish)
    ttft_ms = sum([c * v for c, v in zip(counts_first, ttfts, strict=True)]) / measured_first
    decode_ms = sum([c * v for c, v in zip(counts_finish, decodes, strict=True)]) / measured_finish
    if len(spec.output_classes) == 1:
        decode_tokens = spec.output_length - 1
        tpot_ms = decode_ms / decode_tokens if decode_tokens else 0.0
        tpots = [v / decode_tokens if decode_tokens else 0.0 for v in decodes]
    else:
        # A length range: each request's decode time over its own class's tokens.
        tokens = _decode_tokens(finish_pieces())
        tpots = [v / t if t else 0.0 for v, t in zip(decodes, tokens, strict=True)]
        tpot_ms = sum([c * v for c, v in zip(counts_finish, tpots, strict=True)]) / measured_finish
    # A streaming client's view: its first chunk may wait for more tokens (the mean TPOT's
    # worth of each; the steps it waited leave its TPOT).
    client_ttft_ms, client_tpot_ms = spec.client_view(ttft_ms, tpot_ms)
    shift_ms = client_ttft_ms - ttft_ms
    scale = client_tpot_ms / tpot_ms if tpot_ms else 1.0
    ttft_ms, tpot_ms = client_ttft_ms, client_tpot_ms

    ttft_groups = _distribution((v + shift_ms, c) for v, c in zip(ttfts, counts_first, strict=True))
    tpot_groups = _distribution((v * scale, c) for v, c in zip(tpots, counts_finish, strict=True))
    duration_ms = end_ms - start_ms
    totals = _WindowTotals.over(plan, ends, start_ms, end_ms)
    return ServingResult(
        method=POISSON_SIMULATION if plan.workload == "poisson" else CLOSED_LOOP_SIMULATION,
        workload=plan.workload,
        window=plan.window,
        clients=plan.clients,
        num_requests=plan.num_requests,
        measured_requests=measured_first,
        ttft_ms=ttft_ms,
        tpot_ms=tpot_ms,
        e2e_ms=ttft_ms - shift_ms + decode_ms,
        throughput_tokens_s=per_s(totals.output_tokens, duration_ms),
        total_throughput=per_s(totals.output_tokens + totals.input_tokens, duration_ms),
        request_throughput=per_s(totals.completed, duration_ms),
        mean_running_batch=totals.per_step(totals.batch),
        mean_prefill_tokens_per_step=totals.per_step(totals.prefill_tokens),
        mean_decode_tokens_per_step=totals.per_step(totals.decode_step_tokens),
        duration_ms=duration_ms,
        max_running=plan.max_running,
        prefill_num_chunks=plan.engine.spec.prefill_num_chunks,
        steps=plan.engine.steps,
        forward_evaluations=len(latencies),
        timeline=timeline,
        ttft_distribution_ms=ttft_groups,
        tpot_distribution_ms=tpot_groups,
        itl_distribution_ms=_token_gaps(plan, ends, start_ms, end_ms) if token_gaps else (),
    )


def combine_serving(parts: Sequence[tuple[ServingResult, int]], clients: int) -> ServingResult:
    """Replicas as one result (:mod:`app.core.engine.replicas`): throughputs add, latencies
    are means weighted by measured requests, per-step figures by steps."""
    first = parts[0][0]
    if len(parts) == 1 and parts[0][1] == 1:
        return first
    return ServingResult(
        method=first.method,
        workload=first.workload,
        window=first.window,
        clients=clients,
        num_requests=sum(r.num_requests * n for r, n in parts),
        measured_requests=sum(r.measured_requests * n for r, n in parts),
        ttft_ms=weighted_mean(parts, "ttft_ms", "measured_requests"),
        tpot_ms=weighted_mean(parts, "tpot_ms", "measured_requests"),
        e2e_ms=weighted_mean(parts, "e2e_ms", "measured_requests"),
        throughput_tokens_s=replica_total(parts, "throughput_tokens_s"),
        total_throughput=replica_total(parts, "total_throughput"),
        request_throughput=replica_total(parts, "request_throughput"),
        mean_running_batch=weighted_mean(parts, "mean_running_batch", "steps"),
        mean_prefill_tokens_per_step=weighted_mean(parts, "mean_prefill_tokens_per_step", "steps"),
        mean_decode_tokens_per_step=weighted_mean(parts, "mean_decode_tokens_per_step", "steps"),
        duration_ms=max(r.duration_ms for r, _ in parts),
        max_running=first.max_running,
        prefill_num_chunks=first.prefill_num_chunks,
        steps=sum(r.steps * n for r, n in parts),
        forward_evaluations=sum(r.forward_evaluations for r, _ in parts),
        timeline=first.timeline,
        ttft_distribution_ms=_distribution(
            (v, c * n) for r, n in parts for v, c in r.ttft_distribution_ms
        ),
        tpot_distribution_ms=_distribution(
            (v, c * n) for r, n in parts for v, c in r.tpot_distribution_ms
        ),
        itl_distribution_ms=_distribution(
            (v, c * n) for r, n in parts for v, c in r.itl_distribution_ms
        ),
    )
