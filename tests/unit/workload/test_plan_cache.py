"""The plan cache: closed-loop plans reused across simulations that differ in latency or limits."""

from __future__ import annotations

import dataclasses

import pytest

from app.core.errors import InvalidParameterError
from app.core.scheduler import make_scheduler
from app.core.workload import (
    PlanCache,
    ServingPlan,
    plan_closed_loop,
    simulate_closed_loop,
    simulate_serving,
)
from tests.unit.engine.fakes import ConstantLatency, LinearLatency, spec


def _plan(clients: int) -> ServingPlan:
    return plan_closed_loop(spec(512, 256, 16), clients, make_scheduler("vllm"))


def test_plans_are_reused_across_limits_and_latencies() -> None:
    cache = PlanCache(max_items=100_000)
    base = spec(1024, 512, 32)
    limited = dataclasses.replace(base, ttft_limit_ms=5.0, tpot_limit_ms=1.0, ttft_overhead_ms=3.0)
    policy = make_scheduler("vllm")
    slow, fast = LinearLatency(per_token_ms=0.02), ConstantLatency(1.0, 0.5)
    first = simulate_closed_loop(base, 8, slow, policy, plans=cache)
    assert len(cache) == 1
    # Other limits, front-end time and latencies plan the same runs: one entry, same answers.
    again = simulate_closed_loop(limited, 8, slow, policy, plans=cache)
    other = simulate_closed_loop(limited, 8, fast, policy, plans=cache)
    assert len(cache) == 1
    assert again == first
    assert other == simulate_closed_loop(limited, 8, fast, policy)
    # Two replicas of 8 clients (10 requests each) replay the same plan; another budget or
    # client count is another plan.
    simulate_serving(base, 16, slow, policy, dp=2, plans=cache)
    assert len(cache) == 1
    simulate_closed_loop(spec(1024, 256, 32), 8, slow, policy, plans=cache)
    simulate_closed_loop(base, 9, slow, policy, plans=cache)
    assert len(cache) == 3


def test_the_cache_keeps_the_recently_used_within_its_bounds() -> None:
    small, large = _plan(2), _plan(64)
    cache = PlanCache(max_items=100_000, max_plans=2)
    cache[("a",)], cache[("b",)] = small, small
    assert cache.get(("a",)) is small  # "a" is now the most recent
    cache[("c",)] = small
    assert cache.get(("b",)) is None and cache.get(("a",)) is small and len(cache) == 2

    def items(plan: ServingPlan) -> int:
        records = plan.records
        return len(plan.engine.runs) + len(records.first) + len(records.finish)

    room = PlanCache(max_items=items(large) + items(small))
    room[("large",)] = large
    room[("small",)] = small
    assert len(room) == 2
    room[("again",)] = small  # over the item bound: the oldest goes
    assert room.get(("large",)) is None and len(room) == 2
    room[("small",)] = small  # replacing counts the items once
    assert len(room) == 2
    tiny = PlanCache(max_items=items(small) - 1)
    tiny[("small",)] = small  # larger than the whole cache
    assert len(tiny) == 0
    off = PlanCache(max_items=0)  # APP_PLAN_CACHE_ITEMS=0
    off[("small",)] = small
    assert off.get(("small",)) is None


@pytest.mark.parametrize(("field", "value"), [("max_plans", 0), ("max_items", -1)])
def test_bounds_are_checked(field: str, value: int) -> None:
    with pytest.raises(InvalidParameterError, match=field):
        PlanCache(**{"max_items": 1, field: value})


def test_caps_that_never_bind_share_a_plan_and_report_their_own() -> None:
    """A cap of at least the clients admits everyone at once, as no cap does: one plan, each
    result reporting its own cap; a cap below the clients is another plan."""
    cache = PlanCache(max_items=100_000)
    base, policy, latency = spec(1024, 512, 32), make_scheduler("vllm"), LinearLatency()
    results = [
        simulate_closed_loop(base, 8, latency, policy, max_running=cap, plans=cache)
        for cap in (None, 8, 64)
    ]
    assert len(cache) == 1
    assert [r.max_running for r in results] == [None, 8, 64]
    assert {dataclasses.replace(r, max_running=None) for r in results} == {results[0]}
    capped = simulate_closed_loop(base, 8, latency, policy, max_running=4, plans=cache)
    assert len(cache) == 2 and capped.ttft_ms > results[0].ttft_ms
