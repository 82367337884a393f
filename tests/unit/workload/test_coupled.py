"""Coupled data-parallel ranks (attention DP + expert-parallel MoE) step together."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.cost import ForwardShape, MixedShape
from app.core.parallel import ParallelLayout
from app.core.workload import BusiestRank, ranks_are_coupled, simulate_serving
from app.core.workload.coupled import busiest_share
from tests.unit.engine.fakes import LinearLatency, spec


def test_which_layouts_couple() -> None:
    assert ranks_are_coupled(True, ParallelLayout(tp=1, dp=8, ep=8))
    assert ranks_are_coupled(True, ParallelLayout(tp=4, dp=4, ep=16))
    # Experts inside a replica:
    assert not ranks_are_coupled(True, ParallelLayout(tp=8, dp=2, ep=8))
    assert not ranks_are_coupled(False, ParallelLayout(tp=1, dp=8, ep=8))  # no all-to-all
    assert not ranks_are_coupled(True, ParallelLayout(tp=1, dp=1, ep=1))


@given(st.integers(1, 4096), st.integers(1, 64))
def test_the_busiest_rank_gets_the_ceiling_share(n: int, ranks: int) -> None:
    shape = ForwardShape(is_decode=True, concurrency=n, query_len=1, seq_len=100)
    share = busiest_share(shape, ranks)
    assert share.concurrency * ranks >= n > (share.concurrency - 1) * ranks
    assert (share.query_len, share.seq_len, share.is_decode) == (1, 100, True)


def test_a_step_costs_the_busiest_ranks_forward() -> None:
    model = LinearLatency()
    coupled = BusiestRank(model, 4)
    assert coupled.decode_ms(10, 1, 500) == model.decode_ms(3, 1, 500)
    assert coupled.prefill_ms(1, 512, 512) == model.prefill_ms(1, 512, 512)
    mixed = MixedShape(
        prefill=ForwardShape(is_decode=False, concurrency=2, query_len=256, seq_len=256),
        decode=ForwardShape(is_decode=True, concurrency=9, query_len=1, seq_len=300),
    )
    found = coupled.forward_latencies_ms((mixed,))[mixed]
    assert found == pytest.approx(
        model.mixed_ms(
            MixedShape(
                prefill=ForwardShape(is_decode=False, concurrency=1, query_len=256, seq_len=256),
                decode=ForwardShape(is_decode=True, concurrency=3, query_len=1, seq_len=300),
            )
        )
    )


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([2, 4, 8]), st.integers(1, 6), st.integers(32, 256))
def test_coupled_ranks_are_never_faster_than_independent_ones(
    dp: int, per_rank: int, output_length: int
) -> None:
    """A prefill on any rank stalls every rank's decodes, so TPOT cannot improve; throughput
    cannot exceed the independent replicas'."""
    data = spec(2048, 1024, output_length)
    model = LinearLatency(base_ms=2.0, per_token_ms=0.02)
    clients = per_rank * dp
    alone = simulate_serving(data, clients, model, dp=dp)
    together = simulate_serving(data, clients, model, dp=dp, coupled=True)
    assert together.num_requests == alone.num_requests
    assert together.tpot_ms >= alone.tpot_ms * (1 - 1e-9)
    assert together.throughput_tokens_s <= alone.throughput_tokens_s * (1 + 1e-9)


def test_one_rank_is_not_coupled() -> None:
    data = spec(2048, 1024, 64)
    model = LinearLatency()
    assert simulate_serving(data, 8, model, coupled=True) == simulate_serving(data, 8, model)
