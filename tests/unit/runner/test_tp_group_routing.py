"""An expert-parallel MoE whose expert group is the attention tensor-parallel group: vLLM
routes the tokens every rank already holds (no dispatch or combine all-to-all; the MoE
all-reduce sums the ranks' outputs), and exchanges tokens only under attention data
parallelism. vLLM: ``FusedMoEParallelConfig.use_all2all_kernels`` is ``dp_size > 1 and
use_ep`` (``vllm/model_executor/layers/fused_moe/config.py``). The other engines keep the
exchange for now (``app.core.runner.serving.TP_GROUP_ROUTING_ENGINES``)."""

from __future__ import annotations

import pytest

from app.core.catalog import get_device, get_model
from app.core.catalog.quantization import parse_quantization
from app.core.cost import ForwardShape
from app.core.parallel import ParallelLayout
from app.core.profiles import SGLANG, TRTLLM, VLLM, EngineProfile
from app.core.runner import ModelRunner
from app.core.runner.serving import engine_runner

KIMI = get_model("moonshotai/Kimi-K2.5")
B200 = get_device("NVIDIA_B200_SXM_180G")
INT4 = parse_quantization("W4A16")
DECODE = ForwardShape(is_decode=True, concurrency=16, query_len=1, seq_len=2048)
EXCHANGE = {"moe_dispatch", "moe_combine"}


def _ops(profile: EngineProfile, layout: ParallelLayout) -> set[str]:
    runner = engine_runner(profile, KIMI, B200, layout, INT4)
    return {op.name for op in runner.run_inference(DECODE).breakdown.ops}


def test_vllm_tp_ep_runs_no_all_to_all_but_keeps_the_moe_all_reduce() -> None:
    ops = _ops(VLLM, ParallelLayout(tp=8, ep=8))
    assert not EXCHANGE & ops
    assert "moe_all_reduce" in ops


def test_vllm_under_attention_data_parallelism_exchanges_tokens() -> None:
    assert _ops(VLLM, ParallelLayout(tp=1, dp=8, ep=8)) >= EXCHANGE


@pytest.mark.parametrize("profile", [SGLANG, TRTLLM], ids=lambda p: p.name)
def test_the_other_engines_keep_the_exchange(profile: EngineProfile) -> None:
    assert _ops(profile, ParallelLayout(tp=8, ep=8)) >= EXCHANGE


def test_the_step_is_faster_by_the_exchange_and_keyed_apart() -> None:
    layout = ParallelLayout(tp=8, ep=8)
    routed = ModelRunner(KIMI, B200, layout, INT4, kernel_engine="vllm", tp_group_all_to_all=False)
    exchanged = ModelRunner(KIMI, B200, layout, INT4, kernel_engine="vllm")
    result = exchanged.run_inference(DECODE)
    exchange_ms = sum(op.total_ms for op in result.breakdown.ops if op.name in EXCHANGE)
    assert exchange_ms > 0
    assert routed.forward_ms(DECODE) == pytest.approx(result.latency_ms - exchange_ms)
    assert routed.identity() != exchanged.identity()
    assert routed.identity_dict()["tp_group_all_to_all"] is False
    assert "tp_group_all_to_all" not in exchanged.identity_dict()
    assert (
        engine_runner(VLLM, KIMI, B200, layout, INT4).identity_dict()["tp_group_all_to_all"]
        is False
    )
