"""Models of the published Ascend results (ascend_serving_points.csv) that the catalog ships:
InternLM2-20B, Qwen2.5-32B (QwQ-32B's architecture), Qwen3.5-4B (a dense Gated DeltaNet
hybrid), the older names of Meta's Llama 3.1 repositories and later checkpoints of shipped
architectures (DeepSeek-V3.1, Kimi-K2.6), Hunyuan-A13B (HunYuan MoE with a shared MLP) and
Qwen3-Omni-30B-A3B-Thinking (a Qwen3-MoE thinker under ``thinker_config``).

Known answers come from the shipped configs and the public figures cited in
model_configs/SOURCES.md.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.core.catalog import get_model, model_from_config, model_names, resolve_model_name
from app.core.catalog.architecture import FfnKind, LayerAttention
from app.core.catalog.models import CONFIG_DIR, MODEL_ALIASES
from app.core.errors import UnsupportedError


def _config(file_name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFIG_DIR / file_name).read_text(encoding="utf-8"))
    return data


def test_internlm2_20b_is_a_dense_gqa_decoder_of_its_checkpoint_size() -> None:
    model = get_model("internlm/internlm2-20b")
    assert model.model_type == "internlm2" and not model.is_moe
    assert (model.num_layers, model.num_heads, model.num_kv_heads, model.head_dim) == (
        48,
        48,
        8,
        128,
    )
    assert not model.attention_bias and not model.tie_word_embeddings
    # vLLM-Ascend's InternLM2-20B-Chat tutorial: "approximately 39.7 GB" of BF16 weights.
    assert abs(model.num_params * 2 / 39.7e9 - 1) < 0.01
    assert model.max_context_tokens == 32768


def test_internlm2_reads_its_bias_flag() -> None:
    config = {**_config("internlm2-20b.json"), "bias": True}
    assert model_from_config(config).attention_bias


def test_qwen25_32b_matches_the_published_parameter_counts() -> None:
    model = get_model("Qwen/Qwen2.5-32B")
    assert model.attention_bias  # Qwen2: bias on q, k and v
    # The model card: 32.5 B parameters, 31.0 B without the embeddings.
    assert abs(model.num_params / 32.5e9 - 1) < 0.01
    non_embedding = model.num_params - model.embedding_params - model.lm_head_params
    assert abs(non_embedding / 31.0e9 - 1) < 0.01


def test_qwen25_14b_instruct_matches_its_published_parameter_count() -> None:
    model = get_model("Qwen/Qwen2.5-14B-Instruct")
    assert model.model_type == "qwen2" and model.attention_bias and not model.is_moe
    assert (model.num_layers, model.num_heads, model.num_kv_heads, model.head_dim) == (
        48,
        40,
        8,
        128,
    )
    # Hugging Face's safetensors count for Qwen/Qwen2.5-14B (the Instruct checkpoint's base,
    # same shapes): 14.77 B (OALL/requests_v2 "params": 14.77).
    assert abs(model.num_params / 14.77e9 - 1) < 0.01
    assert model.max_context_tokens == 32768


@pytest.mark.parametrize(
    ("name", "hf_id"),
    [
        ("QwQ-32B", "Qwen/Qwen2.5-32B"),
        ("Qwen/QwQ-32B", "Qwen/Qwen2.5-32B"),
        ("InternLM2-20B-Chat", "internlm/internlm2-20b"),
        ("internlm/internlm2-chat-20b", "internlm/internlm2-20b"),
        ("Meta-Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B"),
        ("meta-llama/Meta-Llama-3.1-70B-Instruct", "meta-llama/Llama-3.1-70B"),
        ("Qwen3.5-4B", "Qwen/Qwen3.5-4B"),
        ("DeepSeek-V3.1-W8A8", "deepseek-ai/DeepSeek-V3"),
        ("Kimi-K2.6", "moonshotai/Kimi-K2.5"),
        ("Qwen/Qwen2.5-14B-Instruct", "Qwen/Qwen2.5-14B-Instruct"),
    ],
)
def test_names_resolve_to_the_shipped_architecture(name: str, hf_id: str) -> None:
    assert resolve_model_name(name) == hf_id
    assert get_model(name) is get_model(hf_id)


def test_aliases_point_at_listed_models_and_are_not_listed_themselves() -> None:
    names = model_names()
    assert set(MODEL_ALIASES.values()) <= set(names)
    assert not set(MODEL_ALIASES) & set(names)


def test_qwen35_4b_is_a_dense_gated_deltanet_hybrid() -> None:
    model = get_model("Qwen/Qwen3.5-4B")
    text = _config("qwen3.5-4b.json")["text_config"]
    assert model.model_type == "qwen3_5_text" and model.moe is None
    assert model.num_linear_attention_layers == 24 and model.num_full_attention_layers == 8
    assert all(g.ffn is FfnKind.DENSE for g in model.layer_groups)
    assert {g.attention for g in model.layer_groups} == {
        LayerAttention.LINEAR,
        LayerAttention.FULL,
    }
    assert model.intermediate_size == text["intermediate_size"] == 9216
    assert model.attn_output_gate and model.qk_norm
    assert model.rotary_dim == 64  # head_dim 256 x partial_rotary_factor 0.25
    assert model.num_mtp_layers == 1 and model.tie_word_embeddings
    dims = model.linear_attention
    assert dims is not None
    # The checkpoint's conv1d has 8192 channels over a 4096-wide value path (q, k: 16 x 128
    # each; v: 32 x 128).
    assert (dims.conv_dim, dims.value_dim) == (8192, 4096)
    # KV cache only in the 8 full-attention layers: K and V of 4 heads x 256 per token.
    assert model.kv_bytes_per_token(2.0) == 8 * 2 * 4 * 256 * 2
    # fp32 recurrent state: 32 heads x 128 x 128 per layer, plus the bf16 conv state.
    assert model.state_bytes(2.0) == 24 * (32 * 128 * 128 * 4 + 3 * 8192 * 2)


def test_a_dense_hybrid_with_an_unknown_layer_type_is_refused() -> None:
    config = _config("qwen3.5-4b.json")
    config["text_config"]["layer_types"] = ["mamba"] * 32
    with pytest.raises(UnsupportedError, match="mamba"):
        model_from_config(config)


def test_hunyuan_a13b_matches_its_published_sizes() -> None:
    model = get_model("tencent/Hunyuan-A13B-Instruct")
    moe = model.moe
    assert model.model_type == "hunyuan" and moe is not None
    assert (model.num_layers, model.num_heads, model.num_kv_heads, model.head_dim) == (
        32,
        32,
        8,
        128,
    )
    # 64 routed experts of 3072, 8 per token, beside one shared MLP of intermediate_size.
    assert (moe.num_experts, moe.experts_per_token, moe.expert_intermediate_size) == (64, 8, 3072)
    assert (moe.num_shared_experts, moe.shared_intermediate_size) == (1, 3072)
    assert model.qk_norm and model.tie_word_embeddings and model.max_context_tokens == 32768
    # The model's name and Hugging Face's collection: 80 B parameters, 13 B active.
    assert abs(model.num_params / 80e9 - 1) < 0.01
    assert abs(model.num_active_params / 13e9 - 1) < 0.05
    assert resolve_model_name("Hunyuan-A13B-Instruct") == "tencent/Hunyuan-A13B-Instruct"


@pytest.mark.parametrize(
    ("change", "feature"),
    [
        ({"use_cla": True}, "cross-layer attention"),
        ({"moe_layer_num_skipped": 1}, "moe_layer_num_skipped"),
        ({"moe_topk": [8] * 31 + [2]}, "moe_topk differs between layers"),
        ({"num_experts": 1}, "dense HunYuan"),
    ],
)
def test_hunyuan_features_the_runner_does_not_cost_are_refused(
    change: dict[str, Any], feature: str
) -> None:
    with pytest.raises(UnsupportedError, match=feature):
        model_from_config({**_config("hunyuan-a13b-instruct.json"), **change})


def test_qwen3_omni_thinking_reads_the_thinkers_qwen3_moe_decoder() -> None:
    model = get_model("Qwen3-Omni-30B-A3B-Thinking")
    qwen3_moe = get_model("Qwen/Qwen3-30B-A3B")
    moe = model.moe
    assert model.model_type == "qwen3_omni_moe_text" and moe is not None
    # The thinker's decoder is Qwen3-30B-A3B's (48 layers, 128 experts of 768, 8 per token,
    # 32 / 4 heads of 128, q / k norms) with its own vocabulary (152,064) and context.
    assert moe == qwen3_moe.moe and model.layer_groups == qwen3_moe.layer_groups
    assert (model.num_heads, model.num_kv_heads, model.head_dim, model.qk_norm) == (
        qwen3_moe.num_heads,
        qwen3_moe.num_kv_heads,
        qwen3_moe.head_dim,
        True,
    )
    assert model.vocab_size == 152064 and not model.tie_word_embeddings
    assert model.max_context_tokens == 65536
