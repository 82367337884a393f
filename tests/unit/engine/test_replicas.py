"""Data-parallel replicas: how a total spreads over them and how their results add up."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.engine import SimulationResult, combine_replicas, simulate
from app.core.errors import InvalidParameterError
from app.core.parallel import split_over_replicas
from app.core.spec import WorkloadSpec

from .fakes import LinearLatency


def test_split_known_answers() -> None:
    assert split_over_replicas(8, 4) == [(2, 4)]
    assert split_over_replicas(10, 4) == [(3, 2), (2, 2)]
    assert split_over_replicas(2, 4) == [(1, 2)]  # two replicas idle
    assert split_over_replicas(1, 1) == [(1, 1)]


@given(total=st.integers(1, 10_000), replicas=st.integers(1, 1024))
def test_split_conserves_and_is_as_even_as_integers_allow(total: int, replicas: int) -> None:
    split = split_over_replicas(total, replicas)
    assert sum(size * n for size, n in split) == total
    assert sum(n for _, n in split) == min(total, replicas)
    sizes = [size for size, _ in split]
    assert sizes == sorted(sizes, reverse=True) and max(sizes) - min(sizes) <= 1
    assert max(sizes) == -(-total // replicas)


def run(concurrency: int) -> SimulationResult:
    data = WorkloadSpec(input_length=600, output_length=16, max_batched_tokens=256)
    return simulate(data, concurrency, LinearLatency())


def test_combined_replicas_add_throughput_and_weight_latencies_by_requests() -> None:
    three, two = run(3), run(2)
    both = combine_replicas([(three, 2), (two, 2)])
    assert both.concurrency == 10
    assert both.ttft_ms == pytest.approx((6 * three.ttft_ms + 4 * two.ttft_ms) / 10)
    assert both.tpot_ms == pytest.approx((6 * three.tpot_ms + 4 * two.tpot_ms) / 10)
    assert both.throughput_tokens_s == pytest.approx(
        2 * three.throughput_tokens_s + 2 * two.throughput_tokens_s
    )
    assert both.request_throughput == pytest.approx(
        2 * three.request_throughput + 2 * two.request_throughput
    )
    assert both.makespan_ms == max(three.makespan_ms, two.makespan_ms)
    assert both.steps == 2 * three.steps + 2 * two.steps
    assert both.method == three.method


def test_identical_replicas_keep_latencies_and_multiply_throughput() -> None:
    one = run(4)
    assert combine_replicas([(one, 1)]) is one
    four = combine_replicas([(one, 4)])
    assert four.concurrency == 16
    assert four.ttft_ms == pytest.approx(one.ttft_ms)
    assert four.throughput_tokens_s == pytest.approx(4 * one.throughput_tokens_s)
    with pytest.raises(InvalidParameterError, match="parts"):
        combine_replicas([])
