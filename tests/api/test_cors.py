"""CORS: no headers by default; the configured origins only (APP_CORS_ORIGINS)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from app.main import create_app
from app.settings import Settings

ALLOWED = "https://dash.example.com"


def test_no_cors_headers_by_default(client: TestClient) -> None:
    response = client.get("/healthz", headers={"Origin": ALLOWED})
    assert response.status_code == 200
    assert "access-control-allow-origin" not in response.headers


def test_configured_origins_get_cors_and_preflight_answers() -> None:
    settings = Settings(cors_origins=f"{ALLOWED}, http://localhost:3000", log_level="error")
    with TestClient(create_app(settings)) as client:
        simple = client.get("/healthz", headers={"Origin": ALLOWED})
        assert simple.headers["access-control-allow-origin"] == ALLOWED
        assert "x-request-id" in simple.headers["access-control-expose-headers"].lower()
        preflight = client.options(
            "/v1/simulate",
            headers={
                "Origin": ALLOWED,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type",
            },
        )
        assert preflight.status_code == 200
        assert "POST" in preflight.headers["access-control-allow-methods"]
        other = client.get("/healthz", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers


@pytest.mark.parametrize("bad", ["dash.example.com", "https://dash.example.com/path", "ftp://x"])
def test_a_malformed_origin_is_refused_at_startup(bad: str) -> None:
    with pytest.raises(ValidationError, match="is not an origin"):
        Settings(cors_origins=bad)
