"""A request longer than its model's context (``max_position_embeddings``, rope-scaled when the
config says so) is a 422 naming the field and the limit, on every operation that resolves a
model; up to the limit it is answered."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.helpers import assert_names_field, long_context_qwen3_32b

_QWEN = {"model": "Qwen/Qwen3-32B", "device": "NVIDIA_H200_SXM_141G"}
_MILLION = {**_QWEN, "input_length": 1_000_000, "output_length": 100}


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/simulate", {**_MILLION, "concurrency": 1}, "input_length"),
        ("/v1/optimize", {**_MILLION, "num_devices": 8, "tpot_limit_ms": 100}, "input_length"),
        ("/v1/plan", {**_MILLION, "request_rate": 1, "tpot_limit_ms": 100}, "input_length"),
        (
            "/v1/simulate",
            {
                **_MILLION,
                "mode": "disagg",
                "prefill_workers": 1,
                "decode_workers": 1,
                "concurrency": 1,
            },
            "input_length",
        ),
        (
            "/v1/forward",
            {**_QWEN, "num_queries": 1, "query_length": 40_000, "context_length": 1_000},
            "query_length",
        ),
    ],
)
def test_beyond_the_context_is_a_422_naming_the_field_and_the_limit(
    client: TestClient, path: str, body: dict[str, Any], field: str
) -> None:
    response = client.post(path, json=body)
    assert_names_field(response, field)
    assert "40,960 tokens" in response.json()["detail"]


def test_the_whole_context_is_answered(client: TestClient) -> None:
    body = {**_QWEN, "input_length": 40_000, "output_length": 960, "concurrency": 1}
    response = client.post("/v1/simulate", json=body)
    assert response.status_code == 200, response.text
    over = client.post("/v1/simulate", json={**body, "output_length": 961})
    assert_names_field(over, "input_length")


def test_a_rope_scaled_inline_config_extends_the_context(client: TestClient) -> None:
    """YaRN factor 4 over 32,768 original positions: 131,072 tokens."""
    model = long_context_qwen3_32b(factor=4.0)
    body = {
        **_QWEN,
        "model": model,
        "input_length": 100_000,
        "output_length": 16,
        "concurrency": 1,
        "max_batched_tokens": 16_384,
    }
    response = client.post("/v1/simulate", json=body)
    assert response.status_code == 200, response.text
    over = client.post("/v1/simulate", json={**body, "input_length": 131_060})
    assert_names_field(over, "input_length")
    assert "131,072 tokens" in over.json()["detail"]


def test_the_model_document_states_its_context(client: TestClient) -> None:
    model = client.get("/v1/models/Qwen/Qwen3-32B").json()
    assert model["architecture"]["max_context_tokens"] == 40_960
