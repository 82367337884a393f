"""Helpers shared by the fault, determinism and load tests: uvicorn workers against Redis."""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from tests.integration.conftest import RedisServer, Uvicorn, wait_until

ROOT = Path(__file__).resolve().parents[2]


#: How long a worker computes locally after a failed Redis round trip before trying again.
REDIS_RETRY_INTERVAL_S = 0.2


def redis_env(redis: RedisServer | None, **settings: str) -> dict[str, str]:
    """The environment of a worker: Redis-backed (or the in-process cache when ``None``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("APP_")}
    env.update(APP_LOG_LEVEL="warning", PYTHONPATH=str(ROOT))
    if redis is None:
        env.update(APP_CACHE_BACKEND="memory")
    else:
        env.update(
            APP_CACHE_BACKEND="redis",
            APP_REDIS_URL=redis.url,
            APP_REDIS_RETRY_INTERVAL_S=str(REDIS_RETRY_INTERVAL_S),
        )
    env.update({f"APP_{key.upper()}": value for key, value in settings.items()})
    return env


def start_server(server: Uvicorn, log: Path, timeout_s: float = 30) -> Uvicorn:
    """Start ``server`` and wait until ``/healthz`` answers (fails with its log otherwise)."""
    server.start(log)

    def healthy() -> bool:
        assert server.process is not None
        if server.process.poll() is not None:
            raise AssertionError(f"uvicorn exited early:\n{server.logs()}")
        return httpx.get(f"{server.base_url}/healthz", timeout=1).status_code == 200

    wait_until(healthy, timeout_s=timeout_s, what=f"uvicorn on {server.base_url}")
    return server
