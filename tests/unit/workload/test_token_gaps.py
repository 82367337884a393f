"""The gaps between consecutive tokens of a serving run (a benchmark client's ITL): each
decode token follows a gap of the duration of the step that emitted it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.spec import WorkloadSpec
from app.core.workload import simulate_closed_loop, simulate_poisson_serving
from app.core.workload.metrics import ServingResult
from tests.unit.engine.fakes import ConstantLatency, LinearLatency


def _gaps(result: ServingResult) -> tuple[int, float]:
    """(how many gaps, their total ms)."""
    return (
        sum(n for _, n in result.itl_distribution_ms),
        sum(g * n for g, n in result.itl_distribution_ms),
    )


def test_one_request_at_a_time_gaps_are_the_decode_step() -> None:
    data = WorkloadSpec(input_length=64, output_length=33, max_batched_tokens=2048)
    result = simulate_closed_loop(
        data, 1, ConstantLatency(3.0, 2.0), num_requests=5, token_gaps=True
    )
    # 5 requests x 32 gaps after their first token, every one a 2 ms decode step
    assert result.itl_distribution_ms == ((2.0, 5 * 32),)
    assert result.itl_percentile_ms(50) == result.itl_percentile_ms(99) == result.tpot_ms


@settings(max_examples=25, deadline=None)
@given(
    clients=st.integers(1, 12),
    output=st.integers(2, 40),
    prompt=st.integers(1, 3000),
    budget=st.sampled_from([256, 1024, 8192]),
)
def test_the_gaps_add_up_to_every_requests_decode_time(
    clients: int, output: int, prompt: int, budget: int
) -> None:
    """Benchmark window (every request counted), one length: the gaps are each request's
    ``output - 1`` decode tokens, and their total is the requests' decode time (TPOT x
    gaps), so the mean gap is the mean TPOT, while a step that prefills stalls the decodes
    it carries (the longest gap is at least the shortest decode-only step)."""
    data = WorkloadSpec(input_length=prompt, output_length=output, max_batched_tokens=budget)
    requests = 3 * clients
    result = simulate_closed_loop(
        data, clients, LinearLatency(), num_requests=requests, token_gaps=True
    )
    count, total_ms = _gaps(result)
    assert count == requests * (output - 1)
    assert total_ms == pytest.approx(result.tpot_ms * count, rel=1e-9)
    assert result.itl_percentile_ms(50) <= result.itl_percentile_ms(99)


def test_poisson_gaps_never_span_an_idle_engine() -> None:
    """At a rate so low that every request runs alone, each gap is one decode step, however
    long the engine idled between requests."""
    data = WorkloadSpec(input_length=128, output_length=17, max_batched_tokens=2048)
    result = simulate_poisson_serving(
        data, 0.01, ConstantLatency(5.0, 1.5), num_requests=20, token_gaps=True
    )
    assert result.itl_distribution_ms == ((1.5, 20 * 16),)


def test_replicas_pool_their_gaps() -> None:
    data = WorkloadSpec(input_length=128, output_length=9, max_batched_tokens=2048)
    one = simulate_poisson_serving(data, 4.0, LinearLatency(), num_requests=40, token_gaps=True)
    two = simulate_poisson_serving(
        data, 8.0, LinearLatency(), num_requests=80, dp=2, token_gaps=True
    )
    assert _gaps(two)[0] == 2 * _gaps(one)[0] == 80 * 8


def test_the_gaps_are_only_walked_when_asked() -> None:
    """Every other simulation (optimize probes, simulate, sweeps) skips the pass over the runs:
    the same run without ``token_gaps`` carries none and the same means."""
    data = WorkloadSpec(input_length=128, output_length=9, max_batched_tokens=2048)
    asked = simulate_closed_loop(data, 3, LinearLatency(), num_requests=9, token_gaps=True)
    plain = simulate_closed_loop(data, 3, LinearLatency(), num_requests=9)
    assert plain.itl_distribution_ms == () and asked.itl_distribution_ms
    assert (plain.ttft_ms, plain.tpot_ms) == (asked.ttft_ms, asked.tpot_ms)
