"""The v2 validation models and Blackwell Ultra devices (issue 12's catalog part).

Numbers are checked against the shipped config.json files (shared/model_configs/SOURCES.md)
and hardware_specs.csv; refusals must name the architecture feature that is not modelled
(Qwen3.5's linear attention is modelled now: tests/unit/catalog/test_linear_attention.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.core.catalog import get_device, get_model, model_names
from app.core.catalog.architecture import AttentionKind, FfnKind
from app.core.catalog.hf_config import model_from_config
from app.core.catalog.models import CONFIG_DIR
from app.core.errors import UnsupportedError

GIB = 1024**3


def _config(file_name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFIG_DIR / file_name).read_text(encoding="utf-8"))
    return data


def test_kimi_k25_reads_its_language_model_from_text_config() -> None:
    model = get_model("moonshotai/Kimi-K2.5")
    text = _config("kimi-k2.5.json")["text_config"]
    assert model.model_type == "kimi_k2"
    assert model.attention is AttentionKind.MLA and model.mla is not None
    assert model.mla.kv_lora_rank == text["kv_lora_rank"] == 512
    assert model.moe is not None and model.moe.num_experts == 384
    assert model.moe.experts_per_token == 8
    # first_k_dense_replace = 1: one dense layer, 60 MoE layers.
    assert model.num_dense_layers == 1 and model.num_moe_layers == 60
    # The INT4 expert checkpoint is compressed-tensors (its own quantization_config).
    assert model.native_quantization == "compressed-tensors"
    # Same decoder as Kimi-K2 (the vision tower, ~0.4 B parameters, is not counted).
    k2 = get_model("moonshotai/Kimi-K2-Instruct")
    assert model.num_params == k2.num_params
    assert model.kv_bytes_per_token(2.0) == k2.kv_bytes_per_token(2.0)


def test_text_config_inherits_the_wrapper_quantization() -> None:
    text = _config("llama3.1-8b.json")
    text.pop("quantization_config", None)
    wrapped = {
        "model_type": "some_vlm",
        "quantization_config": {"quant_method": "fp8"},
        "text_config": text,
    }
    assert model_from_config(wrapped).native_quantization == "fp8"


def test_minimax_m25_partial_rotary_qk_norm_and_experts() -> None:
    model = get_model("MiniMaxAI/MiniMax-M2.5")
    assert model.model_type == "minimax_m2"
    assert model.rotary_dim == 64 and model.head_dim == 128
    assert model.qk_norm
    assert model.moe is not None
    assert (model.moe.num_experts, model.moe.experts_per_token) == (256, 8)
    assert model.moe.expert_intermediate_size == 1536
    assert model.num_moe_layers == 62 and model.num_dense_layers == 0
    assert model.native_quantization == "fp8"
    # MiniMax publishes 230 B total and 10 B activated parameters (without embeddings).
    assert 225e9 < model.num_params < 232e9
    assert 9.5e9 < model.num_active_params - model.embedding_params - model.lm_head_params < 10.5e9


def test_rotary_dim_defaults_to_the_head_dim() -> None:
    model = get_model("Qwen/Qwen3-32B")
    assert model.rotary_dim == model.head_dim == 128


def test_the_new_models_are_listed() -> None:
    names = model_names()
    assert "moonshotai/Kimi-K2.5" in names and "MiniMaxAI/MiniMax-M2.5" in names
    # Qwen3.5's Gated DeltaNet layers (tests/unit/catalog/test_linear_attention) and GLM-5's
    # sparse indexer (test_sparse_indexer) are modelled.
    assert "Qwen/Qwen3.5-397B-A17B" in names and "zai-org/GLM-5" in names
    assert get_model("qwen3.5-397b-a17b").name == "Qwen/Qwen3.5-397B-A17B"


@pytest.mark.parametrize("kind", ["linear_attention", "mamba", "conv"])
def test_any_unknown_layer_type_is_refused(kind: str) -> None:
    config = _config("llama3.1-8b.json")
    layers = config["num_hidden_layers"]
    config["layer_types"] = ["full_attention"] * (layers - 1) + [kind]
    with pytest.raises(UnsupportedError, match=f"1 of {layers} layers"):
        model_from_config(config)


def test_full_and_sliding_layer_types_are_accepted() -> None:
    config = _config("llama3.1-8b.json")
    config["layer_types"] = ["full_attention"] * config["num_hidden_layers"]
    model = model_from_config(config)
    assert all(g.sliding_window is None for g in model.layer_groups)
    assert {g.ffn for g in model.layer_groups} == {FfnKind.DENSE}


def test_an_unsupported_wrapped_type_names_the_wrapper() -> None:
    config = {"model_type": "outer_vlm", "text_config": {"model_type": "inner_lm"}}
    with pytest.raises(UnsupportedError, match="the language model of 'outer_vlm'"):
        model_from_config(config)


@pytest.mark.parametrize(
    ("name", "int8_tops", "fp4_tflops", "visible_mib", "hbm_gb_s", "domain"),
    [
        ("NVIDIA_B300_SXM_288G", 153.5, 14000.0, 275040, 7750.0, 8),
        ("NVIDIA_GB300_288G", 165.0, 15000.0, 284208, 8000.0, 72),
    ],
)
def test_blackwell_ultra_devices(
    name: str,
    int8_tops: float,
    fp4_tflops: float,
    visible_mib: int,
    hbm_gb_s: float,
    domain: int,
) -> None:
    device = get_device(name)
    assert device.peak_int8_tops == int8_tops  # Blackwell Ultra cut dense INT8
    assert device.peak_fp4_tflops == fp4_tflops
    assert device.hbm_capacity_gb == pytest.approx(visible_mib * 2**20 / 1e9)
    assert device.hbm_bandwidth_gb_s == hbm_gb_s
    nvlink, network = device.interconnect
    assert nvlink.max_devices == domain and nvlink.bandwidth_gb_s == 900.0 and nvlink.switched
    assert network.bandwidth_gb_s == 100.0  # 800 Gb/s per GPU


def test_gb200_keeps_its_nvl72_tiers() -> None:
    nvlink, network = get_device("NVIDIA_GB200_186G").interconnect
    assert (nvlink.name, nvlink.max_devices, nvlink.bandwidth_gb_s) == ("nvlink_nvl72", 72, 900.0)
    assert (network.name, network.bandwidth_gb_s) == ("infiniband", 50.0)
