"""GLM-5 (MLA with DeepSeek Sparse Attention's indexer) simulates through the real app."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

# One of the measured GLM-5 deployments (B200, TP8, FP8 blocks; 8192 in, 1024 out, 16 users).
BODY: dict[str, Any] = {
    "model": "zhipuai/GLM-5",
    "device": "NVIDIA_B200_SXM_180G",
    "quantize_linear_action": "FP8",
    "input_length": 8192,
    "output_length": 1024,
    "max_batched_tokens": 8192,
    "concurrency": 16,
    "tp_size": 8,
}


def test_glm5_simulates(client: TestClient) -> None:
    response = client.post("/v1/simulate", json=BODY)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["feasible"], result["reason"]
    assert 0 < result["ttft_ms"] < 60_000 and 0 < result["tpot_ms"] < 1_000


def test_glm5_forward_breakdown_shows_the_indexer(client: TestClient) -> None:
    body = {
        "model": "zai-org/GLM-5",
        "device": "NVIDIA_B200_SXM_180G",
        "quantize_linear_action": "FP8",
        "tp_size": 8,
        "decode": True,
        "num_queries": 8,
        "query_length": 1,
        "context_length": 65535,
    }
    response = client.post("/v1/forward", json=body)
    assert response.status_code == 200, response.text
    names = {op["name"] for op in response.json()["breakdown"]["ops"]}
    assert {"indexer_q_proj", "indexer_logits", "indexer_topk", "decode_attention"} <= names
