"""Issue 15's W5 against a real redis-server: a full Redis (``maxmemory`` reached under
``noeviction``) refuses writes but still answers reads. The workers keep reading (hits stay
hits), pause writes, log one warning rather than one per request, and ``/readyz`` says the
cache refuses writes until a probe write is accepted again."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient

from app.cache import RedisLatencyCache
from app.main import create_app
from app.settings import Settings
from tests.integration.conftest import RedisServer

pytestmark = pytest.mark.integration


def _fill(server: RedisServer) -> None:
    client = server.client()
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", "1")  # below what the server already uses: writes refused


def _free(server: RedisServer) -> None:
    server.client().config_set("maxmemory", "0")


def test_a_full_redis_keeps_reads_and_logs_once(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    cache = RedisLatencyCache(redis_server.url, ttl_s=60, retry_interval_s=0.0)
    try:
        cache.set_many({"k1": [1.0]})
        _fill(redis_server)
        with caplog.at_level(logging.WARNING, logger="chunkwise.cache"):
            for i in range(50):
                cache.set_many({f"new{i}": [2.0]})
                assert cache.get_many(["k1"]) == [[1.0]]  # reads go on: still a hit
        warnings = [r for r in caplog.records if "refuses writes" in r.getMessage()]
        assert len(warnings) == 1
        assert "unreachable" not in caplog.text
        health = cache.check()
        assert health.reachable and not health.writable and "OutOfMemoryError" in health.detail
        stats = cache.stats.snapshot()
        assert stats["hits"] == 50 and stats["errors"] >= 1 and stats["writes"] == 1
        _free(redis_server)
        health = cache.check()  # the probe write is accepted: writable again
        assert health.reachable and health.writable
        cache.set_many({"after": [3.0]})
        assert cache.get_many(["after"]) == [[3.0]]
    finally:
        _free(redis_server)
        cache.close()


def test_readyz_reports_a_cache_that_refuses_writes(redis_server: RedisServer) -> None:
    settings = Settings(
        cache_backend="redis",
        redis_url=redis_server.url,
        redis_retry_interval_s=0.0,
        log_level="warning",
    )
    app = create_app(settings)
    body = {"input_length": 1000, "max_batched_tokens": 256}
    with TestClient(app) as client:
        assert client.get("/readyz").status_code == 200
        _fill(redis_server)
        try:
            simulate = {
                "model": "Qwen/Qwen3-8B",
                "device": "NVIDIA_H100_SXM_80G",
                "input_length": 1024,
                "output_length": 16,
                "max_batched_tokens": 512,
                "concurrency": 2,
            }
            assert client.post("/v1/simulate", json=simulate).status_code == 200  # answered
            ready = client.get("/readyz")
            assert ready.status_code == 503
            problem = ready.json()
            assert problem["title"] == "Cache backend refuses writes"
            assert problem["cache"]["reachable"] is True and problem["cache"]["writable"] is False
            assert client.post("/v1/chunk-plan", json=body).status_code == 200
        finally:
            _free(redis_server)
        ready = client.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["cache"]["writable"] is True
