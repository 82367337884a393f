"""What the engine loop decides and what a replay reports: runs, plans, records, results.

A *run* is ``repeat`` consecutive engine steps that share one scheduling decision; a plan is the
runs of one simulation before any latency is known, plus what is needed to name the forward
shapes they run (:attr:`SimulationPlan.shapes`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar, cast

from app.core.chunking import PrefillChunk
from app.core.cost import AnyShape, ForwardShape, MixedShape, shape_order
from app.core.scheduler import Scheduler
from app.core.spec import WorkloadSpec

_T = TypeVar("_T")

Method = Literal["time_simulation", "closed_form_waves"]
TIME_SIMULATION: Method = "time_simulation"
CLOSED_FORM_WAVES: Method = "closed_form_waves"

MS_PER_S = 1000.0
#: Upper bound on concurrent requests of one replica; keeps a single simulation bounded.
MAX_CONCURRENCY = 1_000_000


def _repeat(run: StepRun) -> int:
    return run.repeat


def per_s(count: float, elapsed_ms: float) -> float:
    """``count`` per second over ``elapsed_ms`` (0 when no time elapsed)."""
    return MS_PER_S * count / elapsed_ms if elapsed_ms > 0 else 0.0


def prefill_shape(p_step: int, query_len: int, seq_len: int) -> ForwardShape:
    """``p_step`` requests computing one chunk of ``query_len`` tokens, ``seq_len`` after it."""
    return ForwardShape(is_decode=False, concurrency=p_step, query_len=query_len, seq_len=seq_len)


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


Record = tuple[int, int, int]
#: A finish record: a :data:`Record` and the decode tokens each of its requests emitted.
FinishRecord = tuple[int, int, int, int]
_R = TypeVar("_R", bound=tuple[int, ...])


@dataclass(frozen=True, slots=True, kw_only=True)
class CycleCopies:
    """A closed loop's skipped cycles (:mod:`app.core.engine.cycles`), kept once.

    The runs ``[start, start + period)`` repeat ``copies`` more times right after themselves
    (the plan's ``runs`` hold every copy: the same objects again). The request records the
    cycle wrote, ``first[first_from:first_to]`` and ``finish[finish_from:finish_to]`` of
    :class:`RequestRecords`, are stored once: copy ``m`` is those records with every run index
    shifted by ``m * period``, and the records stored after them (the drain) come after the
    last copy. :meth:`RequestRecords.all_first` and :meth:`RequestRecords.all_finish` expand
    them; a replay walks them without building the copies.
    """

    start: int
    period: int
    copies: int
    first_from: int
    first_to: int
    finish_from: int
    finish_to: int

    @property
    def end(self) -> int:
        """The first run after the cycle's own runs (where the first copy starts)."""
        return self.start + self.period

    @property
    def resume(self) -> int:
        """The first run after the last copy."""
        return self.start + self.period * (self.copies + 1)

    @property
    def first_span(self) -> tuple[int, int]:
        """The first-token records the cycle wrote (``first[from:to]``)."""
        return self.first_from, self.first_to

    @property
    def finish_span(self) -> tuple[int, int]:
        """The finish records the cycle wrote (``finish[from:to]``)."""
        return self.finish_from, self.finish_to

    def stepped(self, runs: tuple[StepRun, ...]) -> tuple[StepRun, ...]:
        """``runs`` without the copies (each distinct run of the plan is among them)."""
        return runs[: self.end] + runs[self.resume :]

    def segments(
        self, records: Sequence[_R], span: tuple[int, int]
    ) -> Iterator[tuple[Sequence[_R], int]]:
        """Stored ``records`` in the loop's order as ``(records, run offset)`` pieces: those up
        to the cycle's end, its ``span`` once per copy shifted by whole periods, the rest."""
        lo, hi = span
        yield records[:hi], 0
        body = records[lo:hi]
        for m in range(1, self.copies + 1):
            yield body, m * self.period
        yield records[hi:], 0

    def expand(self, records: tuple[_R, ...], span: tuple[int, int]) -> tuple[_R, ...]:
        """Stored ``records`` with the cycle's ``span`` of them copied and shifted in."""
        out: list[_R] = []
        for piece, off in self.segments(records, span):
            for record in piece:
                shifted = (record[0], record[1] + off, record[2] + off, *record[3:])
                out.append(cast(_R, shifted))
        return tuple(out)


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationPlan:
    """The scheduling decisions of one simulation, before any latency is known.

    ``concurrency``: requests at ``t = 0`` (clients of a closed loop; 0 for timed arrivals).
    """

    spec: WorkloadSpec
    concurrency: int
    runs: tuple[StepRun, ...]
    #: Mixed steps are one fused forward (:class:`MixedShape`), not two combined forwards.
    fused_mixed: bool = False
    #: The skipped cycles of a closed loop, whose runs ``runs`` repeats (None: none skipped).
    cycle: CycleCopies | None = None
    #: Figures derived from the runs alone, computed once (a cached plan is replayed often).
    _derived: dict[str, object] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def of_runs(
        cls,
        runs: tuple[StepRun, ...],
        spec: WorkloadSpec,
        concurrency: int,
        scheduler: Scheduler,
        cycle: CycleCopies | None = None,
    ) -> SimulationPlan:
        """The plan of ``runs`` with the scheduler's mixed-step rule, the same for every
        workload."""
        return cls(
            spec=spec,
            concurrency=concurrency,
            runs=runs,
            fused_mixed=scheduler.mixed_latency == "fused",
            cycle=cycle,
        )

    @property
    def stepped_runs(self) -> tuple[StepRun, ...]:
        """The runs without a skipped cycle's copies: every distinct run, fewer times."""
        cycle = self.cycle
        return self.runs if cycle is None else cycle.stepped(self.runs)

    def weighted_runs(self) -> tuple[tuple[tuple[StepRun, ...], int], ...]:
        """Every run as ``(runs, times)`` pieces: the stepped runs once, and a skipped cycle's
        own runs once more per copy (sums over the plan need no copy walked)."""
        cycle = self.cycle
        if cycle is None:
            return ((self.runs, 1),)
        return ((self.stepped_runs, 1), (self.runs[cycle.start : cycle.end], cycle.copies))

    def run_total(self, value: Callable[[StepRun], int]) -> int:
        """``value`` summed over every run, a skipped cycle's copies included."""
        return sum(times * sum(map(value, runs)) for runs, times in self.weighted_runs())

    @property
    def chunk_plan(self) -> tuple[PrefillChunk, ...]:
        return self.spec.get_prefill_chunk_plan()

    @property
    def output_length(self) -> int:
        """The output of every request (a length range's mean: :attr:`WorkloadSpec.
        mean_output_length`)."""
        return self.spec.mean_output_length

    @property
    def max_batched_tokens(self) -> int:
        return self.spec.max_batched_tokens

    def decode_shape(self, d_step: int) -> ForwardShape:
        return self.spec.decode_shape(d_step)

    def mixed_shape(self, p_step: int, query_len: int, seq_len: int, d_step: int) -> MixedShape:
        return MixedShape(
            prefill=prefill_shape(p_step, query_len, seq_len), decode=self.decode_shape(d_step)
        )

    def is_fused(self, run: StepRun) -> bool:
        """Whether ``run``'s steps are fused mixed forwards (one :class:`MixedShape` each)."""
        return self.fused_mixed and run.p_step > 0 and run.d_step > 0

    def derived(self, name: str, compute: Callable[[], _T]) -> _T:
        """``compute()``, a figure of the runs alone, computed once per plan under ``name``."""
        found = self._derived.get(name)
        if found is None:
            found = self._derived[name] = compute()
        return found  # type: ignore[return-value]  # stored by this method under its name

    @property
    def shapes(self) -> tuple[AnyShape, ...]:
        """Every distinct shape the plan needs, sorted (:func:`shape_order`)."""
        return self.derived("shapes", self._shapes)

    def _shapes(self) -> tuple[AnyShape, ...]:
        runs = self.stepped_runs  # the copies repeat these runs
        decode_steps = {run.d_step for run in runs if run.d_step and not self.is_fused(run)}
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
            for run in runs
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
            else prefill_shape(p_step, tokens, seq_len)
            for p_step, tokens, seq_len, d_step in prefill_steps
        )
        return tuple(sorted(shapes, key=shape_order))

    @property
    def steps(self) -> int:
        return self.derived("steps", lambda: self.run_total(_repeat))


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestRecords:
    """When requests arrived, emitted their first token and finished, as run indices.

    A run index ``r`` means "at the end of run ``r``"; ``-1`` means ``t = 0``.
    ``first``: ``(requests, arrival, first_token_run)``;
    ``finish``: ``(requests, first_token_run, finish_run, decode_tokens)`` (each request's
    tokens after its first, its length class's); a closed loop's skipped cycles
    are stored once (``cycle``; :meth:`all_first` and :meth:`all_finish` expand them).

    Without timed arrivals, ``arrival`` is a run index too. With them (``sent_ms`` set), it
    indexes ``sent_ms``, the time each arrival was sent to the engine, and the clock ran while
    planning: run ``r`` started at ``starts_ms[r]`` and ended at ``ends_ms[r]`` (idle gaps
    between runs are possible).
    """

    first: tuple[Record, ...]
    finish: tuple[FinishRecord, ...]
    last_arrival_run: int
    sent_ms: tuple[float, ...] | None = None
    starts_ms: tuple[float, ...] | None = None
    ends_ms: tuple[float, ...] | None = None
    #: Skipped cycles: ``first`` and ``finish`` hold the cycle's records once (None: all).
    cycle: CycleCopies | None = None

    def all_first(self) -> tuple[Record, ...]:
        """Every first-token record, a skipped cycle's copies included, in the loop's order."""
        cycle = self.cycle
        return self.first if cycle is None else cycle.expand(self.first, cycle.first_span)

    def all_finish(self) -> tuple[FinishRecord, ...]:
        """Every finish record, a skipped cycle's copies included, in the loop's order."""
        cycle = self.cycle
        return self.finish if cycle is None else cycle.expand(self.finish, cycle.finish_span)


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
    throughput_tokens_s: float  # output tokens / s
    request_throughput: float  # requests / s
    prefill_num_chunks: int
    steps: int
    forward_evaluations: int
    timeline: tuple[StepRecord, ...] | None = None
