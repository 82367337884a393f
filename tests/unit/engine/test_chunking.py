"""Chunk plan and WorkloadSpec: the RFC §4 known answers and validation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.chunking import (
    PrefillChunk,
    effective_input_length,
    prefill_chunk_plan,
)
from app.core.errors import InvalidParameterError
from app.core.spec import WorkloadSpec


def _data(**overrides: object) -> WorkloadSpec:
    values: dict[str, object] = {
        "input_length": 4096,
        "output_length": 128,
        "max_batched_tokens": 8192,
    }
    values.update(overrides)
    return WorkloadSpec(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("effective", "budget", "expected"),
    [
        (4096, 8192, [4096]),
        (32768, 8192, [8192, 8192, 8192, 8192]),
        (10000, 4096, [4096, 4096, 1808]),
        (8192, 8192, [8192]),
        (8193, 8192, [8192, 1]),
    ],
)
def test_chunk_plan_known_answers(effective: int, budget: int, expected: list[int]) -> None:
    plan = prefill_chunk_plan(effective, budget)
    assert [c.query_len for c in plan] == expected
    assert [c.index for c in plan] == list(range(len(expected)))
    assert plan[-1].seq_len == effective
    assert [c.is_last_chunk for c in plan] == [False] * (len(expected) - 1) + [True]


def test_rfc_example_seq_lens() -> None:
    assert prefill_chunk_plan(10000, 4096) == (
        PrefillChunk(0, 4096, 4096, False),
        PrefillChunk(1, 4096, 8192, False),
        PrefillChunk(2, 1808, 10000, True),
    )


def test_prefix_cache_applies_before_chunking() -> None:
    data = _data(input_length=32768, output_length=1024, prefix_cache_hit_rate=0.5)
    assert data.effective_input_length == 16384  # prefill works on the uncached tokens
    assert data.input_length == 32768  # decode keeps the full input as context
    assert data.prefill_num_chunks == 2
    assert [c.query_len for c in data.get_prefill_chunk_plan()] == [8192, 8192]


def test_small_prefix_cache_example() -> None:
    data = _data(input_length=10, prefix_cache_hit_rate=0.5, max_batched_tokens=3)
    assert data.effective_input_length == 5
    assert [c.query_len for c in data.get_prefill_chunk_plan()] == [3, 2]


def test_hit_rate_read_as_written_decimal() -> None:
    # 100 * 0.29 is 28.999... in binary floating point; the user meant 29 cached tokens.
    assert _data(input_length=100, prefix_cache_hit_rate=0.29).effective_input_length == 71


@pytest.mark.parametrize("budget", [0, -1, -8192, 1.5, True, "8192", None])
def test_max_batched_tokens_must_be_positive_integer(budget: object) -> None:
    with pytest.raises(InvalidParameterError, match="max_batched_tokens") as err:
        _data(max_batched_tokens=budget)
    assert "integer in [1," in str(err.value)


@pytest.mark.parametrize("rate", [-0.1, 1.0, 1.5, float("nan"), float("inf")])
def test_hit_rate_range(rate: float) -> None:
    with pytest.raises(InvalidParameterError, match=r"prefix_cache_hit_rate.*\[0, 1\)"):
        _data(prefix_cache_hit_rate=rate)


@given(length=st.integers(1, 10**7), rate=st.floats(0, 1, exclude_max=True))
def test_effective_length_is_at_least_one(length: int, rate: float) -> None:
    """h < 1 always leaves a token to prefill (the guard in the code can never fire)."""
    assert 1 <= effective_input_length(length, rate) <= length


@pytest.mark.parametrize("field", ["input_length", "output_length"])
@pytest.mark.parametrize("value", [0, -5])
def test_lengths_positive(field: str, value: int) -> None:
    with pytest.raises(InvalidParameterError, match=field):
        _data(**{field: value})


@pytest.mark.parametrize(
    ("field", "value"),
    [("ttft_limit_ms", 0), ("tpot_limit_ms", -1.0), ("tpot_limit_ms", float("nan"))],
)
def test_limits_positive(field: str, value: float) -> None:
    with pytest.raises(InvalidParameterError, match=field):
        _data(**{field: value})


def test_mtp_rates_must_cover_tokens() -> None:
    with pytest.raises(InvalidParameterError, match="mtp_acceptance_rates"):
        _data(num_mtp_tokens=2, mtp_acceptance_rates=(0.8,))
    with pytest.raises(InvalidParameterError, match="mtp_acceptance_rates"):
        _data(num_mtp_tokens=1, mtp_acceptance_rates=(1.5,))
    data = _data(num_mtp_tokens=2, mtp_acceptance_rates=(0.8, 0.6))
    assert data.decode_query_len == 3
    assert data.decode_seq_len == 4096 + 64 + 3


@given(effective=st.integers(1, 200_000), budget=st.integers(64, 50_000))
def test_plan_properties(effective: int, budget: int) -> None:
    plan = prefill_chunk_plan(effective, budget)
    assert len(plan) == -(-effective // budget)
    assert sum(c.query_len for c in plan) == effective
    assert all(1 <= c.query_len <= budget for c in plan)
    assert all(c.query_len == budget for c in plan[:-1])
    running = 0
    for chunk in plan:
        running += chunk.query_len
        assert chunk.seq_len == running >= chunk.query_len
