"""A closed loop's repeating cycles are skipped exactly: the plan is the loop's, step by step."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.engine import ClosedLoop
from app.core.engine.arrivals import Burst
from app.core.engine.clock import _RunClock, evaluate_shapes, run_clock
from app.core.engine.loop import Engine
from app.core.engine.plan import RequestRecords, SimulationPlan, StepRun
from app.core.errors import InvalidParameterError
from app.core.scheduler import make_scheduler
from app.core.scheduler.factory import SCHEDULERS
from app.core.spec import length_classes
from app.core.workload.metrics import ServingPlan, ServingResult, replay_serving
from app.core.workload.windows import Window

from .fakes import LinearLatency, spec

cases = st.fixed_dictionaries(
    {
        "effective": st.integers(1, 300),
        "budget": st.integers(1, 256),
        "output": st.integers(1, 60),
        "clients": st.integers(1, 40),
        "per_client": st.integers(3, 12),
        "cap": st.one_of(st.none(), st.integers(1, 40)),
        "scheduler": st.sampled_from(sorted(SCHEDULERS)),
        "spread": st.sampled_from((0.0, 0.0, 0.125, 0.25, 0.4, 0.5)),
        "turnaround": st.booleans(),
        "recv": st.sampled_from((1, 1, 2, 3, 10)),
        # A length range's output classes (1: fixed lengths).
        "ratio": st.sampled_from((1.0, 1.0, 0.8, 0.3)),
    }
)


def _expanded(records: RequestRecords) -> tuple[object, ...]:
    """The records with a skipped cycle's copies written out (what the loop recorded)."""
    return (
        records.all_first(),
        records.all_finish(),
        records.last_arrival_run,
        records.sent_ms,
        records.starts_ms,
        records.ends_ms,
    )


def _run(s: dict[str, Any], *, skip: bool) -> tuple[Engine, tuple[StepRun, ...], RequestRecords]:
    data = spec(s["effective"], s["budget"], s["output"])
    arrivals = ClosedLoop(
        s["clients"],
        s["clients"] * s["per_client"],
        s.get("spread", 0.0),
        turnaround=s.get("turnaround", False),
    )
    engine = Engine(
        data.get_prefill_chunk_plan(),
        data.output_length,
        data.max_batched_tokens,
        make_scheduler(s["scheduler"]),
        arrivals,
        max_running=s["cap"],
        recv_interval=s.get("recv", 1),
        output_classes=length_classes(s["output"], s.get("ratio", 1.0)),
    )
    if not skip:
        engine.cycles = None
    runs, records = engine.run()
    return engine, runs, records


@settings(max_examples=300, deadline=None)
@given(cases)
def test_skipping_cycles_gives_the_step_by_step_plan(s: dict[str, Any]) -> None:
    _, runs, records = _run(s, skip=True)
    _, want_runs, want_records = _run(s, skip=False)
    assert runs == want_runs
    assert want_records.cycle is None
    assert _expanded(records) == _expanded(want_records)
    cycle = records.cycle
    if cycle is not None:
        # The copies are stored once: the records hold the cycle's own, the runs every copy.
        assert len(records.first) < len(want_records.first)
        assert (
            runs[cycle.start : cycle.end] * (cycle.copies + 1) == (runs[cycle.start : cycle.resume])
        )


@settings(max_examples=150, deadline=None)
@given(cases)
def test_the_clock_over_skipped_cycles_is_the_step_by_step_clock(s: dict[str, Any]) -> None:
    """The skipped cycles repeat the same runs, whose increments the clock reuses (a decode
    run's by its batch and steps, a pure scheduler's walk by its walk key; a copy of a skipped
    cycle adds the cycle's increments again): every run end equals advancing over every run
    one by one, to the last bit."""
    data = spec(s["effective"], s["budget"], s["output"])
    scheduler = make_scheduler(s["scheduler"])
    _, runs, records = _run(s, skip=True)
    plan = SimulationPlan.of_runs(runs, data, s["clients"], scheduler, cycle=records.cycle)
    latencies = evaluate_shapes(plan.shapes, LinearLatency(per_context_ms=0.00037))
    reference = _RunClock(plan, latencies, scheduler, record_steps=False)
    t_ms, want = 0.0, []
    for run in runs:
        t_ms = reference.advance(run, t_ms)
        want.append(t_ms)
    assert run_clock(plan, latencies, scheduler)[0] == want


#: The default search's shape: prompts of one chunk, long outputs, ten rounds.
LONG_LOOP: dict[str, Any] = {
    "effective": 4096,
    "budget": 8192,
    "output": 256,
    "clients": 64,
    "per_client": 10,
    "cap": None,
    "scheduler": "vllm",
}


def test_a_long_closed_loop_skips_most_of_its_rounds() -> None:
    """The loop steps through about three rounds and skips the rest."""
    s = LONG_LOOP
    engine, runs, records = _run(s, skip=True)
    assert engine.cycles is not None and engine.cycles.skipped
    stepped, want_runs, want_records = _run(s, skip=False)
    assert (runs, _expanded(records)) == (want_runs, _expanded(want_records))
    assert records.cycle is not None and records.cycle.copies >= 5
    assert engine.arrivals.submitted == stepped.arrivals.submitted == 640
    assert engine.arrivals.last_arrival_run == stepped.arrivals.last_arrival_run


def test_a_loop_with_client_turnaround_skips_its_rounds_too() -> None:
    """Re-submissions held for a step are part of the state (their ages): the loop still
    repeats, and skipping its cycles gives the step-by-step plan."""
    s = {**LONG_LOOP, "turnaround": True}
    engine, runs, records = _run(s, skip=True)
    assert engine.cycles is not None and engine.cycles.skipped and records.cycle is not None
    _, want_runs, want_records = _run(s, skip=False)
    assert (runs, _expanded(records)) == (want_runs, _expanded(want_records))


def test_a_length_range_repeats_in_cycles_too() -> None:
    """Output classes taken in turn: the state holds the class the next request takes and each
    decode group's class, and repeats when the clients are a multiple of the classes."""
    s = {**LONG_LOOP, "effective": 100, "budget": 256, "output": 20, "clients": 32}
    s |= {"per_client": 12, "ratio": 0.8}
    engine, runs, records = _run(s, skip=True)
    assert engine.cycles is not None and engine.cycles.skipped and records.cycle is not None
    _, want_runs, want_records = _run(s, skip=False)
    assert (runs, _expanded(records)) == (want_runs, _expanded(want_records))


def test_bursts_and_short_loops_do_not_look_for_cycles() -> None:
    data = spec(100, 64, 8)
    make = make_scheduler("vllm")
    plan, budget = data.get_prefill_chunk_plan(), data.max_batched_tokens
    assert Engine(plan, 8, budget, make, Burst(16)).cycles is None
    assert Engine(plan, 8, budget, make, ClosedLoop(16, 32)).cycles is None
    assert Engine(plan, 8, budget, make, ClosedLoop(16, 48)).cycles is not None


def test_a_spread_closed_loop_is_planned_exactly() -> None:
    """Late re-submissions split waves and join them to the next ones, so the state seldom
    repeats within the rounds a benchmark runs: the loop then steps through them all, and
    whatever it skips (held requests are part of its state) is the step-by-step plan."""
    s = {**LONG_LOOP, "effective": 1024, "spread": 0.25}  # eight prompts per step
    _, runs, records = _run(s, skip=True)
    _, want_runs, want_records = _run(s, skip=False)
    assert (runs, _expanded(records)) == (want_runs, _expanded(want_records))
    assert len(runs) > len(_run({**s, "spread": 0.0}, skip=True)[1])  # the waves split


def _replayed(s: dict[str, Any], *, skip: bool, window: Window) -> ServingResult | str:
    data = spec(s["effective"], s["budget"], s["output"])
    scheduler = make_scheduler(s["scheduler"])
    _, runs, records = _run(s, skip=skip)
    plan = ServingPlan(
        engine=SimulationPlan.of_runs(runs, data, s["clients"], scheduler, cycle=records.cycle),
        records=records,
        clients=s["clients"],
        num_requests=s["clients"] * s["per_client"],
        window=window,
        max_running=s["cap"],
    )
    latencies = evaluate_shapes(plan.shapes, LinearLatency(per_context_ms=0.00037))
    try:
        return replay_serving(plan, latencies, scheduler)
    except InvalidParameterError as error:  # a steady-state window too short: both say so
        return str(error)


@settings(max_examples=150, deadline=None)
@given(cases, st.sampled_from(("benchmark", "steady_state")))
def test_a_replay_over_skipped_cycles_is_the_step_by_step_replay(
    s: dict[str, Any], window: Window
) -> None:
    """The replay walks a skipped cycle's records and runs without writing out the copies
    (its totals are the cycle's times the copies, its clock adds the cycle's increments
    again): every figure, the distributions included, equals the step-by-step plan's to the
    last bit."""
    assert _replayed(s, skip=True, window=window) == _replayed(s, skip=False, window=window)


def test_the_long_loop_replays_its_skipped_cycles_exactly() -> None:
    skipped = _replayed(LONG_LOOP, skip=True, window="benchmark")
    assert isinstance(skipped, ServingResult) and skipped.measured_requests == 640
    assert skipped == _replayed(LONG_LOOP, skip=False, window="benchmark")
