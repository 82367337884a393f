"""DecodeFirstWithSlack: the RFC §4 known answers and its properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.errors import InvalidParameterError, UnknownSchedulerError
from app.core.profiles import VLLM
from app.core.scheduler import (
    SCHEDULERS,
    DecodeFirstWithSlack,
    SchedulerState,
    StepDecision,
    make_scheduler,
)


def test_mixed_step_fits_in_slack() -> None:
    decision = DecodeFirstWithSlack().decide(SchedulerState(512, 1, 4000, 4000))
    assert decision == StepDecision(p_step=1, d_step=512)


def test_over_slack_becomes_decode_only() -> None:
    decision = DecodeFirstWithSlack().decide(SchedulerState(700, 1, 4000, 4000))
    assert decision == StepDecision(p_step=0, d_step=700)


def test_step_latency_is_max() -> None:
    assert DecodeFirstWithSlack().step_latency(3, 5) == 5
    assert DecodeFirstWithSlack().step_latency(7.5, 2.0) == 7.5


def test_decode_capped_by_budget_and_prefill_fills_the_rest() -> None:
    policy = DecodeFirstWithSlack()
    assert policy.decide(SchedulerState(10_000, 5, 100, 1000)) == StepDecision(1, 1000)
    assert policy.decide(SchedulerState(0, 5, 100, 1000)) == StepDecision(5, 0)
    assert policy.decide(SchedulerState(0, 50, 100, 1000)) == StepDecision(11, 0)


def test_parameters_validated() -> None:
    with pytest.raises(InvalidParameterError, match="slack_ratio"):
        DecodeFirstWithSlack(slack_ratio=0.5)
    with pytest.raises(InvalidParameterError, match="prefill_order"):
        DecodeFirstWithSlack(prefill_order="lifo")  # type: ignore[arg-type]
    assert DecodeFirstWithSlack(prefill_order="fifo").describe() == {
        "name": "decode_first_with_slack",
        "prefill_order": "fifo",
        "slack_ratio": 1.15,
        "mixed_latency": "max",
    }


@given(
    ready=st.integers(0, 20_000),
    pending=st.integers(0, 5000),
    budget=st.integers(1, 16_384),
    data=st.data(),
)
def test_decisions_respect_the_slack_budget(
    ready: int, pending: int, budget: int, data: st.DataObject
) -> None:
    chunk = data.draw(st.integers(1, budget))
    decision = DecodeFirstWithSlack().decide(SchedulerState(ready, pending, chunk, budget))
    assert decision.d_step == min(ready, budget)
    assert 0 <= decision.p_step <= pending
    assert decision.p_step * chunk + decision.d_step <= int(budget * 1.15)
    if ready == 0 and pending:
        assert decision.p_step >= 1  # a chunk never exceeds the budget: progress is guaranteed


def test_vllm_cuts_the_chunk_to_the_budget_left() -> None:
    policy = make_scheduler("vllm")
    # 300 decodes leave 700 of 1000 tokens: the front request prefills 700 of its 5000.
    assert policy.decide(SchedulerState(300, 2, 1000, 1000, 5000)) == StepDecision(1, 300, 700)
    # Short prompts: as many whole prompts as fit.
    assert policy.decide(SchedulerState(100, 9, 200, 1000, 200)) == StepDecision(4, 100, 200)
    assert policy.decide(SchedulerState(5000, 3, 1000, 1000, 800)) == StepDecision(0, 1000)
    assert policy.step_latency(3, 5) == 5


def test_sglang_runs_prefill_first() -> None:
    policy = make_scheduler("sglang")
    assert policy.decide(SchedulerState(64, 3, 1000, 1000, 3000)) == StepDecision(1, 0, 1000)
    assert policy.decide(SchedulerState(64, 0, 1000, 1000, 0)) == StepDecision(0, 64)


def test_sglang_mixed_chunk_folds_decodes_into_the_prefill_batch() -> None:
    policy = make_scheduler("sglang_mixed_chunk", mixed_latency="sum")
    assert policy.decide(SchedulerState(64, 3, 1000, 1000, 3000)) == StepDecision(1, 64, 936)
    assert policy.decide(SchedulerState(2000, 3, 1000, 1000, 3000)) == StepDecision(0, 2000)
    assert policy.step_latency(3, 5) == 8
    assert policy.describe() == {
        "name": "sglang_mixed_chunk",
        "prefill_order": "continue_first",
        "max_num_seqs": None,
        "mixed_latency": "sum",
    }


def test_make_scheduler_names_and_options() -> None:
    assert set(SCHEDULERS) == {"decode_first_with_slack", "vllm", "sglang", "sglang_mixed_chunk"}
    assert isinstance(make_scheduler(), DecodeFirstWithSlack)
    assert make_scheduler("vllm", max_num_seqs=256).max_running == 256
    with pytest.raises(UnknownSchedulerError, match="valid: decode_first_with_slack, sglang"):
        make_scheduler("tgi")
    with pytest.raises(InvalidParameterError, match="max_num_seqs"):
        make_scheduler("decode_first_with_slack", max_num_seqs=8)
    with pytest.raises(InvalidParameterError, match="slack_ratio"):
        make_scheduler("vllm", slack_ratio=1.2)
    with pytest.raises(InvalidParameterError, match="max_num_seqs"):
        make_scheduler("vllm", max_num_seqs=0)
    with pytest.raises(InvalidParameterError, match="mixed_latency"):
        make_scheduler("sglang", mixed_latency="min")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="mixed_latency"):
        make_scheduler("decode_first_with_slack", mixed_latency="fused")
    fused = make_scheduler("vllm", mixed_latency="fused")
    assert fused.mixed_latency == "fused"
    assert fused.describe()["mixed_latency"] == "fused"
    assert fused.step_latency(0.0, 5.0) == fused.step_latency(5.0, 0.0) == 5.0  # one-sided


@given(
    name=st.sampled_from(["vllm", "sglang", "sglang_mixed_chunk"]),
    ready=st.integers(0, 300),
    pending=st.integers(1, 50),
    budget=st.integers(1, 512),
    remaining=st.integers(1, 5000),
)
def test_engine_policies_say_how_long_a_decision_holds(
    name: str, ready: int, pending: int, budget: int, remaining: int
) -> None:
    """``stable_down_to``: the same decision for every ``prefill_remaining`` down to it."""
    policy = make_scheduler(name)
    state = SchedulerState(ready, pending, min(budget, remaining), budget, remaining)
    decision = policy.decide(state)
    floor = policy.stable_down_to(state, decision)
    if floor is None:
        return
    assert 1 <= floor <= remaining
    for left in {floor, (floor + remaining) // 2, remaining}:
        again = SchedulerState(ready, pending, min(budget, left), budget, left)
        assert policy.decide(again) == decision
    assert make_scheduler().stable_down_to(state, decision) is None


def test_engine_default_budget_follows_vllm() -> None:
    budget = VLLM.token_budget
    assert budget(85.9, "NVIDIA_H100_SXM_80G", "nvidia") == 8192  # 80 GiB
    assert budget(85.9, "NVIDIA_A100_SXM_80G", "nvidia") == 2048  # A100 excluded
    assert budget(68.7, "ATLAS_800_A2_376T_64G", "ascend") == 2048  # 64 GiB
    assert budget(75.17, "CUSTOM", "nvidia") == 8192  # just over 70 GiB
