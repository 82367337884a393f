"""Stored calibrations against a real redis-server: a profile one worker fits is read, applied
and deleted through another (two apps sharing one Redis), its key carries the TTL, and a
forged value under its key reads as unknown, never a 500."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.services.calibration import KEY_PREFIX
from app.settings import Settings
from tests.api.test_calibrations import SIMULATE, _rows
from tests.integration.conftest import RedisServer

pytestmark = pytest.mark.integration


def _settings(server: RedisServer) -> Settings:
    return Settings(cache_backend="redis", redis_url=server.url, calibration_ttl_s=600)


def test_two_workers_share_a_calibration(redis_server: RedisServer) -> None:
    with (
        TestClient(create_app(_settings(redis_server))) as first,
        TestClient(create_app(_settings(redis_server))) as second,
    ):
        created = first.post("/v1/calibrations", json={"points": _rows()})
        assert created.status_code == 201, created.text
        cid = created.json()["id"]
        assert 0 < redis_server.client().ttl(KEY_PREFIX + cid) <= 600
        read = second.get(f"/v1/calibrations/{cid}")
        assert read.status_code == 200 and read.json()["profile"] == created.json()["profile"]
        applied = second.post("/v1/simulate", json={**SIMULATE, "calibration": cid})
        assert applied.status_code == 200 and applied.json()["calibration"]["id"] == cid
        assert second.delete(f"/v1/calibrations/{cid}").status_code == 204
        assert first.get(f"/v1/calibrations/{cid}").status_code == 404


@pytest.mark.parametrize(
    "forged",
    [
        "[1, 2, 3]",
        json.dumps({"profile": {"version": 1}, "expires_at_s": 4e9}),
        json.dumps({"profile": None, "expires_at_s": "soon"}),
        json.dumps({"profile": {}, "expires_at_s": 1.0}),
    ],
)
def test_a_forged_stored_value_is_unknown(redis_server: RedisServer, forged: str) -> None:
    cid = "cal-" + "ab" * 10
    redis_server.client().set(KEY_PREFIX + cid, forged)
    with TestClient(create_app(_settings(redis_server))) as client:
        assert client.get(f"/v1/calibrations/{cid}").status_code == 404
        response = client.post("/v1/simulate", json={**SIMULATE, "calibration": cid})
        assert response.status_code == 422 and "stored calibration" in response.json()["detail"]
