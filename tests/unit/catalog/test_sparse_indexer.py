"""DeepSeek Sparse Attention's lightning indexer in the catalog (GLM-5, DeepSeek-V3.2).

Facts checked against DeepSeek-V3.2-Exp's reference ``inference/model.py`` (``Indexer``: ``wq_b``
from the query latent, ``wk`` from the hidden state, a LayerNorm ``k_norm``, ``weights_proj``;
an FP8 key cache with one fp32 scale per 128 elements) and GLM-5's published sizes: 744 B
parameters (GLM-5 technical report, arXiv 2602.15763, model table) and 754 B in the
Hugging Face checkpoint zai-org/GLM-5, which also holds the MTP layer.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from app.core.catalog import get_model, model_names
from app.core.catalog.architecture import AttentionKind, SparseIndexerDims
from app.core.catalog.hf_config import model_from_config
from app.core.catalog.models import CONFIG_DIR
from app.core.errors import InvalidParameterError, UnsupportedError

BILLION = 1e9
# Published sizes are rounded to whole billions: half a billion either side.
ROUNDING = 0.5 * BILLION
GLM5_PUBLISHED_PARAMS = 744 * BILLION  # technical report: "# Total Parameters 744B"
GLM5_CHECKPOINT_PARAMS = 754 * BILLION  # HF zai-org/GLM-5 safetensors (MTP layer included)
GLM5_PUBLISHED_ACTIVE = 40 * BILLION  # technical report: "# Activated Parameters 40B"
# An FP8 key of 128 elements plus one fp32 scale (vLLM and SGLang allocate the same 132 bytes).
INDEXER_BYTES_128 = 128 + 4


def _config(file_name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFIG_DIR / file_name).read_text(encoding="utf-8"))
    return data


def test_glm5_reads_the_indexer_dims() -> None:
    model = get_model("zai-org/GLM-5")
    assert model.model_type == "glm_moe_dsa"
    assert model.attention is AttentionKind.MLA and model.mla is not None
    assert model.sparse_indexer == SparseIndexerDims(topk=2048, n_heads=32, head_dim=128)
    assert model.mla.q_lora_rank == 2048 and model.mla.qk_nope_head_dim == 192
    assert model.num_dense_layers == 3 and model.num_moe_layers == 75
    assert model.num_mtp_layers == 1


def test_the_zhipuai_spelling_resolves_to_the_catalog_model() -> None:
    # The measured cases name the model "zhipuai/GLM-5"; the catalog id is zai-org's.
    assert get_model("zhipuai/GLM-5") is get_model("zai-org/GLM-5")
    assert "zai-org/GLM-5" in model_names()


def test_glm5_parameter_count_matches_the_published_size() -> None:
    model = get_model("zai-org/GLM-5")
    assert abs(model.num_params - GLM5_PUBLISHED_PARAMS) < ROUNDING
    assert abs(model.num_params + model.mtp_params - GLM5_CHECKPOINT_PARAMS) < ROUNDING
    # Activated parameters without the embedding and lm_head (each 154880 x 6144).
    active = model.num_active_params - model.embedding_params - model.lm_head_params
    assert abs(active - GLM5_PUBLISHED_ACTIVE) < ROUNDING
    # Without the indexer's 9.37 M parameters per layer the count falls outside the rounding.
    dense = dataclasses.replace(model, sparse_indexer=None)
    assert abs(dense.num_params - GLM5_PUBLISHED_PARAMS) > ROUNDING


def test_indexer_parameters_per_layer() -> None:
    ix = SparseIndexerDims(topk=2048, n_heads=32, head_dim=128)
    wq_b = 2048 * 32 * 128  # from the 2048 query latent
    wk = 6144 * 128
    weights_proj = 6144 * 32
    k_norm = 2 * 128  # LayerNorm weight and bias
    assert ix.params(6144, 2048) == wq_b + wk + weights_proj + k_norm == 9_371_904
    model = get_model("zai-org/GLM-5")
    dense = dataclasses.replace(model, sparse_indexer=None)
    assert model.attention_params_per_layer - dense.attention_params_per_layer == 9_371_904


def test_kv_bytes_per_token_include_the_indexer_keys() -> None:
    model = get_model("zai-org/GLM-5")
    assert model.indexer_cache_bytes_per_token_per_layer == INDEXER_BYTES_128
    latent = 512 + 64  # kv_lora_rank + qk_rope_head_dim
    for kv_bytes in (1.0, 2.0):
        # The indexer keys are FP8 whatever the KV-cache dtype.
        assert model.kv_bytes_per_token(kv_bytes) == 78 * (latent * kv_bytes + INDEXER_BYTES_128)
    doc = model.to_dict()
    assert doc["sparse_indexer"] == {"topk": 2048, "n_heads": 32, "head_dim": 128}
    assert doc["indexer_cache_bytes_per_token_per_layer"] == INDEXER_BYTES_128


def test_dense_mla_documents_are_unchanged() -> None:
    doc = get_model("deepseek-ai/DeepSeek-R1").to_dict()
    assert "sparse_indexer" not in doc and "indexer_cache_bytes_per_token_per_layer" not in doc


def test_deepseek_v32_style_config_is_read() -> None:
    # DeepSeek-V3.2-Exp: DeepSeek-V3's layout plus index_n_heads 64, index_head_dim 128, top 2048.
    config = _config("deepseek-r1.json")
    config.update(model_type="deepseek_v32", index_topk=2048, index_n_heads=64, index_head_dim=128)
    model = model_from_config(config)
    base = get_model("deepseek-ai/DeepSeek-R1")
    assert model.sparse_indexer == SparseIndexerDims(topk=2048, n_heads=64, head_dim=128)
    per_layer = 1536 * 64 * 128 + 7168 * 128 + 7168 * 64 + 2 * 128
    assert model.num_params - base.num_params == 61 * per_layer


def test_indexer_on_a_gqa_model_is_refused() -> None:
    config = _config("llama3.1-8b.json")
    config.update(index_topk=2048, index_n_heads=32, index_head_dim=128)
    with pytest.raises(UnsupportedError, match="without multi-head latent attention"):
        model_from_config(config)


@pytest.mark.parametrize(
    ("key", "value"),
    [("index_topk_freq", 4), ("index_topk_pattern", "FFSS"), ("indexer_types", ["full", "shared"])],
)
def test_indexers_shared_across_layers_are_refused(key: str, value: object) -> None:
    config = _config("glm-5.json")
    config[key] = value
    with pytest.raises(UnsupportedError, match=f"shares the sparse-attention indexer.*{key}"):
        model_from_config(config)


def test_an_every_layer_pattern_is_accepted() -> None:
    config = _config("glm-5.json")
    config.update(index_topk_freq=1, index_topk_pattern="F" * 78)
    assert model_from_config(config).sparse_indexer is not None


def test_partial_indexer_keys_are_a_parameter_error() -> None:
    config = _config("glm-5.json")
    del config["index_head_dim"]
    with pytest.raises(InvalidParameterError, match="index_head_dim"):
        model_from_config(config)


def test_indexer_needs_a_query_latent() -> None:
    config = _config("glm-5.json")
    config["q_lora_rank"] = 0
    with pytest.raises(InvalidParameterError, match="q_lora_rank > 0"):
        model_from_config(config)


def test_indexer_dims_are_checked() -> None:
    with pytest.raises(InvalidParameterError, match="index_topk"):
        SparseIndexerDims(topk=0, n_heads=32, head_dim=128)
