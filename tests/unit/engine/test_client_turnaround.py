"""A closed loop's client turnaround: a re-submission waits for the step that began when it
was sent, and an idle engine starts on the first request alone (issue 34)."""

from __future__ import annotations

import dataclasses
from collections import deque

import pytest

from app.core.engine.arrivals import ClosedLoop, Waiting
from app.core.errors import InvalidParameterError
from app.core.profiles import PROFILES
from app.core.workload.closed_loop import simulate_closed_loop

from .fakes import LinearLatency, spec


def test_the_first_wave_wakes_the_engine_with_one_request() -> None:
    """The clients send at t = 0 to an idle engine: one runs the first step, the others
    (their clocks started at 0) are taken after it."""
    loop = ClosedLoop(4, 12, turnaround=True)
    queue: Waiting = deque()
    loop.start(queue)
    assert list(queue) == [[1, -1]] and loop.held_total == 3
    loop.release(0, queue)  # the top of run 0: not yet
    assert list(queue) == [[1, -1]]
    loop.release(1, queue)  # after run 0
    assert list(queue) == [[4, -1]] and loop.held_total == 0


def test_a_busy_engine_takes_re_submissions_after_its_next_step() -> None:
    loop = ClosedLoop(4, 12, turnaround=True)
    queue: Waiting = deque()
    loop.finished(5, [(2, 1, 10)], 0.0, queue)  # two of four finish, two still run
    assert not queue and loop.held_total == 2
    assert loop.held_state(6) == ((2, 1, 0),)  # sent at the end of run 5, taken after run 6
    loop.release(6, queue)
    assert not queue
    loop.release(7, queue)
    assert list(queue) == [[2, 5]]  # their TTFT counts from the end of run 5
    assert loop.submitted == 6 and loop.last_arrival_run == 5


def test_an_idle_engine_starts_on_the_first_re_submission() -> None:
    loop = ClosedLoop(3, 9, turnaround=True)
    queue: Waiting = deque()
    loop.finished(4, [(3, 0, 4)], 0.0, queue)  # every request in flight finished
    assert list(queue) == [[1, 4]] and loop.held_state(5) == ((2, 1, 0),)


def test_a_spread_sends_its_late_share_a_step_later_still() -> None:
    loop = ClosedLoop(5, 20, arrival_spread=0.5, turnaround=True)
    queue: Waiting = deque()
    loop.finished(3, [(5, 0, 3)], 0.0, queue)  # idle: one at once, two after run 4, two later
    assert list(queue) == [[1, 3]]
    assert loop.held_state(4) == ((2, 1, 0), (2, 0, -1))
    assert loop.last_arrival_run == 4
    loop.release(5, queue)
    loop.release(6, queue)
    assert list(queue) == [[3, 3], [2, 4]]  # the two sent at the end of run 3 join its entry


def test_two_clients_known_answer() -> None:
    """Two clients, one-step prompts, three tokens, steps of 1 ms. Lock step: every request
    is prefilled in the step after it was sent (TTFT 1). With the turnaround: the first
    client's request runs alone, the second waits for that step (TTFT 2); from then on each
    re-submission waits for the other client's step (TTFT 2): 7 / 4."""
    latency = LinearLatency(base_ms=1.0, per_token_ms=0.0, per_context_ms=0.0)
    data = spec(10, 100, 3)
    lock_step = simulate_closed_loop(data, 2, latency, num_requests=4)
    turnaround = dataclasses.replace(data, client_turnaround=True)
    waited = simulate_closed_loop(turnaround, 2, latency, num_requests=4)
    assert lock_step.ttft_ms == pytest.approx(1.0)
    assert waited.ttft_ms == pytest.approx(7 / 4)
    assert waited.steps == lock_step.steps + 2


def test_the_served_engines_turn_it_on() -> None:
    """vLLM, SGLang and TensorRT-LLM read new requests between steps; the RFC's own workload
    (msmodeling) keeps the lock step."""
    for name in ("vllm", "sglang", "trtllm"):
        assert PROFILES[name].client_turnaround
    assert not PROFILES["msmodeling"].client_turnaround


@pytest.mark.parametrize("bad", [0, 1, "true", None])
def test_a_non_boolean_turnaround_is_refused(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="client_turnaround"):
        dataclasses.replace(spec(8, 8, 8), client_turnaround=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="client_turnaround"):
        PROFILES["vllm"].with_overrides({"client_turnaround": bad or 0})
