"""Unmodelled architecture features are a 422 naming the feature, through the real app."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

BODY = {
    "device": "NVIDIA_B300_SXM_288G",
    "input_length": 1024,
    "output_length": 128,
    "max_batched_tokens": 8192,
    "concurrency": 8,
    "tp_size": 8,
}


@pytest.mark.parametrize(("model", "feature"), [("Qwen/Qwen3.5-397B-A17B", "linear_attention")])
def test_refused_architectures_are_422(client: TestClient, model: str, feature: str) -> None:
    response = client.post("/v1/simulate", json={**BODY, "model": model})
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
