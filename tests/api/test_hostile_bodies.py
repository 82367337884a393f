"""Hostile request bodies are 4xx problem+json, never a 500 (deep nesting, huge numbers, bad
encodings, wrong media types). Body size itself: ``test_errors.py`` (413)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

NESTED = b"[" * 200_000 + b"]" * 200_000
CASES = {
    "deeply nested array": b'{"input_length": 1, "max_batched_tokens": 1, "pad": ' + NESTED + b"}",
    "deeply nested inline config": b'{"model": {"name": "x", "config": '
    + b'{"a":' * 100_000
    + b"1"
    + b"}" * 100_000
    + b'}, "device": "TEST_DEVICE", "num_queries": 1, "query_length": 1}',
    "number overflowing a float": b'{"input_length": 1e999, "max_batched_tokens": 1}',
    "5000-digit integer": b'{"input_length": ' + b"9" * 5000 + b', "max_batched_tokens": 1}',
    "not UTF-8": b"\xff\xfe{",
    "NaN": b'{"input_length": NaN, "max_batched_tokens": 1}',
    "empty": b"",
    "a JSON string": b'"hello"',
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("path", ["/v1/chunk-plan", "/v1/forward"])
def test_hostile_body_is_a_4xx_problem(client: TestClient, name: str, path: str) -> None:
    response = client.post(path, content=CASES[name], headers={"content-type": "application/json"})
    assert 400 <= response.status_code < 500, response.text
    assert response.headers["content-type"] == "application/problem+json"


def test_wrong_media_type_is_a_4xx_problem(client: TestClient) -> None:
    response = client.post(
        "/v1/chunk-plan",
        content=b'{"input_length": 5, "max_batched_tokens": 1}',
        headers={"content-type": "text/plain"},
    )
    assert 400 <= response.status_code < 500
    assert response.headers["content-type"] == "application/problem+json"
