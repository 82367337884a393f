"""Speculative decoding on a model without MTP layers drafts with a one-layer EAGLE-3 head."""

from __future__ import annotations

import pytest

from app.core.catalog import get_device, get_model
from app.core.cost import ForwardShape
from app.core.parallel import ParallelLayout
from app.core.runner import ModelRunner
from app.core.runner.plan import EAGLE3_DRAFT_VOCAB, EAGLE3_FC_INPUTS

QWEN = "Qwen/Qwen3-32B"  # no MTP layers
DEVICE = "ATLAS_800_A2_376T_64G"
DECODE = ForwardShape(is_decode=True, concurrency=64, query_len=4, seq_len=4096)


def _runner(drafts: int, tp: int = 4) -> ModelRunner:
    return ModelRunner(
        get_model(QWEN), get_device(DEVICE), ParallelLayout(tp=tp), num_mtp_tokens=drafts
    )


def test_drafts_cost_the_eagle3_head() -> None:
    plain = _runner(0).run_inference(DECODE)
    drafted = _runner(3).run_inference(DECODE)
    assert drafted.latency_ms > plain.latency_ms
    names = [op.name for op in drafted.breakdown.ops if op.scope == "eagle3"]
    assert names.count("eagle3_fc") == 1 and "eagle3_lm_head" in names
    heads = [op for op in drafted.breakdown.ops if op.name == "eagle3_lm_head"]
    assert heads and all(op.count == 3 for op in heads)  # one per draft token
    # Each extra draft token costs one more pass of the head.
    two = _runner(3).run_inference(DECODE, mtp_draft_tokens=2).latency_ms
    assert plain.latency_ms < two < drafted.latency_ms
    assert "EAGLE-3" in " ".join(drafted.notes)


def test_eagle3_head_weights_and_kv() -> None:
    model = get_model(QWEN)
    h = model.hidden_size
    qkv = (model.num_heads + 2 * model.num_kv_heads) * model.head_dim
    extra_params = (
        model.attention_params_per_layer
        + EAGLE3_FC_INPUTS * h * h
        + h * qkv
        + model.dense_mlp_params_per_layer
        + h * EAGLE3_DRAFT_VOCAB
        + model.norm_params_per_layer
    )
    plain, drafted = _runner(0, tp=1), _runner(2, tp=1)
    assert drafted.weights_bytes() - plain.weights_bytes() == pytest.approx(
        2 * extra_params, rel=0.01
    )
    # One more layer of KV per token.
    per_layer = plain.kv_cache_bytes(1, 4096) / model.num_layers
    assert drafted.kv_cache_bytes(1, 4096) == pytest.approx(
        plain.kv_cache_bytes(1, 4096) + per_layer
    )
