"""Phases 2 and 3 of a simulation: price the plan's shapes, then walk the clock over its runs.

:func:`evaluate_shapes` asks the latency model once per distinct shape (or once in all, through
the batch interface); :func:`run_clock` turns the planned runs into run end times (and the step
timeline when asked); :func:`replay_time_simulation` computes the burst metrics from them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from app.core.cost import (
    AnyShape,
    BatchLatencyModel,
    ForwardShape,
    LatencyModel,
    MixedLatencyModel,
    MixedShape,
    fused_unsupported,
)
from app.core.engine.plan import (
    TIME_SIMULATION,
    SimulationPlan,
    SimulationResult,
    StepRecord,
    StepRun,
    per_s,
    prefill_shape,
)
from app.core.errors import SimulationError
from app.core.scheduler import Scheduler


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


def walk_key(run: StepRun) -> tuple[int, int, int, int, int]:
    """What a prefill walk's duration depends on (with a pure scheduler): its requests, chunk,
    start, steps and the decode batch beside it."""
    return (run.p_step, run.prefill_tokens, run.prefill_start, run.repeat, run.d_step)


class _RunClock:
    """Step latencies of a plan's runs, each looked up once, and the timeline when recorded."""

    def __init__(
        self,
        plan: SimulationPlan,
        latencies: Mapping[AnyShape, float],
        scheduler: Scheduler,
        record_steps: bool,
    ) -> None:
        self.plan = plan
        self.latencies = latencies
        self.scheduler = scheduler
        self.record_steps = record_steps
        self.timeline: list[StepRecord] = []
        self.decode_ms: dict[int, float] = {0: 0.0}
        self.prefill_ms: dict[tuple[int, int, int], float] = {}
        self.mixed_ms: dict[tuple[int, int, int, int], float] = {}
        # Duration of a prefill walk beside a decode batch, when the scheduler is pure.
        self.walk_ms: dict[tuple[int, int, int, int, int], float] = {}

    def advance(self, run: StepRun, t_ms: float) -> float:
        """The time at the end of ``run`` when it starts at ``t_ms``."""
        plan = self.plan
        fused = plan.is_fused(run)
        d_ms = 0.0
        if not fused:
            known = self.decode_ms.get(run.d_step)
            if known is None:
                known = self.decode_ms[run.d_step] = self.latencies[plan.decode_shape(run.d_step)]
            d_ms = known
        if run.p_step:
            return self._walk(run, t_ms, d_ms, fused)
        step_ms = self.scheduler.step_latency(0.0, d_ms)
        if self.record_steps:
            self.timeline.append(
                StepRecord(
                    start_ms=t_ms,
                    step_ms=step_ms,
                    repeat=run.repeat,
                    p_step=0,
                    prefill_shape=None,
                    prefill_ms=0.0,
                    d_step=run.d_step,
                    decode_shape=self._decode_shape(run),
                    decode_ms=d_ms,
                    first_tokens=run.first_tokens,
                    finished=run.finished,
                )
            )
        return t_ms + step_ms * run.repeat

    def decode_run_ms(self, run: StepRun) -> float:
        """What :meth:`advance` adds to the clock for a decode-only ``run`` (whatever its
        start), once it has advanced over one with the same decode batch."""
        return self.scheduler.step_latency(0.0, self.decode_ms[run.d_step]) * run.repeat

    def _decode_shape(self, run: StepRun) -> ForwardShape | None:
        return self.plan.decode_shape(run.d_step) if run.d_step else None

    def _walk(self, run: StepRun, t_ms: float, d_ms: float, fused: bool) -> float:
        """A prefill walk: ``run.repeat`` steps, each one chunk further."""
        walk = walk_key(run)
        if not self.record_steps and self.scheduler.stateless and walk in self.walk_ms:
            return t_ms + self.walk_ms[walk]
        # The walk's duration is summed on its own and added once, so a walk taken from
        # ``walk_ms`` (no timeline) ends at exactly the same time as one walked step by step
        # (a timeline): ``t + (a + b)`` is not always ``(t + a) + b`` in floating point.
        walk_ms = 0.0
        for i in range(run.repeat):
            key = (run.p_step, run.prefill_tokens, run.prefill_seq_len(i))
            step_d_ms = d_ms
            if fused:
                step_ms = self._mixed(key, run.d_step)
                p_ms = step_d_ms = step_ms
            else:
                p_ms = self.prefill_ms.get(key, -1.0)
                if p_ms < 0.0:
                    p_ms = self.prefill_ms[key] = self.latencies[prefill_shape(*key)]
                step_ms = self.scheduler.step_latency(p_ms, d_ms)
            if self.record_steps:
                last = i == run.repeat - 1
                self.timeline.append(
                    StepRecord(
                        start_ms=t_ms + walk_ms,
                        step_ms=step_ms,
                        repeat=1,
                        p_step=run.p_step,
                        prefill_shape=prefill_shape(*key),
                        prefill_ms=p_ms,
                        d_step=run.d_step,
                        decode_shape=self._decode_shape(run),
                        decode_ms=step_d_ms,
                        first_tokens=run.first_tokens if last else 0,
                        finished=run.finished if last else 0,
                        fused=fused,
                    )
                )
            walk_ms += step_ms
        self.walk_ms[walk] = walk_ms
        return t_ms + walk_ms

    def _mixed(self, key: tuple[int, int, int], d_step: int) -> float:
        mixed_key = (*key, d_step)
        step_ms = self.mixed_ms.get(mixed_key, -1.0)
        if step_ms < 0.0:
            shape = self.plan.mixed_shape(*key, d_step)
            step_ms = self.mixed_ms[mixed_key] = self.latencies[shape]
        return step_ms


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
    clock = _RunClock(plan, latencies, scheduler, record_steps)
    ends: list[float] = []
    # Without a timeline, a run whose increment is known is added the way advance adds it: a
    # decode-only run by its batch and steps, a pure scheduler's walk by its walk_key (a closed
    # loop's skipped cycles repeat the same runs over and over).
    decode_runs: dict[tuple[int, int], float] = {}
    walks = clock.walk_ms if scheduler.stateless else None
    runs = plan.runs

    def advance_over(first: int, stop: int, t_ms: float) -> float:
        for index in range(first, stop):
            run = runs[index]
            if starts_ms is not None:
                t_ms = starts_ms[index]
            known = None
            if not record_steps:
                if not run.p_step:
                    known = decode_runs.get((run.d_step, run.repeat))
                elif walks is not None:
                    known = walks.get(walk_key(run))
            if known is not None:
                t_ms += known
            else:
                t_ms = clock.advance(run, t_ms)
                if not record_steps and not run.p_step:
                    decode_runs[(run.d_step, run.repeat)] = clock.decode_run_ms(run)
            ends.append(t_ms)
        return t_ms

    cycle = plan.cycle
    if cycle is None or record_steps or starts_ms is not None or walks is None:
        advance_over(0, len(runs), 0.0)
    else:
        # A skipped cycle's copies: once its own runs are priced, every copy adds the known
        # increments of those runs again, in order (what the loop above would add).
        t_ms = advance_over(0, cycle.end, 0.0)
        increments = [
            walks[walk_key(run)] if run.p_step else decode_runs[(run.d_step, run.repeat)]
            for run in runs[cycle.start : cycle.end]
        ]
        for _ in range(cycle.copies):
            for increment in increments:
                t_ms += increment
                ends.append(t_ms)
        advance_over(cycle.resume, len(runs), t_ms)
    return ends, tuple(clock.timeline) if record_steps else None


def replay_time_simulation(
    plan: SimulationPlan,
    latencies: Mapping[AnyShape, float],
    scheduler: Scheduler,
    *,
    record_steps: bool = False,
) -> SimulationResult:
    """Phase 3 of a burst: advance the clock over the planned runs and compute the metrics."""
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
        throughput_tokens_s=per_s(n * plan.output_length, makespan_ms),
        request_throughput=per_s(n, makespan_ms),
        prefill_num_chunks=len(plan.chunk_plan),
        steps=plan.steps,
        forward_evaluations=len(latencies),
        timeline=timeline,
    )
