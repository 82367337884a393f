"""Stored calibrations against a real redis-server: a profile one worker fits is read, applied
and deleted through another (two apps sharing one Redis), its key carries the TTL, and a
forged value under its key reads as unknown, never a 500."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.services.calibration_store import KEY_PREFIX
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
    cid = "cal-" + "ab" * 16
    redis_server.client().set(KEY_PREFIX + cid, forged)
    with TestClient(create_app(_settings(redis_server))) as client:
        assert client.get(f"/v1/calibrations/{cid}").status_code == 404
        response = client.post("/v1/simulate", json={**SIMULATE, "calibration": cid})
        assert response.status_code == 422 and "stored calibration" in response.json()["detail"]


# -- a calibration that cannot be stored is never a 201 (issue 34) -----------------------------
def _refused(response: Any, *, retry: bool) -> dict[str, Any]:
    """A 503 problem that says the profile was not stored, quoting no key."""
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert ("retry-after" in response.headers) == retry
    assert "calibration:" not in response.text and '"cal-' not in response.text
    problem: dict[str, Any] = response.json()
    assert problem["type"].endswith("calibration-store")
    return problem


def _fill(server: RedisServer) -> None:
    client = server.client()
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", "1")  # below what the server already uses: writes refused


def test_a_calibration_redis_does_not_take_is_a_503(redis_server: RedisServer) -> None:
    settings = Settings(
        cache_backend="redis", redis_url=redis_server.url, redis_retry_interval_s=0.0
    )
    with TestClient(create_app(settings)) as client:
        _fill(redis_server)
        try:
            full = client.post("/v1/calibrations", json={"points": _rows()})
            _refused(full, retry=True)
            ready = client.get("/readyz")  # the refused write named a key: not quoted here
            assert ready.status_code == 503 and "calibration:" not in ready.text
        finally:
            redis_server.client().config_set("maxmemory", "0")
        redis_server.stop()
        down = client.post("/v1/calibrations", json={"points": _rows()})
        _refused(down, retry=True)
        assert redis_server.process is None
        assert not list(_stored_keys_after_restart(redis_server))


def _stored_keys_after_restart(server: RedisServer) -> list[Any]:
    server.start()
    return list(server.client().keys(KEY_PREFIX + "*"))


def test_several_workers_without_a_shared_store_refuse_calibrations() -> None:
    settings = Settings(cache_backend="memory", workers=2, log_level="warning")
    with TestClient(create_app(settings)) as client:
        response = client.post("/v1/calibrations", json={"points": _rows()})
        problem = _refused(response, retry=False)
        assert "APP_CACHE_BACKEND=redis" in problem["detail"]
    with TestClient(create_app(Settings(cache_backend="memory", workers=1))) as client:
        assert client.post("/v1/calibrations", json={"points": _rows()}).status_code == 201


def test_readyz_sees_a_full_redis_the_worker_never_wrote_to(redis_server: RedisServer) -> None:
    """The heavy lane's child (a real process) writes; the worker does not: readiness probes
    a write itself, so a full Redis is a 503 whichever process met it."""
    settings = Settings(
        cache_backend="redis",
        redis_url=redis_server.url,
        redis_retry_interval_s=0.0,
        heavy_processes=1,
        log_level="warning",
    )
    optimize = {
        "model": "Qwen/Qwen3-8B",
        "device": "NVIDIA_H100_SXM_80G",
        "num_devices": 1,
        "input_length": 1024,
        "output_length": 64,
        "tpot_limit_ms": 50,
    }
    with TestClient(create_app(settings)) as client:
        assert client.get("/readyz").status_code == 200
        _fill(redis_server)
        try:
            assert client.post("/v1/optimize", json=optimize).status_code == 200  # in the child
            ready = client.get("/readyz")
            assert ready.status_code == 503, ready.text
            assert ready.json()["cache"]["writable"] is False
            assert "OutOfMemoryError" in ready.json()["detail"]
        finally:
            redis_server.client().config_set("maxmemory", "0")
        assert client.get("/readyz").status_code == 200


# -- calibrations live in the durable store, where nothing evicts them (issue 33) ---------------
def test_a_calibration_lives_in_the_durable_store_not_the_cache(tmp_path: Path) -> None:
    """With a cache Redis (LRU) and a durable store (APP_SWEEP_STORE_URL, persistence), a
    profile is written to the store: the cache losing every key (an eviction) and the store
    restarting (its append-only file) both leave it readable."""
    cache = RedisServer(workdir=tmp_path / "cache")
    store = RedisServer(workdir=tmp_path / "store", persistent=True)
    for server in (cache, store):
        server.workdir.mkdir()
        server.start()
    settings = Settings(
        cache_backend="redis", redis_url=cache.url, sweep_store_url=store.url, workers=2
    )
    try:
        with TestClient(create_app(settings)) as client:
            created = client.post("/v1/calibrations", json={"points": _rows()})
            assert created.status_code == 201, created.text
            cid = created.json()["id"]
            assert 0 < store.client().ttl(KEY_PREFIX + cid) <= settings.calibration_ttl_s
            assert not cache.client().exists(KEY_PREFIX + cid)
            cache.client().flushall()
            assert client.get(f"/v1/calibrations/{cid}").status_code == 200
        store.stop()
        store.start()
        with TestClient(create_app(settings)) as client:
            read = client.get(f"/v1/calibrations/{cid}")
            assert read.status_code == 200 and read.json()["profile"] == created.json()["profile"]
            applied = client.post("/v1/simulate", json={**SIMULATE, "calibration": cid})
            assert applied.status_code == 200 and applied.json()["calibration"]["id"] == cid
    finally:
        cache.stop()
        store.stop()


def test_workers_with_in_process_caches_share_calibrations_through_the_broker(
    redis_server: RedisServer,
) -> None:
    """The in-process latency cache and a broker: the broker's Redis is the store, so two
    workers (each with its own cache) share a profile, and several workers may store one."""
    settings = Settings(cache_backend="memory", broker_url=redis_server.url, workers=2)
    with (
        TestClient(create_app(settings)) as first,
        TestClient(create_app(settings)) as second,
    ):
        created = first.post("/v1/calibrations", json={"points": _rows()})
        assert created.status_code == 201, created.text
        cid = created.json()["id"]
        assert redis_server.client().exists(KEY_PREFIX + cid)
        applied = second.post("/v1/simulate", json={**SIMULATE, "calibration": cid})
        assert applied.status_code == 200 and applied.json()["calibration"]["id"] == cid
        assert second.delete(f"/v1/calibrations/{cid}").status_code == 204
        assert first.get(f"/v1/calibrations/{cid}").status_code == 404


def test_an_unreachable_store_is_a_503_not_an_unknown_calibration(
    redis_server: RedisServer,
) -> None:
    """The store down: a read or an application of a stored id is a 503 (the profile may well
    exist), quoting no key."""
    settings = Settings(cache_backend="memory", sweep_store_url=redis_server.url)
    with TestClient(create_app(settings)) as client:
        created = client.post("/v1/calibrations", json={"points": _rows()})
        cid = created.json()["id"]
        redis_server.stop()
        for response in (
            client.get(f"/v1/calibrations/{cid}"),
            client.post("/v1/simulate", json={**SIMULATE, "calibration": cid}),
        ):
            assert response.status_code == 503, response.text
            assert response.json()["title"] == "Calibration store unavailable"
            assert response.headers["retry-after"] == "1"
            assert KEY_PREFIX not in response.text
