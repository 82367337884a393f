"""Catalog models: every built-in config loads; known parameter and KV-cache answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.catalog import (
    SUPPORTED_MODEL_TYPES,
    AttentionKind,
    FfnKind,
    get_model,
    list_models,
    model_from_config,
    model_names,
)
from app.core.errors import InvalidParameterError, UnknownModelError, UnsupportedError


@pytest.mark.parametrize("name", model_names())
def test_every_builtin_model_loads(name: str) -> None:
    model = get_model(name)
    assert model.name == name
    assert model.num_params > 0
    assert sum(g.count for g in model.layer_groups) == model.num_layers
    assert model.to_dict()["num_params"] == model.num_params


def test_qwen3_32b_has_32_8e9_parameters() -> None:
    # Qwen3-32B model card: 32.8B parameters (31.2B non-embedding).
    assert get_model("Qwen/Qwen3-32B").num_params == pytest.approx(32.8e9, rel=0.005)


def test_llama_3_1_70b_kv_bytes_per_token_bf16() -> None:
    # 80 layers x (K + V) x 8 KV heads x 128 dims x 2 bytes.
    assert get_model("meta-llama/Llama-3.1-70B").kv_bytes_per_token(2) == 327_680


def test_deepseek_v3_mla_kv_bytes_per_token() -> None:
    model = get_model("deepseek-ai/DeepSeek-V3")
    assert model.attention is AttentionKind.MLA
    # 61 layers x (512 latent + 64 RoPE key) x 2 bytes.
    assert model.kv_bytes_per_token(2) == 61 * 576 * 2


def test_deepseek_v3_structure() -> None:
    model = get_model("deepseek-ai/DeepSeek-R1")
    groups = {(g.ffn, g.count) for g in model.layer_groups}
    assert groups == {(FfnKind.DENSE, 3), (FfnKind.MOE, 58)}
    assert model.num_mtp_layers == 1
    assert model.num_params == pytest.approx(671e9, rel=0.01)
    assert model.num_active_params == pytest.approx(37e9, rel=0.03)


def test_moe_and_parallel_models() -> None:
    assert get_model("mistralai/Mixtral-8x7B-v0.1").num_params == pytest.approx(46.7e9, rel=0.01)
    assert get_model("Qwen/Qwen3-235B-A22B").num_active_params == pytest.approx(22e9, rel=0.02)
    falcon = get_model("tiiuae/falcon-180B")
    assert falcon.parallel_attention and falcon.num_kv_heads == 8 and not falcon.mlp_gated
    gptj = get_model("EleutherAI/gpt-j-6b")
    assert gptj.parallel_attention and gptj.rotary_dim == 64
    assert gptj.num_params == pytest.approx(6.05e9, rel=0.01)
    oss = get_model("openai/gpt-oss-120b")
    assert {g.sliding_window for g in oss.layer_groups} == {128, None}


@pytest.mark.parametrize(
    ("alias", "expected"),
    [
        ("qwen/qwen3-32b", "Qwen/Qwen3-32B"),
        ("Qwen/Qwen3-32B-FP8", "Qwen/Qwen3-32B"),
        ("Qwen/Qwen3-8B-Base", "Qwen/Qwen3-8B"),
        ("meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Llama-3.1-70B"),
        ("META-LLAMA/LLAMA-3.1-8B", "meta-llama/Llama-3.1-8B"),
        ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-R1"),
        ("qwen3_dense_14b", "Qwen/Qwen3-14B"),
        ("Qwen3-235B-A22B-Instruct-2507", "Qwen/Qwen3-235B-A22B"),
    ],
)
def test_names_resolve_case_insensitively_with_variants(alias: str, expected: str) -> None:
    assert get_model(alias).name == expected


def test_unknown_model_lists_valid_names() -> None:
    with pytest.raises(UnknownModelError) as info:
        get_model("no-such/model")
    message = str(info.value)
    assert "\n" not in message
    assert "Qwen/Qwen3-32B" in message and "deepseek-ai/DeepSeek-V3" in message


def test_unsupported_model_type_lists_supported() -> None:
    with pytest.raises(UnsupportedError) as info:
        model_from_config({"model_type": "mamba", "hidden_size": 8})
    for model_type in SUPPORTED_MODEL_TYPES:
        assert model_type in str(info.value)


def test_missing_field_is_invalid_parameter() -> None:
    with pytest.raises(InvalidParameterError):
        model_from_config({"model_type": "llama", "hidden_size": 64})


def test_inline_config_and_local_directory(tmp_path: Path) -> None:
    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "vocab_size": 100,
        "tie_word_embeddings": False,
    }
    inline = model_from_config(config, name="tiny")
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    local = get_model(str(tmp_path))
    assert local.num_params == inline.num_params
    # 2 x (attention 64x(64+64) + 64x64, MLP 3x64x128, norms 2x64) + embed + head + final norm
    per_layer = 64 * (64 + 64) + 64 * 64 + 3 * 64 * 128 + 2 * 64
    assert inline.num_params == 2 * per_layer + 2 * 100 * 64 + 64


def test_list_models_matches_names() -> None:
    assert [m.name for m in list_models()] == model_names()
