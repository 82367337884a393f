"""Hand-computed FLOPs and bytes of each op for a tiny dense config (all 16-bit)."""

from __future__ import annotations

import math

import pytest

from app.core.catalog import get_device, get_model, model_from_config, parse_quantization
from app.core.cost import ForwardShape
from app.core.errors import InvalidParameterError
from app.core.parallel import ParallelLayout
from app.core.runner import ModelRunner, OpCategory, OpCost
from app.core.runner.layers import attended_pairs

TINY = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 100,
    "tie_word_embeddings": False,
}
H, HEADS, KV, D, FFN, V = 64, 4, 2, 16, 128, 100
B16 = 2  # bytes per 16-bit element


def _ops(request: ForwardShape, tp: int = 1) -> dict[str, OpCost]:
    runner = ModelRunner(
        model_from_config(TINY, name="tiny"),
        get_device("NVIDIA_H100_SXM_80G"),
        ParallelLayout(tp=tp),
    )
    result = runner.run_inference(request)
    assert result.latency_ms == pytest.approx(math.fsum(op.total_ms for op in result.breakdown.ops))
    return {op.name: op for op in result.breakdown.ops}


def test_prefill_ops_of_a_tiny_llama() -> None:
    t = 8  # one request, 8 new tokens, no cached context
    ops = _ops(ForwardShape(is_decode=False, concurrency=1, query_len=t, seq_len=t))
    qkv_n = (HEADS + 2 * KV) * D  # 128
    qkv = ops["qkv_proj"]
    assert qkv.count == 2
    assert qkv.flops == 2 * t * H * qkv_n
    assert qkv.hbm_bytes == (H * qkv_n + t * H + t * qkv_n) * B16
    attn = ops["flash_attention"]
    pairs = t * (t + 1) / 2  # causal: 36 (query, key) pairs
    assert attn.flops == 2 * pairs * HEADS * (D + D)
    kv_row = 2 * KV * D
    assert attn.hbm_bytes == (t * kv_row + t * kv_row + 2 * t * HEADS * D) * B16
    assert ops["o_proj"].flops == 2 * t * HEADS * D * H
    assert ops["mlp_up"].flops == 2 * t * H * 2 * FFN
    assert ops["mlp_down"].flops == 2 * t * FFN * H
    # lm_head only on the one token that samples.
    head = ops["lm_head"]
    assert head.flops == 2 * 1 * H * V
    assert head.hbm_bytes == (H * V + H + V) * B16
    assert "attn_all_reduce" not in ops


def test_decode_reads_the_kv_cache() -> None:
    c, ctx = 3, 40
    ops = _ops(ForwardShape(is_decode=True, concurrency=c, query_len=1, seq_len=ctx))
    attn = ops["decode_attention"]
    kv_row = 2 * KV * D
    assert attn.flops == 2 * c * ctx * HEADS * (D + D)
    assert attn.hbm_bytes == (c * ctx * kv_row + c * kv_row + 2 * c * HEADS * D) * B16
    assert ops["lm_head"].flops == 2 * c * H * V


def test_tensor_parallel_splits_heads_and_adds_all_reduce() -> None:
    ops = _ops(ForwardShape(is_decode=False, concurrency=1, query_len=8, seq_len=8), tp=2)
    assert ops["qkv_proj"].flops == 2 * 8 * H * (HEADS // 2 + 2 * (KV // 2)) * D
    reduce = ops["attn_all_reduce"]
    assert reduce.category is OpCategory.COMMUNICATION
    assert reduce.comm_bytes == 8 * H * B16


def test_attended_pairs_with_context_and_window() -> None:
    assert attended_pairs(1, 100, None) == 100
    assert attended_pairs(4, 10, None) == 7 + 8 + 9 + 10
    assert attended_pairs(4, 10, 8) == 7 + 8 + 8 + 8
    assert attended_pairs(4, 10, 5) == 4 * 5


def test_memory_known_answers() -> None:
    device = get_device("NVIDIA_H200_SXM_141G")
    llama = get_model("meta-llama/Llama-3.1-70B")
    request = ForwardShape(is_decode=True, concurrency=2, query_len=1, seq_len=200)
    tp1 = ModelRunner(llama, device)
    # 200 tokens round up to 2 blocks of 128: 256 tokens x 327,680 bytes x 2 requests.
    assert tp1.kv_cache_bytes(2, 200) == 2 * 256 * 327_680
    tp8 = ModelRunner(llama, device, ParallelLayout(tp=8))
    assert tp8.kv_cache_bytes(2, 200) == 2 * 256 * 327_680 / 8
    memory = tp1.memory(request)
    assert memory.weights_gb == pytest.approx(2 * llama.num_params / 1e9, rel=1e-6)
    assert memory.reserved_gb == 10.0
    total = memory.weights_gb + memory.kv_cache_gb + memory.activation_gb + memory.reserved_gb
    assert memory.available_gb == pytest.approx(memory.capacity_gb - total)
    assert memory.available_gb < 0  # 141 GB cannot hold 141 GB of bf16 weights plus reserve
    fp8 = ModelRunner(llama, device, quantization=parse_quantization("FP8"))
    assert fp8.memory(request).weights_gb < 0.55 * memory.weights_gb


def test_mla_kv_cache_is_replicated_over_tp() -> None:
    model = get_model("deepseek-ai/DeepSeek-V3")
    device = get_device("NVIDIA_H200_SXM_141G")
    quant = parse_quantization("FP8")
    for tp in (1, 8):
        runner = ModelRunner(model, device, ParallelLayout(tp=tp), quant)
        assert runner.kv_cache_bytes(1, 128) == 128 * 61 * 576 * 2


def test_expert_parallel_splits_expert_weights() -> None:
    model = get_model("deepseek-ai/DeepSeek-V3")
    device = get_device("NVIDIA_H200_SXM_141G")
    quant = parse_quantization("FP8")
    tp8 = ModelRunner(model, device, ParallelLayout(tp=8), quant)
    ep32 = ModelRunner(model, device, ParallelLayout(tp=8, dp=4, ep=32), quant)
    assert ep32.weights_bytes() < tp8.weights_bytes()
    request = ForwardShape(is_decode=True, concurrency=64, query_len=1, seq_len=2048)
    names = {op.name for op in ep32.run_inference(request).breakdown.ops}
    assert {"moe_dispatch", "moe_combine", "q_absorb", "v_up"} <= names


def test_experts_tensor_parallel_over_attention_dp_ranks() -> None:
    """Attention DP8 with every expert split over the 8 ranks (``moe_over_dp``): each rank
    holds the expert weights expert parallelism over 8 would (1/8 of the experts' bytes), the
    tokens of all 8 replicas meet in the experts (all-gather before, reduce-scatter after, no
    all-to-all), and the routed work per rank matches DEP8's under uniform routing."""
    model = get_model("deepseek-ai/DeepSeek-V3")
    device = get_device("NVIDIA_B200_SXM_180G")
    quant = parse_quantization("FP8")
    over_dp = ModelRunner(model, device, ParallelLayout(tp=1, dp=8, moe_over_dp=True), quant)
    dep8 = ModelRunner(model, device, ParallelLayout(tp=1, dp=8, ep=8), quant)
    replicas = ModelRunner(model, device, ParallelLayout(tp=1, dp=8), quant)
    assert over_dp.plan.moe_tp == 8 and over_dp.plan.moe_group_size == 8
    assert over_dp.weights_bytes() == pytest.approx(dep8.weights_bytes())
    assert over_dp.weights_bytes() < replicas.weights_bytes()
    request = ForwardShape(is_decode=True, concurrency=16, query_len=1, seq_len=2048)
    names = {op.name for op in over_dp.run_inference(request).breakdown.ops}
    assert {"moe_all_gather", "moe_reduce_scatter"} <= names
    assert not {"moe_dispatch", "moe_combine"} & names
    with pytest.raises(InvalidParameterError, match="moe_over_dp"):
        ParallelLayout(tp=1, dp=8, ep=8, moe_over_dp=True)


def test_fallback_is_reported() -> None:
    runner = ModelRunner(
        get_model("Qwen/Qwen3-8B"),
        get_device("NVIDIA_A100_SXM_80G"),
        quantization=parse_quantization("FP8", "FP8"),
    )
    result = runner.run_inference(
        ForwardShape(is_decode=False, concurrency=1, query_len=16, seq_len=16)
    )
    assert any("fp8" in note for note in result.notes)
