"""Issue 15's W6: the dashboard is served with security headers, and a POST body that is not
``application/json`` is refused with 415 before anything reads it (a page on another origin
can send text/plain or a form without a CORS preflight)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.api.observability import is_json

CHUNK_PLAN = '{"input_length": 1000, "max_batched_tokens": 256}'


@pytest.mark.parametrize(
    "path", ["/", "/sweeps", "/static/app.css", "/static/js/main.js", "/static/js/sweeps.js"]
)
def test_dashboard_responses_carry_the_security_headers(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 200
    policy = response.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["referrer-policy"] == "no-referrer"


@pytest.mark.parametrize("path", ["/", "/sweeps"])
def test_the_page_has_no_inline_script_or_style(client: TestClient, path: str) -> None:
    """What the policy forbids must not be on the page itself."""
    page = client.get(path).text
    assert "<script>" not in page and "style=" not in page


@pytest.mark.parametrize(
    "content_type", [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
def test_a_post_body_that_is_not_json_is_415(client: TestClient, content_type: str | None) -> None:
    headers = {"content-type": content_type} if content_type else {}
    response = client.post("/v1/chunk-plan", content=CHUNK_PLAN.encode(), headers=headers)
    assert response.status_code == 415, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"].endswith("unsupported-media-type") and problem["status"] == 415
    assert "application/json" in problem["detail"]


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/json; charset=utf-8", "APPLICATION/JSON"]
)
def test_json_bodies_are_read(client: TestClient, content_type: str) -> None:
    response = client.post(
        "/v1/chunk-plan", content=CHUNK_PLAN.encode(), headers={"content-type": content_type}
    )
    assert response.status_code == 200, response.text


def test_a_post_without_a_body_is_routed_as_before(client: TestClient) -> None:
    assert client.post("/healthz").status_code == 405  # no such method
    assert client.post("/v1/chunk-plan").status_code == 422  # the body is required


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("application/json", True),
        ("application/problem+json", True),
        (" application/json ; charset=UTF-8", True),
        ("text/json", False),
        ("application/jsonp", False),
        ("", False),
    ],
)
def test_is_json(value: str, expected: bool) -> None:
    assert is_json(value) is expected


def test_a_body_with_many_invalid_fields_answers_a_bounded_422(client: TestClient) -> None:
    """W3: 70,000 unknown keys (0.9 MB) answered 9.1 MB; now 50 entries and a count."""
    body = {"input_length": 1000, "max_batched_tokens": 256}
    body.update({f"k{i}": 0 for i in range(70_000)})  # ~0.9 MB, under the 1 MiB limit
    response = client.post("/v1/chunk-plan", json=body)
    assert response.status_code == 422
    assert len(response.content) < 64 * 1024
    problem = response.json()
    assert len(problem["errors"]) == 50
    assert problem["detail"].endswith("and 69950 more invalid fields")


def test_a_huge_key_is_shown_cut(client: TestClient) -> None:
    body = {"input_length": 1000, "max_batched_tokens": 256, "k" * 100_000: 1}
    problem = client.post("/v1/chunk-plan", json=body).json()
    assert len(problem["errors"][0]["loc"][-1]) <= 200
    assert len(problem["detail"]) < 1000
