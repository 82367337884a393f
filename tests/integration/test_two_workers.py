"""Two uvicorn worker processes sharing one real redis-server.

* a forward (and a simulation) computed by one worker is a cache hit for the other;
* stopping Redis mid-test leaves every request answered (computed locally), ``/readyz`` says
  503 while it is down, and the workers reconnect when it returns;
* ``chunkwise serve --workers 2`` runs against Redis.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import RedisServer, Uvicorn, free_port, wait_until

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
FORWARD: dict[str, Any] = {
    "model": "Qwen/Qwen3-32B",
    "device": "ATLAS_800_A2_376T_64G",
    "num_queries": 4,
    "query_length": 1024,
    "context_length": 512,
    "tp_size": 4,
}
SIMULATE: dict[str, Any] = {
    "model": "Qwen/Qwen3-32B",
    "device": "ATLAS_800_A2_376T_64G",
    "input_length": 3500,
    "output_length": 300,
    "max_batched_tokens": 2048,
    "concurrency": 32,
    "tp_size": 4,
}


def worker_env(redis: RedisServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("APP_")}
    env.update(
        APP_CACHE_BACKEND="redis",
        APP_REDIS_URL=redis.url,
        APP_REDIS_RETRY_INTERVAL_S="0.2",
        APP_LOG_LEVEL="warning",
        PYTHONPATH=str(ROOT),
    )
    return env


def start(server: Uvicorn, log: Path) -> Uvicorn:
    server.start(log)

    def healthy() -> bool:
        assert server.process is not None
        if server.process.poll() is not None:
            raise AssertionError(f"uvicorn exited early:\n{server.logs()}")
        return httpx.get(f"{server.base_url}/healthz", timeout=1).status_code == 200

    wait_until(healthy, timeout_s=30, what=f"uvicorn on {server.base_url}")
    return server


@pytest.fixture
def two_workers(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[Uvicorn, Uvicorn]]:
    env = worker_env(redis_server)
    first = Uvicorn(env=env, workers=1)
    second = Uvicorn(env=env, workers=1)
    try:
        start(first, tmp_path / "worker-a.log")
        start(second, tmp_path / "worker-b.log")
        yield first, second
    finally:
        first.stop()
        second.stop()


def test_a_forward_computed_by_one_worker_is_a_hit_for_the_other(
    two_workers: tuple[Uvicorn, Uvicorn],
) -> None:
    a, b = two_workers
    assert httpx.get(f"{a.base_url}/readyz").json()["cache"]["backend"] == "redis"
    computed = httpx.post(f"{a.base_url}/v1/forward", json=FORWARD, timeout=10).json()
    assert computed["cache"] == {
        "backend": "redis",
        "hits": 0,
        "misses": 1,
        "round_trips": 1,
        "response_cache_hit": False,
    }
    reused = httpx.post(f"{b.base_url}/v1/forward", json=FORWARD, timeout=10).json()
    assert reused["cache"]["hits"] == 1 and reused["cache"]["misses"] == 0
    assert reused["latency_ms"] == computed["latency_ms"]
    assert reused["breakdown"] == computed["breakdown"]

    # A simulation: one MGET per request; every forward shape computed by A is a hit on B.
    sim_a = httpx.post(f"{a.base_url}/v1/simulate", json=SIMULATE, timeout=30).json()
    sim_b = httpx.post(f"{b.base_url}/v1/simulate", json=SIMULATE, timeout=30).json()
    assert sim_a["stats"]["forward_evaluations"] > 0
    assert sim_b["stats"]["forward_evaluations"] == 0
    assert sim_b["stats"]["cache"]["hits"] == sim_a["stats"]["cache"]["misses"]
    assert sim_b["stats"]["cache"]["round_trips"] == 1
    assert sim_b["ttft_ms"] == sim_a["ttft_ms"]

    # An optimize searched by A is read by B in two round trips (manifest, then one MGET).
    optimize = {
        "model": "Qwen/Qwen3-32B",
        "device": "ATLAS_800_A2_376T_64G",
        "num_devices": 8,
        "input_length": 3500,
        "output_length": 1500,
        "max_batched_tokens": 2048,
        "tpot_limit_ms": 50,
        "tp_sizes": [4, 8],
    }
    opt_a = httpx.post(f"{a.base_url}/v1/optimize", json=optimize, timeout=30).json()
    opt_b = httpx.post(
        f"{b.base_url}/v1/optimize", json={**optimize, "top_k": 1}, timeout=30
    ).json()
    assert opt_a["stats"]["forward_evaluations"] > 0
    assert opt_b["stats"]["forward_evaluations"] == 0
    assert opt_b["stats"]["cache"]["round_trips"] == 2
    assert opt_b["best"] == opt_a["best"]

    metrics_b = httpx.get(f"{b.base_url}/metrics").text
    assert 'chunkwise_cache_hits_total{backend="redis"}' in metrics_b
    assert "chunkwise_forward_evaluations_total 0.0" in metrics_b


@pytest.mark.fault
def test_stopping_redis_mid_test_leaves_every_request_answered(
    two_workers: tuple[Uvicorn, Uvicorn], redis_server: RedisServer
) -> None:
    a, b = two_workers
    statuses: list[int] = []
    failures: list[str] = []
    stop = threading.Event()

    def hammer(base_url: str, seed: int) -> None:
        with httpx.Client(base_url=base_url, timeout=10) as client:
            i = 0
            while not stop.is_set():
                body = {**FORWARD, "num_queries": 1 + (seed * 1000 + i) % 64}
                try:
                    statuses.append(client.post("/v1/forward", json=body).status_code)
                except httpx.HTTPError as exc:  # pragma: no cover - reported below
                    failures.append(repr(exc))
                i += 1

    threads = [threading.Thread(target=hammer, args=(u.base_url, n)) for n, u in enumerate((a, b))]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.5)
        redis_server.stop()
        wait_until(
            lambda: httpx.get(f"{a.base_url}/readyz").status_code == 503,
            what="readyz 503 while Redis is down",
        )
        down = httpx.get(f"{b.base_url}/readyz")
        assert down.status_code == 503
        assert down.headers["content-type"] == "application/problem+json"
        assert down.json()["cache"]["reachable"] is False
        time.sleep(1.0)  # requests keep flowing with Redis down
        answered_while_down = len(statuses)
        redis_server.start()
        for server in (a, b):
            wait_until(
                lambda s=server: httpx.get(f"{s.base_url}/readyz").status_code == 200,
                what="readyz 200 after Redis returns",
            )
        time.sleep(0.5)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert not failures
    assert statuses and set(statuses) == {200}, sorted(set(statuses))
    assert len(statuses) > answered_while_down > 0
    metrics = httpx.get(f"{a.base_url}/metrics").text
    errors = next(
        line for line in metrics.splitlines() if line.startswith("chunkwise_cache_errors_total")
    )
    assert float(errors.rsplit(" ", 1)[1]) >= 1
    # Reconnected: a fresh forward computed by A is now a hit on B again.
    fresh = {**FORWARD, "query_length": 333}
    httpx.post(f"{a.base_url}/v1/forward", json=fresh, timeout=10)
    assert (
        httpx.post(f"{b.base_url}/v1/forward", json=fresh, timeout=10).json()["cache"]["hits"] == 1
    )


def test_chunkwise_serve_with_two_workers_and_redis(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    import subprocess

    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--workers", "2"],
        env=worker_env(redis_server),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: httpx.get(f"{base}/readyz").status_code == 200, timeout_s=30)
        first = httpx.post(f"{base}/v1/forward", json=FORWARD, timeout=10).json()
        assert first["cache"]["misses"] == 1
        # Fresh connections: the kernel hands them to either worker; all of them hit.
        for _ in range(20):
            with httpx.Client(base_url=base, timeout=10) as client:
                assert client.post("/v1/forward", json=FORWARD).json()["cache"]["hits"] == 1
    finally:
        process.terminate()
        process.wait(timeout=20)
        log.close()


def _scraped_total(text: str, metric: str, route: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(f"{metric}{{") and f'route="{route}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_one_scrape_sees_every_worker(redis_server: RedisServer, tmp_path: Path) -> None:
    """``chunkwise serve --workers 2`` runs prometheus_client's multiprocess mode: whichever
    worker answers a scrape, the request counters are the sum over both."""
    import subprocess

    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    env = {**worker_env(redis_server), "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--workers", "2"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    plan = {"input_length": 3500, "max_batched_tokens": 2048}
    try:
        wait_until(lambda: httpx.get(f"{base}/readyz").status_code == 200, timeout_s=30)
        sent = 40
        for _ in range(sent):  # fresh connections: the kernel spreads them over the workers
            with httpx.Client(base_url=base, timeout=10) as client:
                assert client.post("/v1/chunk-plan", json=plan).status_code == 200
        for _ in range(6):
            with httpx.Client(base_url=base, timeout=10) as client:
                text = client.get("/metrics").text
            counted = _scraped_total(text, "chunkwise_http_requests_total", "/v1/chunk-plan")
            assert counted == sent, text[:2000]
            assert "chunkwise_cache_hits_total" in text
        # Both workers answered some of them: each wrote its own counter file.
        assert len(list(metrics_dir.glob("counter_*.db"))) == 2
    finally:
        process.terminate()
        process.wait(timeout=20)
        log.close()
