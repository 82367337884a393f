from __future__ import annotations

import re

from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings


def test_healthz_answers_ok() -> None:
    with TestClient(create_app(Settings())) as client:
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_with_the_memory_cache_is_ready(client: TestClient) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["status"] == "ready"
    assert response.json()["cache"]["backend"] == "memory"


def test_readyz_is_503_problem_when_redis_is_unreachable() -> None:
    # Port 1 on loopback: nothing listens there, the connect fails at once.
    settings = Settings(cache_backend="redis", redis_url="redis://127.0.0.1:1/0", log_level="error")
    with TestClient(create_app(settings)) as client:
        response = client.get("/readyz")
        assert client.get("/healthz").status_code == 200
    assert response.status_code == 503
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == 503
    assert body["cache"] == {
        "backend": "redis",
        "reachable": False,
        "detail": body["cache"]["detail"],
        "writable": True,  # unknown while unreachable; reachable says it all
    }
    assert "Connection" in body["cache"]["detail"]


def test_metrics_exposes_requests_and_cache_counters(client: TestClient) -> None:
    client.get("/healthz")
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert 'chunkwise_http_requests_total{method="GET",route="/healthz",status="200"} 1.0' in text
    assert 'chunkwise_cache_hits_total{backend="memory"}' in text
    assert 'chunkwise_cache_errors_total{backend="memory"} 0.0' in text
    assert "chunkwise_forward_evaluations_total" in text
    assert "chunkwise_http_request_duration_seconds_bucket" in text


def _label_values(text: str, label: str) -> set[str]:
    return set(re.findall(rf'^chunkwise_http_\w+\{{[^}}]*\b{label}="([^"]*)"', text, re.M))


def test_metric_labels_are_bounded(client: TestClient) -> None:
    """N4: invented method names and paths add no label values: an unknown method counts as
    ``other``, an unmatched path as ``<unmatched>`` (5,000 invented methods took /metrics from
    0.6 to 10.3 MB)."""
    before = len(client.get("/metrics").content)
    for i in range(300):
        client.request(f"M{i:04d}X", f"/invented/{i}")
        client.get(f"/nothing-{i}")
    text = client.get("/metrics").text
    assert _label_values(text, "method") <= {"GET", "other"}
    assert "other" in _label_values(text, "method")
    routes = _label_values(text, "route")
    assert not any(r.startswith(("/invented", "/nothing")) for r in routes), routes
    assert "<unmatched>" in routes
    assert len(text.encode()) < before + 8 * 1024  # a few new series, not 600


def test_request_id_is_echoed_or_generated(client: TestClient) -> None:
    echoed = client.get("/healthz", headers={"X-Request-ID": "abc-123"})
    assert echoed.headers["x-request-id"] == "abc-123"
    generated = client.get("/healthz")
    assert len(generated.headers["x-request-id"]) == 32
    # An unsafe id (spaces, too long) is replaced rather than reflected.
    replaced = client.get("/healthz", headers={"X-Request-ID": "x" * 200})
    assert replaced.headers["x-request-id"] != "x" * 200


def test_openapi_and_docs_are_served(client: TestClient) -> None:
    assert client.get("/openapi.json").status_code == 200
    assert client.get("/docs").status_code == 200


def test_openapi_documents_every_endpoint_and_problem_responses(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    for path in (
        "/v1/optimize",
        "/v1/simulate",
        "/v1/chunk-plan",
        "/v1/forward",
        "/v1/models",
        "/v1/devices",
        "/healthz",
        "/readyz",
        "/metrics",
    ):
        assert path in paths, path
    optimize = paths["/v1/optimize"]["post"]
    assert "application/problem+json" in optimize["responses"]["422"]["content"]
    schema = spec["components"]["schemas"]["OptimizeRequest"]
    budget = schema["properties"]["max_batched_tokens"]  # optional: engine default if omitted
    integer = next(branch for branch in budget["anyOf"] if branch.get("type") == "integer")
    assert integer["minimum"] == 1
    assert "max_batched_tokens" not in schema.get("required", [])


def test_dashboard_files_are_revalidated() -> None:
    with TestClient(create_app(Settings())) as client:
        page = client.get("/")
        script = client.get("/static/js/main.js")
        again = client.get("/static/js/main.js", headers={"If-None-Match": script.headers["etag"]})
    assert page.status_code == 200 and page.headers["cache-control"] == "no-cache"
    assert script.status_code == 200 and script.headers["cache-control"] == "no-cache"
    assert again.status_code == 304
