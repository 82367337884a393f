"""The engine loop calls the caller's deadline check every INTERRUPT_EVERY iterations."""

from __future__ import annotations

import pytest

from app.core.engine import SimulationPlan, plan_serving
from app.core.engine.loop import INTERRUPT_EVERY
from app.core.errors import DeadlineExceededError
from app.core.workload import plan_closed_loop
from tests.unit.engine.fakes import spec


def test_a_long_loop_is_interrupted() -> None:
    calls: list[int] = []

    def interrupt() -> None:
        calls.append(1)
        if len(calls) == 3:
            raise DeadlineExceededError("past the deadline")

    data = spec(4096, 512, 256)  # 8 chunks: the time simulation, many iterations
    with pytest.raises(DeadlineExceededError):
        plan_closed_loop(data, 512, num_requests=5120, interrupt=interrupt)
    assert len(calls) == 3


def test_a_short_loop_is_not_interrupted_and_the_plan_is_unchanged() -> None:
    data = spec(4096, 512, 64)
    calls: list[int] = []
    plain = plan_serving(data, 16)
    checked = plan_serving(data, 16, interrupt=lambda: calls.append(1))
    assert isinstance(plain, SimulationPlan)
    assert checked == plain
    assert len(calls) <= len(plain.runs) // INTERRUPT_EVERY + 1
