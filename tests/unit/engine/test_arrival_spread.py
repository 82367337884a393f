"""The closed loop's arrival spread: which re-submissions arrive a step late, and what that
does to a wave of clients in lock step."""

from __future__ import annotations

from collections import deque

import pytest

from app.core.engine.arrivals import ClosedLoop, Waiting, late_share
from app.core.errors import InvalidParameterError
from app.core.spec import WorkloadSpec
from app.core.workload.closed_loop import simulate_closed_loop

from .fakes import LinearLatency


@pytest.mark.parametrize(
    ("requests", "spread", "late"),
    [
        (1, 0.5, 0),  # a lone finish always makes the next step
        (2, 0.25, 1),  # 0.5 rounds up
        (2, 0.2, 0),
        (3, 0.25, 1),
        (4, 0.5, 2),
        (8, 0.125, 1),
        (8, 0.0, 0),
        (2, 0.5, 1),  # half of two
    ],
)
def test_late_share_is_the_nearest_whole_share_and_never_all(
    requests: int, spread: float, late: int
) -> None:
    assert late_share(requests, spread) == late


def test_late_requests_wait_one_run_and_arrive_at_its_end() -> None:
    loop = ClosedLoop(4, 12, arrival_spread=0.5)
    queue: Waiting = deque()
    loop.finished(5, [(4, 1, 10)], 0.0, queue)
    assert list(queue) == [[2, 5]] and loop.held_total == 2
    assert loop.held_state(6) == ((2, 0, 0),)
    loop.release(6, queue)  # the top of run 6: not yet
    assert loop.held_total == 2
    loop.release(7, queue)  # after run 6: they arrived at its end
    assert list(queue) == [[2, 5], [2, 6]] and loop.held_total == 0
    assert loop.submitted == 8 and loop.last_arrival_run == 6


def _ttft(spread: float) -> float:
    spec = WorkloadSpec(
        input_length=1024, output_length=64, max_batched_tokens=8192, arrival_spread=spread
    )
    latency = LinearLatency(base_ms=5.0, per_token_ms=0.02)
    return simulate_closed_loop(spec, 8, latency, num_requests=80).ttft_ms


def test_a_spread_breaks_the_lock_step_waves() -> None:
    """Eight clients whose prompts fit one step: in lock step every wave is prefilled
    together; with a spread later waves split, and each prefill step is smaller."""
    lock_step, spread = _ttft(0.0), _ttft(0.25)
    assert spread < lock_step
    assert _ttft(0.5) <= spread


@pytest.mark.parametrize("bad", [-0.1, 0.51, float("nan"), True, "0.2"])
def test_a_spread_out_of_range_is_refused(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="arrival_spread"):
        WorkloadSpec(
            input_length=8,
            output_length=8,
            max_batched_tokens=8,
            arrival_spread=bad,  # type: ignore[arg-type]
        )
