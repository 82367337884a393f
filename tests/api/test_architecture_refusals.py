"""Unmodelled architecture features are a 422 naming the feature, through the real app (an
unknown layer type, or linear attention outside the Gated DeltaNet types); the modelled hybrid
(Qwen3.5's Gated DeltaNet layers) and sparse attention (GLM-5) simulate."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from app.core.catalog.models import CONFIG_DIR as MODEL_CONFIGS

BODY = {
    "device": "NVIDIA_B300_SXM_288G",
    "input_length": 1024,
    "output_length": 128,
    "max_batched_tokens": 8192,
    "concurrency": 8,
    "tp_size": 8,
}


def _inline(layer_type: str) -> dict[str, object]:
    config = json.loads((MODEL_CONFIGS / "llama3.1-8b.json").read_text())
    config["layer_types"] = [layer_type] * int(config["num_hidden_layers"])
    return {"name": f"llama-with-{layer_type}", "config": config}


@pytest.mark.parametrize("feature", ["mamba", "linear_attention"])
def test_refused_architectures_are_422(client: TestClient, feature: str) -> None:
    response = client.post("/v1/simulate", json={**BODY, "model": _inline(feature)})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert feature in response.json()["detail"]


def test_new_models_simulate_on_blackwell_ultra(client: TestClient) -> None:
    for model, quant in (("moonshotai/Kimi-K2.5", "W4A16"), ("MiniMaxAI/MiniMax-M2.5", "FP8")):
        body = {**BODY, "model": model, "quantize_linear_action": quant, "ep_size": 8}
        response = client.post("/v1/simulate", json=body)
        assert response.status_code == 200, response.text
        result = response.json()
        assert result["feasible"], result["reason"]
        assert 0 < result["ttft_ms"] < 60_000 and 0 < result["tpot_ms"] < 1_000


def test_qwen35_is_listed_and_simulates(client: TestClient) -> None:
    listing = client.get("/v1/models")
    assert listing.status_code == 200, listing.text
    (entry,) = [m for m in listing.json()["models"] if m["name"] == "Qwen/Qwen3.5-397B-A17B"]
    assert entry["model_type"] == "qwen3_5_moe_text"
    assert "qwen3_5_moe_text" in listing.json()["supported_model_types"]
    body = {**BODY, "model": "Qwen/Qwen3.5-397B-A17B", "quantize_linear_action": "NVFP4"}
    response = client.post("/v1/simulate", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["feasible"], result["reason"]
    assert 0 < result["ttft_ms"] < 60_000 and 0 < result["tpot_ms"] < 1_000
