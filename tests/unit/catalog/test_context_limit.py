"""A model's context (the most tokens one request holds), parsed from its config.json as vLLM
derives ``max_model_len`` (vllm/config.py, ``_get_and_verify_max_len``)."""

from __future__ import annotations

import pytest

from app.core.catalog.hf_config import context_limit
from app.core.catalog.models import get_model
from app.core.errors import InvalidParameterError


@pytest.mark.parametrize(
    ("name", "tokens"),
    [
        ("Qwen/Qwen3-32B", 40_960),  # max_position_embeddings, no rope scaling
        ("meta-llama/Llama-3.1-8B", 131_072),  # llama3 rope: the positions already extended
        ("deepseek-ai/DeepSeek-V3", 163_840),  # yarn: 4,096 original x 40
        ("openai/gpt-oss-20b", 131_072),  # yarn: 4,096 x 32
        ("moonshotai/Kimi-K2.5", 262_144),  # yarn: 4,096 x 64
        ("Qwen/Qwen3.5-397B-A17B", 262_144),  # rope_parameters of type default
        ("EleutherAI/gpt-j-6b", 2_048),  # n_positions
        ("tiiuae/falcon-180B", None),  # the config states none: no check
    ],
)
def test_the_catalog_models_context(name: str, tokens: int | None) -> None:
    assert get_model(name).max_context_tokens == tokens


@pytest.mark.parametrize(
    ("rope", "tokens"),
    [
        ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 131_072),
        ({"type": "yarn", "factor": 4.0}, 163_840),  # no original: the position limit
        ({"type": "linear", "factor": 2.0}, 81_920),
        ({"rope_type": "dynamic", "factor": 2.0}, 81_920),
        ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}, 40_960),
        ({"rope_type": "default"}, 40_960),
        (None, 40_960),
    ],
)
def test_rope_scaling_extends_the_context(rope: object, tokens: int) -> None:
    assert context_limit({"max_position_embeddings": 40_960, "rope_scaling": rope}) == tokens


@pytest.mark.parametrize("factor", [0, -2.0, True, "4"])
def test_a_malformed_rope_factor_is_refused(factor: object) -> None:
    rope = {"rope_type": "yarn", "factor": factor}
    with pytest.raises(InvalidParameterError, match=r"rope_scaling\.factor"):
        context_limit({"max_position_embeddings": 40_960, "rope_scaling": rope})


def test_the_context_changes_no_cache_key() -> None:
    """The limit bounds a request; it changes no forward's cost, so not the runner identity."""
    model = get_model("Qwen/Qwen3-32B")
    assert "max_context_tokens" in model.to_dict()
    assert "max_context_tokens" not in model.cost_dict()
