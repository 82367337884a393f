"""Qwen3.5's hybrid layers: Gated DeltaNet (linear attention) beside gated full attention.

Sizes are checked against the shipped config.json (shared/model_configs/SOURCES.md); the
parameter counts against the published totals of Qwen/Qwen3.5-397B-A17B (its name and model
card: 397 B parameters, 17 B activated per token).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.core.catalog import get_model
from app.core.catalog.architecture import FfnKind, LayerAttention
from app.core.catalog.hf_config import model_from_config
from app.core.catalog.models import CONFIG_DIR
from app.core.errors import InvalidParameterError, UnsupportedError

QWEN35 = "Qwen/Qwen3.5-397B-A17B"
PUBLISHED_TOTAL_PARAMS = 397e9
PUBLISHED_ACTIVE_PARAMS = 17e9
# The published figures are rounded to 1 B; the shared expert's gate (0.25 M) is not counted.
PARAM_TOLERANCE = 0.03


def _text_config() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (CONFIG_DIR / "qwen3.5-397b-a17b.json").read_text(encoding="utf-8")
    )
    return data


def test_layer_groups_follow_layer_types() -> None:
    model = get_model(QWEN35)
    layer_types = _text_config()["text_config"]["layer_types"]
    assert model.model_type == "qwen3_5_moe_text"
    assert model.num_linear_attention_layers == layer_types.count("linear_attention") == 45
    assert model.num_full_attention_layers == layer_types.count("full_attention") == 15
    assert {(g.attention, g.ffn, g.count) for g in model.layer_groups} == {
        (LayerAttention.LINEAR, FfnKind.MOE, 45),
        (LayerAttention.FULL, FfnKind.MOE, 15),
    }
    assert all(g.sliding_window is None for g in model.layer_groups)


def test_gated_deltanet_sizes_come_from_the_config() -> None:
    text = _text_config()["text_config"]
    dims = get_model(QWEN35).linear_attention
    assert dims is not None
    assert dims.num_key_heads == text["linear_num_key_heads"] == 16
    assert dims.num_value_heads == text["linear_num_value_heads"] == 64
    assert dims.key_head_dim == text["linear_key_head_dim"] == 128
    assert dims.value_head_dim == text["linear_value_head_dim"] == 128
    assert dims.conv_kernel_size == text["linear_conv_kernel_dim"] == 4
    assert text["mamba_ssm_dtype"] == "float32" and dims.state_bytes_per_element == 4


def test_full_attention_layers_are_gated_partial_rotary_with_qk_norm() -> None:
    model = get_model(QWEN35)
    assert model.attn_output_gate and model.qk_norm
    assert (model.num_heads, model.num_kv_heads, model.head_dim) == (32, 2, 256)
    assert model.rotary_dim == 64  # partial_rotary_factor 0.25 of head_dim 256
    assert model.num_mtp_layers == 1
    assert model.moe is not None
    assert (model.moe.num_experts, model.moe.experts_per_token) == (512, 10)
    assert model.moe.shared_intermediate_size == 1024


def test_linear_attention_parameters_by_hand() -> None:
    """in_proj q,k,v (2 x 2048 + 8192), z (8192), b and a (64 each), conv1d over q,k,v (12288
    channels x 4 taps), A_log and dt_bias (64 each), norm (128), out_proj (8192 x 4096)."""
    h = 4096
    key_dim, value_dim, v_heads = 16 * 128, 64 * 128, 64
    conv = 2 * key_dim + value_dim
    expected = h * (conv + value_dim + 2 * v_heads) + conv * 4 + 2 * v_heads + 128 + value_dim * h
    assert get_model(QWEN35).linear_attention_params_per_layer == expected


def test_full_attention_parameters_count_the_output_gate() -> None:
    h, q_out, kv_out = 4096, 32 * 256, 2 * 2 * 256
    expected = h * (2 * q_out + kv_out) + q_out * h + 2 * 256  # gate doubles q_proj; q/k norms
    assert get_model(QWEN35).attention_params_per_layer == expected


def test_parameter_counts_match_the_published_397b_and_17b() -> None:
    model = get_model(QWEN35)
    assert model.num_params == pytest.approx(PUBLISHED_TOTAL_PARAMS, rel=PARAM_TOLERANCE)
    assert model.num_active_params == pytest.approx(PUBLISHED_ACTIVE_PARAMS, rel=PARAM_TOLERANCE)
    # Without the linear-attention projections the active count would miss ~5.3 B (31 %).
    linear_b = model.num_linear_attention_layers * model.linear_attention_params_per_layer
    assert 5.2e9 < linear_b < 5.4e9


def test_kv_bytes_per_token_count_only_full_attention_layers() -> None:
    model = get_model(QWEN35)
    per_layer = 2 * 2 * 256  # K and V, 2 KV heads of 256
    assert model.kv_elements_per_token_per_layer == per_layer
    assert model.kv_bytes_per_token(2.0) == 15 * per_layer * 2.0


def test_recurrent_state_per_request() -> None:
    model = get_model(QWEN35)
    ssm = 64 * 128 * 128 * 4  # a 128 x 128 fp32 matrix per value head
    conv = 3 * (2 * 16 * 128 + 64 * 128) * 2  # kernel - 1 inputs per conv channel, 16-bit
    assert model.state_bytes(2.0) == 45 * (ssm + conv)
    assert get_model("Qwen/Qwen3-8B").state_bytes(2.0) == 0.0


def test_a_bfloat16_state_halves_the_ssm_state() -> None:
    config = _text_config()
    config["text_config"]["mamba_ssm_dtype"] = "bfloat16"
    dims = model_from_config(config).linear_attention
    assert dims is not None and dims.state_bytes_per_element == 2
    config["text_config"]["mamba_ssm_dtype"] = "float8"
    with pytest.raises(InvalidParameterError, match="mamba_ssm_dtype"):
        model_from_config(config)


def test_layer_types_default_to_the_full_attention_interval() -> None:
    config = _text_config()
    layer_types = config["text_config"].pop("layer_types")
    model = model_from_config(config)
    assert model.layer_groups == get_model(QWEN35).layer_groups
    assert layer_types[3] == "full_attention"  # (i + 1) % full_attention_interval == 0


@pytest.mark.parametrize("kind", ["mamba", "sliding_linear_attention"])
def test_an_unknown_layer_type_in_a_hybrid_is_still_refused(kind: str) -> None:
    config = _text_config()
    config["text_config"]["layer_types"][0] = kind
    with pytest.raises(UnsupportedError, match=f"1 of 60 layers of type '{kind}'"):
        model_from_config(config)


def test_linear_attention_outside_gated_deltanet_types_is_refused() -> None:
    config = json.loads((CONFIG_DIR / "llama3.1-8b.json").read_text(encoding="utf-8"))
    config["layer_types"] = ["linear_attention"] + ["full_attention"] * 31
    with pytest.raises(UnsupportedError, match="'linear_attention'"):
        model_from_config(config)


def test_softmax_only_documents_are_unchanged() -> None:
    """The new fields stay out of older architectures' documents (the runner identity, a
    cache key, hashes them)."""
    doc = get_model("deepseek-ai/DeepSeek-V3").to_dict()
    assert "linear_attention" not in doc and "attn_output_gate" not in doc
    assert all(set(g) == {"ffn", "sliding_window", "count"} for g in doc["layer_groups"])
    qwen = get_model(QWEN35).to_dict()
    assert qwen["linear_attention"]["num_value_heads"] == 64 and qwen["attn_output_gate"]
    assert [g.get("attention") for g in qwen["layer_groups"]] == ["linear_attention", None]
