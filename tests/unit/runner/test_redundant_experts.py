"""Redundant expert slots (SGLang's ``--ep-num-redundant-experts``, the runner's
``redundant_experts``): every expert-parallel rank holds ``(experts + redundant) / ep`` experts'
weights, the slots need only divide evenly, and the routed pairs spread over every slot.

SGLang sizes each MoE layer at ``n_routed_experts + ep_num_redundant_experts`` physical experts
(``models/deepseek_v2.py``) and asserts ``num_physical_experts % ep_size == 0``
(``eplb/expert_location.py`` ``_init_common``); the router keeps its logical experts.
"""

from __future__ import annotations

import pytest

from app.core.catalog import get_device, get_model
from app.core.catalog.architecture import FfnKind
from app.core.catalog.quantization import parse_quantization
from app.core.cost import ForwardShape
from app.core.errors import InvalidParameterError
from app.core.parallel import ParallelLayout
from app.core.profiles import SGLANG
from app.core.runner import ModelRunner
from app.core.runner.layers import ForwardBuilder
from app.core.runner.serving import engine_runner

R1 = get_model("deepseek-ai/DeepSeek-R1")
GB200 = get_device("NVIDIA_GB200_186G")
FP8 = parse_quantization("FP8")
DEP48 = ParallelLayout(tp=1, dp=48, ep=48)
DECODE = ForwardShape(is_decode=True, concurrency=64, query_len=1, seq_len=2048)


def _runner(layout: ParallelLayout, redundant: int = 0, model: str = R1.name) -> ModelRunner:
    return ModelRunner(get_model(model), GB200, layout, FP8, redundant_experts=redundant)


def _moe_layers() -> int:
    return sum(g.count for g in R1.layer_groups if g.ffn is FfnKind.MOE)


def test_48_ranks_cannot_split_256_experts_but_can_split_288_slots() -> None:
    with pytest.raises(InvalidParameterError, match="a divisor of num_experts=256") as bare:
        _runner(DEP48)
    assert bare.value.field == "ep"
    plan = _runner(DEP48, 32).plan
    assert plan.expert_slots == 288 and plan.expert_slots // plan.ep == 6
    assert _runner(ParallelLayout(tp=1, dp=24, ep=24), 32).plan.expert_slots // 24 == 12
    with pytest.raises(InvalidParameterError, match="redundant_experts=16 = 272 expert slots"):
        _runner(DEP48, 16)


def test_each_rank_holds_its_share_of_the_slots_weights() -> None:
    """At EP8, 288 slots are 36 experts per rank against 32: four experts' weights more on
    every MoE layer of the busiest rank (the MTP layer's experts in its own sum)."""
    base = _runner(ParallelLayout(tp=1, dp=8, ep=8))
    redundant = _runner(ParallelLayout(tp=1, dp=8, ep=8), 32)
    moe = R1.moe
    assert moe is not None
    expert_bytes = (
        R1.mlp_matrices * R1.hidden_size * moe.expert_intermediate_size
    ) * FP8.linear_format.weight_bytes_per_param
    extra = redundant.plan.weights_bytes - base.plan.weights_bytes
    assert extra == pytest.approx(4 * expert_bytes * _moe_layers(), rel=1e-12)
    mtp_extra = redundant.plan.mtp_weights_bytes - base.plan.mtp_weights_bytes
    assert mtp_extra == pytest.approx(4 * expert_bytes * R1.num_mtp_layers, rel=1e-12)
    assert redundant.memory(DECODE).weights_gb > base.memory(DECODE).weights_gb


def _load(runner: ModelRunner, tokens: int) -> tuple[float, float, float]:
    return ForwardBuilder(runner.plan, [DECODE], True).expert_load(tokens)


def test_routed_pairs_per_rank_stay_and_spread_over_more_slots() -> None:
    """The rank computes the same token-expert pairs (routes / ep); the slots they touch grow
    toward all of its 6 (DEP48) or 36 (EP8) slots, fewer tokens per slot's GEMM."""
    for tokens in (1, 64, 100_000):
        base = _load(_runner(ParallelLayout(tp=1, dp=8, ep=8)), tokens)
        more = _load(_runner(ParallelLayout(tp=1, dp=8, ep=8), 32), tokens)
        assert more[0] == pytest.approx(base[0]) and more[2] == base[2]
        assert more[1] >= base[1]
    saturated = _load(_runner(DEP48, 32), 100_000)
    assert saturated[1] == pytest.approx(6.0)
    one = _load(_runner(DEP48, 32), 1)
    k = R1.moe.experts_per_token if R1.moe else 0
    # one token per rank, 48 in the group: 6 slots x P(a slot gets one of 48 x 8 pairs)
    assert one[1] == pytest.approx(6 * (1 - (1 - k / 288) ** 48), rel=1e-12)


def test_zero_is_the_runner_without_the_option() -> None:
    layout = ParallelLayout(tp=1, dp=8, ep=8)
    plain, zero = _runner(layout), _runner(layout, 0)
    assert zero.identity() == plain.identity()
    assert zero.run_inference(DECODE).latency_ms == plain.run_inference(DECODE).latency_ms
    assert "redundant_experts" not in plain.identity_dict()
    assert _runner(layout, 32).identity_dict()["redundant_experts"] == 32
    assert _runner(layout, 32).identity() != plain.identity()


@pytest.mark.parametrize("bad", [-1, 1025, 2.5, True])
def test_bad_values_are_refused_naming_the_field(bad: object) -> None:
    with pytest.raises(InvalidParameterError) as refused:
        _runner(ParallelLayout(tp=1, dp=8, ep=8), bad)  # type: ignore[arg-type]
    assert refused.value.field == "redundant_experts"


def test_a_dense_model_notes_the_slots_ignored() -> None:
    runner = _runner(ParallelLayout(tp=2), 8, model="Qwen/Qwen3-32B")
    assert runner.plan.expert_slots == 0
    assert any("redundant_experts=8 ignored" in n for n in runner.plan.notes)


def test_the_engine_option_reaches_the_runner_and_is_echoed_only_when_set() -> None:
    assert "redundant_experts" not in SGLANG.to_dict()
    profile = SGLANG.with_overrides({"redundant_experts": 32})
    assert profile.to_dict()["redundant_experts"] == 32
    runner = engine_runner(profile, R1, GB200, DEP48, FP8)
    assert runner.redundant_experts == 32 and runner.plan.expert_slots == 288
    with pytest.raises(InvalidParameterError, match="redundant_experts"):
        SGLANG.with_overrides({"redundant_experts": -1})
