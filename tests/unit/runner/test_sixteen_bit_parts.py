"""A checkpoint's 16-bit parts: what its quantization_config leaves unquantized stays 16-bit.

gpt-oss keeps ``self_attn`` in BF16 beside its MXFP4 experts; Kimi-K2.5 keeps attention, the
shared experts and the dense MLPs in BF16 beside its INT4 (W4A16) experts. Only a run at the
checkpoint's own quantization has those parts; another action is another checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from app.core.catalog import get_device, get_model
from app.core.catalog.architecture import (
    SIXTEEN_BIT_ATTENTION,
    SIXTEEN_BIT_DENSE_MLP,
    SIXTEEN_BIT_SHARED_EXPERTS,
    ModelArchitecture,
)
from app.core.catalog.hf_config import model_from_config
from app.core.catalog.models import CONFIG_DIR
from app.core.catalog.quantization import BYTES_16BIT, BYTES_FP4_MX, DType, parse_quantization
from app.core.cost import ForwardShape
from app.core.errors import InvalidParameterError
from app.core.parallel import ParallelLayout
from app.core.runner import ModelRunner
from app.core.runner.plan import GEMM_INPUT_BYTES

GPT_OSS = "openai/gpt-oss-120b"
KIMI = "moonshotai/Kimi-K2.5"
B200 = "NVIDIA_B200_SXM_180G"
PREFILL = ForwardShape(is_decode=False, concurrency=1, query_len=2048, seq_len=2048)


def _config(file_name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFIG_DIR / file_name).read_text(encoding="utf-8"))
    return data


def _runner(model: ModelArchitecture, linear: str, tp: int = 1) -> ModelRunner:
    return ModelRunner(
        model, get_device(B200), ParallelLayout(tp=tp), parse_quantization(linear, None)
    )


def _op(runner: ModelRunner, name: str) -> Any:
    return next(op for op in runner.run_inference(PREFILL).breakdown.ops if op.name == name)


def _notes(runner: ModelRunner) -> str:
    return " ".join(runner.run_inference(PREFILL).notes)


def test_the_shipped_checkpoints_name_their_parts() -> None:
    gpt_oss, kimi = get_model(GPT_OSS), get_model(KIMI)
    assert (gpt_oss.native_linear, gpt_oss.sixteen_bit_parts) == (
        "MXFP4",
        frozenset({SIXTEEN_BIT_ATTENTION}),
    )
    assert kimi.native_linear == "W4A16"
    assert kimi.sixteen_bit_parts == {
        SIXTEEN_BIT_ATTENTION,
        SIXTEEN_BIT_SHARED_EXPERTS,
        SIXTEEN_BIT_DENSE_MLP,
    }
    # DeepSeek's block-FP8 checkpoint quantizes every linear layer; MiniMax lists only its
    # router gate, its bias and the LM head, which are 16-bit in every run anyway.
    for name in ("deepseek-ai/DeepSeek-V3", "MiniMaxAI/MiniMax-M2.5"):
        model = get_model(name)
        assert model.native_linear == "FP8"
        assert model.sixteen_bit_parts == frozenset() and model.unmodelled_sixteen_bit == ()
    assert get_model("Qwen/Qwen3-32B").native_linear is None  # a 16-bit checkpoint


def test_gpt_oss_attention_is_bf16_only_at_its_own_mxfp4() -> None:
    model = get_model(GPT_OSS)
    native, requantized = _runner(model, "MXFP4"), _runner(model, "FP8")
    as_if_all = _runner(dataclasses.replace(model, sixteen_bit_parts=frozenset()), "MXFP4")
    h, d = model.hidden_size, model.head_dim
    qkv_out = (model.num_heads + 2 * model.num_kv_heads) * d
    # The 16-bit weights (and 16-bit inputs) the attention projections read; the experts keep
    # their MXFP4 bytes.
    inputs = PREFILL.query_len * h * (BYTES_16BIT - GEMM_INPUT_BYTES[DType.FP4])
    assert _op(native, "qkv_proj").hbm_bytes - _op(as_if_all, "qkv_proj").hbm_bytes == (
        pytest.approx(h * qkv_out * (BYTES_16BIT - BYTES_FP4_MX) + inputs)
    )
    assert _op(native, "experts_up").hbm_bytes == _op(as_if_all, "experts_up").hbm_bytes
    # ... at the BF16 rate: a 2048-token projection is compute-bound, slower than at FP4.
    assert _op(native, "qkv_proj").time_ms > 1.5 * _op(as_if_all, "qkv_proj").time_ms
    attention_params = model.num_layers * (h * qkv_out + model.num_heads * d * h)
    assert native.weights_bytes() - as_if_all.weights_bytes() == pytest.approx(
        attention_params * (BYTES_16BIT - BYTES_FP4_MX), rel=0.01
    )
    assert "MXFP4 checkpoint: attention stay 16-bit" in _notes(native)
    # FP8 is another checkpoint, quantized throughout: no 16-bit attention, no note.
    assert "its quantization_config" not in _notes(requantized)
    assert _op(requantized, "qkv_proj").hbm_bytes < _op(native, "qkv_proj").hbm_bytes


def test_kimi_keeps_shared_experts_and_dense_mlp_in_bf16() -> None:
    model = get_model(KIMI)
    native = _runner(model, "W4A16", tp=8)
    as_if_all = _runner(dataclasses.replace(model, sixteen_bit_parts=frozenset()), "W4A16", tp=8)
    for name in ("shared_expert_up", "mlp_up", "o_proj"):
        assert _op(native, name).hbm_bytes > _op(as_if_all, name).hbm_bytes, name
    assert _op(native, "experts_up").hbm_bytes == _op(as_if_all, "experts_up").hbm_bytes
    assert native.weights_bytes() > as_if_all.weights_bytes()


def test_an_entry_without_a_part_is_said_in_the_notes() -> None:
    config = _config("gpt-oss-120b.json")
    config["quantization_config"]["modules_to_not_convert"] = [
        "model.layers.*.self_attn",
        "model.layers.3.mlp.experts.7",
    ]
    model = model_from_config(config, "custom/gpt-oss")
    assert model.unmodelled_sixteen_bit == ("model.layers.3.mlp.experts.7",)
    notes = _notes(_runner(model, "MXFP4"))
    assert "model.layers.3.mlp.experts.7 in 16 bits: modelled at MXFP4" in notes


def test_activation_quantized_groups_are_not_w4a16_and_parts_are_checked() -> None:
    config = _config("kimi-k2.5.json")
    groups = config["text_config"]["quantization_config"]["config_groups"]
    groups["group_0"]["input_activations"] = {"num_bits": 8, "type": "float"}
    model = model_from_config(config, "custom/kimi-w4a8")
    assert model.native_linear is None  # not W4A16: its 16-bit list applies to no action
    assert _runner(model, "W4A16", tp=8).run_inference(PREFILL).latency_ms > 0
    with pytest.raises(InvalidParameterError, match="sixteen_bit_parts"):
        dataclasses.replace(get_model(KIMI), sixteen_bit_parts=frozenset({"experts"}))
