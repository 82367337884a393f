"""The arrival source is a strategy of the engine loop: the loop has no branch per workload."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.engine import (
    ArrivalSource,
    Burst,
    ClosedLoop,
    TimedArrivals,
    evaluate_shapes,
    run_clock,
    run_engine,
)
from app.core.engine.arrivals import Finished, Waiting
from app.core.errors import SimulationError
from app.core.scheduler import make_scheduler

from .fakes import ConstantLatency, spec

cases = st.fixed_dictionaries(
    {
        "effective": st.integers(1, 40),
        "budget": st.integers(1, 16),
        "n": st.integers(1, 12),
        "output": st.integers(1, 8),
        "policy": st.sampled_from(["decode_first_with_slack", "vllm", "sglang"]),
        "cap": st.one_of(st.none(), st.integers(1, 6)),
    }
)


@settings(max_examples=100, deadline=None)
@given(cases)
def test_a_burst_is_a_closed_loop_that_never_resubmits(s: dict[str, int]) -> None:
    data = spec(s["effective"], s["budget"], s["output"])
    scheduler = make_scheduler(str(s["policy"]))
    cap = s["cap"]
    burst = run_engine(data, s["n"], scheduler, Burst(s["n"]), max_running=cap)
    loop = run_engine(data, s["n"], scheduler, ClosedLoop(s["n"], s["n"]), max_running=cap)
    assert burst == loop


@settings(max_examples=100, deadline=None)
@given(cases)
def test_timed_arrivals_all_at_zero_take_the_bursts_decisions(s: dict[str, int]) -> None:
    """The clock decides when requests are seen, never what the scheduler decides: with every
    request there at t = 0 the timed source plans the burst's runs, and the clock it kept
    while planning ends each run where the burst's replay does."""
    data = spec(s["effective"], s["budget"], s["output"])
    scheduler = make_scheduler(str(s["policy"]))
    latency = ConstantLatency(prefill_ms=2.0, decode_ms=1.0)
    burst, _ = run_engine(data, s["n"], scheduler, Burst(s["n"]), max_running=s["cap"])

    def step_ms(p_step: int, tokens: int, seq_len: int, d_step: int) -> float:
        return scheduler.step_latency(2.0 if p_step else 0.0, 1.0 if d_step else 0.0)

    timed_source = TimedArrivals(times_ms=(0.0,) * s["n"], max_in_flight=None, step_ms=step_ms)
    timed, records = run_engine(data, 0, scheduler, timed_source, max_running=s["cap"])
    assert timed.runs == burst.runs
    ends, _ = run_clock(burst, evaluate_shapes(burst.shapes, latency), scheduler)
    assert records.ends_ms == pytest.approx(ends)
    assert records.sent_ms == (0.0,)


class FanOut(ArrivalSource):
    """A source of our own: one request at t = 0, each finish brings two more, up to ``n``."""

    def __init__(self, n: int) -> None:
        self.num_requests = n
        self.submitted = 1

    def start(self, waiting: Waiting) -> None:
        waiting.append([1, -1])

    def finished(self, run: int, who: Sequence[Finished], now_ms: float, waiting: Waiting) -> None:
        for count, *_ in who:
            more = min(2 * count, self.num_requests - self.submitted)
            if more > 0:
                self.submitted += more
                self.last_arrival_run = run
                waiting.append([more, run])


@pytest.mark.parametrize("n", [1, 2, 7, 30])
def test_any_source_plugs_into_the_loop(n: int) -> None:
    data = spec(6, 4, 3)
    plan, records = run_engine(data, 1, make_scheduler(), FanOut(n))
    assert sum(count for count, _, _ in records.all_first()) == n  # every request starts once
    assert sum(count for count, *_ in records.all_finish()) == n  # and finishes once
    assert sum(run.finished for run in plan.runs) == n
    # Arrivals come at the end of runs in which requests finished (or at t = 0).
    arrivals = {arrival for _, arrival, _ in records.first}
    assert all(a == -1 or plan.runs[a].finished for a in arrivals)


def test_a_source_that_runs_dry_is_a_simulation_error() -> None:
    """Nothing running, nothing left to arrive, requests missing: the source says so."""

    class Short(ArrivalSource):
        num_requests = 3  # claims one more request than it ever sends

        def start(self, waiting: Waiting) -> None:
            waiting.append([2, -1])

    with pytest.raises(SimulationError, match="1 requests neither ran nor were left to arrive"):
        run_engine(spec(4, 4, 2), 2, make_scheduler(), Short())
