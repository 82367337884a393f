"""Every error is application/problem+json with the status the mapping table promises."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel, Field

from app.core.errors import (
    ChunkwiseError,
    DeadlineExceededError,
    InfeasibleError,
    InvalidParameterError,
    SearchLimitError,
    SimulationError,
    UnknownDeviceError,
    UnknownModelError,
    UnsupportedError,
)
from app.main import create_app
from app.settings import Settings

RAISED: dict[str, Exception] = {
    "invalid": InvalidParameterError("max_batched_tokens", 0, "an integer >= 1"),
    "model": UnknownModelError("nope", ["b-model", "a-model"]),
    "device": UnknownDeviceError("gpu9000", ["TEST_DEVICE"]),
    "unsupported": UnsupportedError("model_type 'rwkv' is not supported"),
    "search": SearchLimitError("too many layouts"),
    "simulation": SimulationError("no progress"),
    "infeasible": InfeasibleError("the KV cache of one request does not fit"),
    "deadline": DeadlineExceededError("took too long"),
    "generic": ChunkwiseError("something domain-specific"),
}


class Body(BaseModel):
    max_batched_tokens: int = Field(gt=0)


@pytest.fixture
def raising_client() -> Iterator[TestClient]:
    app: FastAPI = create_app(Settings(log_level="critical"))

    @app.get("/raise/{name}")
    def raise_it(name: str) -> None:
        raise RAISED[name]

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("a bug")

    @app.post("/body")
    def body(payload: Body) -> dict[str, int]:
        return {"ok": payload.max_batched_tokens}

    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


@pytest.mark.parametrize(
    ("name", "status"),
    [
        ("invalid", 422),
        ("model", 422),
        ("device", 422),
        ("unsupported", 422),
        ("search", 422),
        ("simulation", 422),
        ("infeasible", 422),
        ("deadline", 504),
        ("generic", 400),
    ],
)
def test_domain_errors_map_to_problem_json(
    raising_client: TestClient, name: str, status: int
) -> None:
    response = raising_client.get(f"/raise/{name}")
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status
    assert body["title"]
    assert body["detail"] == str(RAISED[name])
    assert body["instance"] == f"/raise/{name}"
    assert body["request_id"] == response.headers["x-request-id"]


def test_unknown_model_lists_the_valid_names(raising_client: TestClient) -> None:
    body = raising_client.get("/raise/model").json()
    assert body["valid"] == ["a-model", "b-model"]
    assert body["type"].endswith("unknown-model")
    assert body["errors"][0]["loc"] == ["body", "model"]


def test_invalid_parameter_names_the_field(raising_client: TestClient) -> None:
    body = raising_client.get("/raise/invalid").json()
    assert body["errors"][0]["loc"] == ["body", "max_batched_tokens"]


def test_payload_validation_is_422_with_errors(raising_client: TestClient) -> None:
    response = raising_client.post("/body", json={"max_batched_tokens": 0})
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["errors"][0]["loc"] == ["body", "max_batched_tokens"]
    assert "max_batched_tokens" in body["detail"]


def test_malformed_json_is_400(raising_client: TestClient) -> None:
    response = raising_client.post(
        "/body", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"


def test_unknown_route_and_method_are_problems(raising_client: TestClient) -> None:
    missing = raising_client.get("/v1/nothing-here")
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/problem+json"
    wrong = raising_client.delete("/healthz")
    assert wrong.status_code == 405
    assert wrong.headers["content-type"] == "application/problem+json"
    assert wrong.headers["allow"] == "GET"


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/v1/simulate", "POST"),
        ("PUT", "/v1/calibrations/cal-" + "0" * 32, "DELETE, GET"),
        ("DELETE", "/v1/models", "GET"),
    ],
)
def test_a_405_names_every_method_the_path_serves(
    client: TestClient, method: str, path: str, allow: str
) -> None:
    """RFC 9110: a 405 carries ``Allow``; the /v1 routes are an included router's, whose
    methods the top-level routes do not show (``Allow`` was empty)."""
    wrong = client.request(method, path)
    assert wrong.status_code == 405
    assert wrong.headers["allow"] == allow


def test_a_bug_is_a_500_problem_not_a_traceback(raising_client: TestClient) -> None:
    response = raising_client.get("/boom")
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/problem+json"
    assert "a bug" not in response.text


def test_a_huge_body_is_413_problem(client: TestClient) -> None:
    body = b'{"input_length": 1, "max_batched_tokens": 1, "pad": "' + b"a" * 2_000_000 + b'"}'
    response = client.post(
        "/v1/chunk-plan", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["x-request-id"]


def test_a_huge_streamed_body_is_413_problem(client: TestClient) -> None:
    body = b'{"input_length": 1, "max_batched_tokens": 1, "pad": "' + b"a" * 2_000_000 + b'"}'

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(body), 65536):
            yield body[start : start + 65536]

    response = client.post(
        "/v1/chunk-plan", content=chunks(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"].endswith("body-too-large")
    assert response.headers["x-request-id"]
