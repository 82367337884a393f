"""Capacity plans: the sustainable rate is the largest meeting the SLA, replicas cover the
target with its headroom, costs follow the devices; percentiles come from grouped requests."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.errors import InvalidParameterError
from app.core.optimizer.capacity import Sla, plan_capacity
from app.core.workload.metrics import ServingResult, weighted_percentile

BASE = ServingResult(
    method="poisson_simulation",
    workload="poisson",
    window="benchmark",
    clients=0,
    num_requests=100,
    measured_requests=100,
    ttft_ms=0.0,
    tpot_ms=0.0,
    e2e_ms=0.0,
    throughput_tokens_s=0.0,
    total_throughput=0.0,
    request_throughput=0.0,
    mean_running_batch=0.0,
    mean_prefill_tokens_per_step=0.0,
    mean_decode_tokens_per_step=0.0,
    duration_ms=1.0,
    max_running=None,
    prefill_num_chunks=1,
    steps=1,
    forward_evaluations=1,
)


def _queue(rate: float) -> ServingResult:
    """An M/M/1-like replica of capacity 10 req/s: TTFT 50 ms / (1 - rho), TPOT 20 ms."""
    rho = min(rate / 10.0, 0.999)
    ttft = 50.0 / (1 - rho)
    return dataclasses.replace(
        BASE,
        ttft_ms=ttft,
        tpot_ms=20.0,
        ttft_distribution_ms=((ttft * 0.5, 50), (ttft * 1.5, 50)),
        tpot_distribution_ms=((20.0, 100),),
    )


def _plan(**changes: object):  # type: ignore[no-untyped-def]
    kwargs: dict[str, object] = {
        "simulate": _queue,
        "saturated_rate": 10.0,
        "sla": Sla(ttft_limit_ms=100.0, tpot_limit_ms=None),
        "target_rate": 42.0,
        "headroom": 1.25,
        "devices_per_replica": 4,
        "output_length": 500,
        "price_per_device_hour": 2.0,
    }
    kwargs.update(changes)
    return plan_capacity(**kwargs)  # type: ignore[arg-type]


def test_sustainable_rate_is_where_the_limit_binds() -> None:
    plan = _plan()
    assert plan.sustainable_rate == pytest.approx(5.0, rel=0.01)  # 50 / (1 - rho) = 100
    assert plan.replicas == math.ceil(42.0 * 1.25 / plan.sustainable_rate) == 11
    assert plan.devices == 44 and plan.utilisation < 1 / 1.25 + 1e-9
    assert plan.cost_per_hour == 88.0
    tokens_per_hour = 42.0 * 500 * 3600
    assert plan.cost_per_million_output_tokens == pytest.approx(88.0 / tokens_per_hour * 1e6)


def test_a_percentile_sla_is_stricter_than_the_mean() -> None:
    p90 = _plan(sla=Sla(ttft_limit_ms=100.0, tpot_limit_ms=None, percentile=90))
    assert p90.sustainable_rate < _plan().sustainable_rate
    assert p90.replicas >= _plan().replicas


def test_the_front_end_time_counts_against_the_ttft_limit() -> None:
    slower = _plan(sla=Sla(ttft_limit_ms=100.0, tpot_limit_ms=None, ttft_overhead_ms=25.0))
    assert slower.sustainable_rate < _plan().sustainable_rate


def test_an_sla_no_idle_replica_meets_is_infeasible_with_the_reason() -> None:
    plan = _plan(sla=Sla(ttft_limit_ms=None, tpot_limit_ms=10.0))
    assert plan.replicas == 0 and plan.reason is not None and "TPOT" in plan.reason


def test_bad_targets_are_refused() -> None:
    with pytest.raises(InvalidParameterError, match="request_rate"):
        _plan(target_rate=0.0)
    with pytest.raises(InvalidParameterError, match="headroom"):
        _plan(headroom=0.5)


@given(
    groups=st.lists(
        st.tuples(st.floats(0, 1e4, allow_nan=False), st.integers(1, 50)), min_size=1, max_size=30
    ),
    q=st.floats(0.01, 99.99),
)
def test_weighted_percentile_matches_the_expanded_list(
    groups: list[tuple[float, int]], q: float
) -> None:
    ordered = tuple(sorted(groups))
    expanded = [v for v, c in ordered for _ in range(c)]
    rank = math.ceil(q / 100 * len(expanded) - 1e-9)
    assert weighted_percentile(ordered, q) == expanded[max(rank, 1) - 1]


def test_percentile_bounds() -> None:
    with pytest.raises(InvalidParameterError):
        weighted_percentile(((1.0, 1),), 100)
