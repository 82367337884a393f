"""Costs of DeepSeek Sparse Attention (GLM-5): the lightning indexer and the top-k MLA.

The dense comparison is the same architecture without its indexer
(``dataclasses.replace(model, sparse_indexer=None)``): the DeepSeek MLA path the runner always had.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from app.core.catalog import get_device, get_model
from app.core.catalog.architecture import ModelArchitecture
from app.core.catalog.quantization import parse_quantization
from app.core.cost import ForwardShape, MixedShape
from app.core.parallel import ParallelLayout
from app.core.runner import ModelRunner
from app.core.runner.layers import attended_pairs
from app.core.runner.ops import OpCost
from app.core.runner.runner import ForwardResult

DEVICE = "NVIDIA_B200_SXM_180G"
TOPK = 2048  # GLM-5's index_topk
LAYERS = 78
LATENT = 512 + 64  # kv_lora_rank + qk_rope_head_dim
INDEXER_KEY_BYTES = 128 + 4  # FP8 key of index_head_dim 128 + one fp32 scale


def _glm5() -> ModelArchitecture:
    return get_model("zai-org/GLM-5")


def _dense(model: ModelArchitecture) -> ModelArchitecture:
    return dataclasses.replace(model, sparse_indexer=None)


def _runner(model: ModelArchitecture, *, kv: str = "DISABLED") -> ModelRunner:
    quant = parse_quantization("FP8", kv)
    return ModelRunner(model, get_device(DEVICE), ParallelLayout(tp=8), quant)


def _decode(seq_len: int, concurrency: int = 8) -> ForwardShape:
    return ForwardShape(is_decode=True, concurrency=concurrency, query_len=1, seq_len=seq_len)


def _prefill(query_len: int, seq_len: int) -> ForwardShape:
    return ForwardShape(is_decode=False, concurrency=1, query_len=query_len, seq_len=seq_len)


def _ops(result: ForwardResult, name: str) -> list[OpCost]:
    return [op for op in result.breakdown.ops if op.name == name]


def _without_indexer(result: ForwardResult) -> list[OpCost]:
    return [op for op in result.breakdown.ops if not op.name.startswith("indexer_")]


def _attention_ms(result: ForwardResult, name: str) -> float:
    return math.fsum(op.total_ms for op in _ops(result, name))


@pytest.mark.parametrize(
    "shape",
    [_decode(1024), _decode(TOPK), _prefill(TOPK, TOPK), _prefill(512, 1536)],
    ids=["decode-1k", "decode-topk", "prefill-topk", "chunk-within-topk"],
)
def test_within_topk_sparse_equals_dense_plus_the_indexer(shape: ForwardShape) -> None:
    model = _glm5()
    sparse = _runner(model).run_inference(shape)
    dense = _runner(_dense(model)).run_inference(shape)
    assert _without_indexer(sparse) == list(dense.breakdown.ops)
    indexer_ms = math.fsum(
        op.total_ms for op in sparse.breakdown.ops if op.name.startswith("indexer_")
    )
    assert indexer_ms > 0
    assert sparse.latency_ms == pytest.approx(dense.latency_ms + indexer_ms, rel=1e-12)


def test_decode_attention_saturates_at_topk() -> None:
    runner = _runner(_glm5())
    at_topk = _ops(runner.run_inference(_decode(TOPK)), "decode_attention")
    for seq_len in (8192, 65536, 131072):
        longer = _ops(runner.run_inference(_decode(seq_len)), "decode_attention")
        assert [op.flops for op in longer] == [op.flops for op in at_topk]
        assert [op.hbm_bytes for op in longer] == [op.hbm_bytes for op in at_topk]


def test_long_context_decode_is_far_below_dense_mla() -> None:
    model = _glm5()
    shape = _decode(65536)
    sparse = _runner(model).run_inference(shape)
    dense = _runner(_dense(model)).run_inference(shape)
    # MLA reads 2048 of 65536 latents: the attention kernel itself drops by far more than 4x.
    assert _attention_ms(sparse, "decode_attention") < _attention_ms(dense, "decode_attention") / 4
    # Even with the indexer scanning all 65536 keys the whole decode step is cheaper.
    assert sparse.latency_ms < 0.85 * dense.latency_ms


def test_indexer_scans_the_whole_context_in_decode() -> None:
    runner = _runner(_glm5())
    short, long = (_ops(runner.run_inference(_decode(n)), "indexer_logits") for n in (4096, 65536))
    assert long[0].hbm_bytes > 10 * short[0].hbm_bytes  # O(context), unlike the sparse MLA
    concurrency, heads, head_dim = 8, 32, 128
    # One FP8 key (+ scale) per cached token read, one written; every (query, key) pair scored
    # by 32 heads of 128 and its fp32 logit written.
    op = long[0]
    keys = concurrency * 65536 * INDEXER_KEY_BYTES + concurrency * INDEXER_KEY_BYTES
    queries = concurrency * heads * (head_dim + 4)
    assert op.hbm_bytes == pytest.approx(keys + queries + concurrency * 65536 * 4)
    assert op.flops == pytest.approx(concurrency * 65536 * heads * (2 * head_dim + 3))


def test_prefill_queries_attend_to_at_most_topk_keys() -> None:
    model = _glm5()
    shape = _prefill(8192, 8192)
    sparse = _ops(_runner(model).run_inference(shape), "flash_attention")[0]
    dense = _ops(_runner(_dense(model)).run_inference(shape), "flash_attention")[0]
    # Query i attends to min(i, topk) keys: the pairs of a 2048-token sliding window.
    assert sparse.flops / dense.flops == pytest.approx(
        attended_pairs(8192, 8192, TOPK) / attended_pairs(8192, 8192, None)
    )
    assert sparse.flops < dense.flops / 2


def test_indexer_cost_is_not_split_over_tensor_parallel_ranks() -> None:
    model = _glm5()
    quant = parse_quantization("FP8")
    shape = _decode(32768)
    by_tp = {
        tp: _ops(
            ModelRunner(model, get_device(DEVICE), ParallelLayout(tp=tp), quant).run_inference(
                shape
            ),
            "indexer_q_proj",
        )[0]
        for tp in (1, 8)
    }
    assert by_tp[1].flops == by_tp[8].flops  # replicated, as the engines' ReplicatedLinear


def test_mixed_step_runs_the_indexer_per_part() -> None:
    runner = _runner(_glm5())
    mixed = MixedShape(prefill=_prefill(2048, 8192), decode=_decode(16384, 16))
    result = runner.run_mixed(mixed)
    assert len(_ops(result, "indexer_logits")) == 2 * len(_ops(result, "indexer_q_proj"))


def test_mtp_draft_layer_has_its_indexer() -> None:
    model = _glm5()
    result = _runner(model).run_inference(_decode(8192), mtp_draft_tokens=1)
    assert any(op.scope == "mtp" for op in _ops(result, "indexer_logits"))


@pytest.mark.parametrize("kv", ["DISABLED", "FP8"])
def test_kv_cache_holds_the_indexer_keys(kv: str) -> None:
    model = _glm5()
    kv_element_bytes = 2.0 if kv == "DISABLED" else 1.0
    runner = _runner(model, kv=kv)
    tokens = 4096  # whole KV blocks, no rounding
    # MLA's latent is replicated over the TP ranks, and so is the indexer's key cache.
    per_token = LAYERS * (LATENT * kv_element_bytes + INDEXER_KEY_BYTES)
    assert runner.kv_cache_bytes(1, tokens) == pytest.approx(tokens * per_token)
    dense = _runner(_dense(model), kv=kv)
    assert runner.kv_cache_bytes(1, tokens) - dense.kv_cache_bytes(1, tokens) == pytest.approx(
        tokens * LAYERS * INDEXER_KEY_BYTES
    )


def test_indexer_weights_are_on_every_rank() -> None:
    model = _glm5()
    sparse, dense = _runner(model), _runner(_dense(model))
    # wq_b (2048 -> 32 x 128) and wk (6144 -> 128) in FP8, weights_proj (6144 -> 32) and
    # k_norm (2 x 128) in 16 bit, on each of the 78 layers of every TP rank.
    per_layer = (2048 * 32 * 128 + 6144 * 128) * 1.0 + (6144 * 32 + 2 * 128) * 2.0
    assert sparse.weights_bytes() - dense.weights_bytes() == pytest.approx(LAYERS * per_layer)


def test_dense_deepseek_has_no_indexer_ops() -> None:
    model = get_model("deepseek-ai/DeepSeek-R1")
    result = _runner(model).run_inference(_decode(65536))
    assert not [op for op in result.breakdown.ops if op.name.startswith("indexer_")]
