"""Faults under load: Redis stopped, restarted and frozen while two workers serve mixed traffic.

The service runs as ``uvicorn --workers 2`` (what ``chunkwise serve --workers 2`` runs) against a
real ``redis-server`` on loopback; the load is ``bench.load.run_load`` (closed-loop clients, a
mix of warm and cold optimize/simulate/forward requests, bounded in time and count).

* Redis stopped mid-load: every request is still answered 200 with the right body (the warm
  bodies equal the ones an in-process app computes), ``/readyz`` turns 503 while ``/healthz``
  stays 200; Redis restarted: ``/readyz`` is 200 again and the cache is used again (a forward
  computed once is a hit on later connections) by the same worker processes.
* Redis frozen (``SIGSTOP``: connections accepted, nothing answered): no request waits much
  past the configured socket timeout; ``/readyz`` answers 503 in about that time; then
  ``SIGCONT`` and the cache is used again.

(``tests/integration/test_two_workers.py`` stops Redis under a forward-only load between two
single-worker servers; ``test_redis_cache.py`` freezes Redis under the cache client alone.)
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from bench.load import WARM, LoadResult, run_load, warm_up
from tests.integration.conftest import RedisServer, Uvicorn, wait_until
from tests.integration.servers import REDIS_RETRY_INTERVAL_S, redis_env, start_server
from tests.integration.test_determinism import canonical

pytestmark = [pytest.mark.integration, pytest.mark.fault]

SOCKET_TIMEOUT_S = 0.5
#: Headroom for the computation itself on a busy 2-core machine (the load generator shares it).
COMPUTE_MARGIN_S = 1.5


def worker_pids(server: Uvicorn) -> set[int]:
    assert server.process is not None
    pid = server.process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return {int(child) for child in children}


def reference_bodies() -> dict[str, bytes]:
    """The warm bodies as an in-process app (no Redis) computes them."""
    with TestClient(create_app(Settings(cache_backend="memory", log_level="warning"))) as app:
        return {
            f"{kind}_warm": canonical(app.post(path, json=body).content)
            for kind, (path, body) in WARM.items()
        }


def assert_all_right(result: LoadResult, reference: dict[str, bytes]) -> None:
    assert result.requests > 0
    assert not result.errors, result.errors[:5]
    assert result.server_errors == 0 and set(result.statuses) == {200}, result.statuses
    for kind, bodies in result.bodies.items():
        assert bodies == {reference[kind]}, f"{kind}: {len(bodies)} distinct bodies"


def cache_hit_on_fresh_connections(base_url: str, query_length: int) -> list[int]:
    """A new forward once, then on 8 fresh connections (either worker): their cache hits."""
    body = {**WARM["forward"][1], "query_length": query_length, "context_length": 0}
    httpx.post(f"{base_url}/v1/forward", json=body, timeout=30).raise_for_status()
    hits = []
    for _ in range(8):
        with httpx.Client(base_url=base_url, timeout=30) as client:
            hits.append(client.post("/v1/forward", json=body).json()["cache"]["hits"])
    return hits


@pytest.fixture
def service(redis_server: RedisServer, tmp_path: Path) -> Iterator[Uvicorn]:
    env = redis_env(redis_server, redis_socket_timeout_s=str(SOCKET_TIMEOUT_S))
    server = Uvicorn(env=env, workers=2)
    try:
        start_server(server, tmp_path / "serve.log")
        wait_until(
            lambda: httpx.get(f"{server.base_url}/readyz", timeout=2).status_code == 200,
            timeout_s=30,
            what="both workers ready",
        )
        warm_up("127.0.0.1", server.port)
        yield server
    finally:
        server.stop()


def background_load(
    server: Uvicorn, duration_s: float, clients: int = 16
) -> tuple[threading.Thread, dict[str, LoadResult], threading.Event]:
    """Start ``run_load`` in a thread; returns (thread, result holder, stop event)."""
    holder: dict[str, LoadResult] = {}
    stop = threading.Event()

    def run() -> None:
        holder["result"] = run_load(
            "127.0.0.1",
            server.port,
            clients=clients,
            duration_s=duration_s,
            max_requests_per_client=2_000,
            stop=stop,
            keep_bodies=canonical,
        )

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, holder, stop


def test_redis_stopped_and_restarted_under_load(
    service: Uvicorn, redis_server: RedisServer
) -> None:
    reference = reference_bodies()
    pids = worker_pids(service)
    assert len(pids) >= 2
    base = service.base_url
    thread, holder, stop = background_load(service, duration_s=20, clients=32)
    try:
        time.sleep(1.5)
        redis_server.stop()
        wait_until(
            lambda: httpx.get(f"{base}/readyz", timeout=5).status_code == 503,
            what="/readyz 503 with Redis stopped",
        )
        for _ in range(6):  # fresh connections: both workers say the same
            ready = httpx.get(f"{base}/readyz", timeout=5)
            assert ready.status_code == 503
            assert ready.headers["content-type"] == "application/problem+json"
            assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
        time.sleep(2.0)  # the load keeps going with Redis down
        redis_server.start()  # same port, empty data set
        wait_until(
            lambda: all(
                httpx.get(f"{base}/readyz", timeout=5).status_code == 200 for _ in range(6)
            ),
            what="/readyz 200 on both workers after Redis returns",
        )
        time.sleep(1.5)  # and with Redis back
    finally:
        stop.set()
        thread.join(timeout=60)
    result = holder["result"]
    assert_all_right(result, reference)
    # The cache is used again, by the same worker processes.
    assert cache_hit_on_fresh_connections(base, 4321) == [1] * 8
    assert int(redis_server.client().dbsize()) > 0
    assert worker_pids(service) == pids


def timed(method: str, url: str, **kwargs: Any) -> tuple[float, httpx.Response]:
    started = time.monotonic()
    response = httpx.request(method, url, timeout=30, **kwargs)
    return time.monotonic() - started, response


def test_frozen_redis_costs_at_most_a_socket_timeout(
    service: Uvicorn, redis_server: RedisServer
) -> None:
    reference = reference_bodies()
    base = service.base_url
    assert redis_server.process is not None
    pid = redis_server.process.pid
    os.kill(pid, signal.SIGSTOP)  # accepts connections, answers nothing: a hung Redis
    try:
        elapsed, ready = timed("GET", f"{base}/readyz")
        assert ready.status_code == 503
        assert elapsed < SOCKET_TIMEOUT_S + COMPUTE_MARGIN_S, elapsed
        elapsed, health = timed("GET", f"{base}/healthz")
        assert health.status_code == 200 and elapsed < 0.5, elapsed

        # One request of each kind on fresh connections: none waits past one socket timeout
        # (plus its computation), and the warm ones still give the right answer.
        for kind, (path, body) in WARM.items():
            for variant in (body, {**body, "input_length": 4321} if kind != "forward" else body):
                elapsed, response = timed("POST", f"{base}{path}", json=variant)
                assert response.status_code == 200, response.text
                assert elapsed < SOCKET_TIMEOUT_S + COMPUTE_MARGIN_S, (kind, elapsed)
            assert (
                canonical(httpx.post(f"{base}{path}", json=body, timeout=30).content)
                == reference[f"{kind}_warm"]
            )

        # Under load the same bound holds for every request (nothing queues behind Redis).
        thread, holder, _stop = background_load(service, duration_s=4, clients=8)
        thread.join(timeout=60)
        result = holder["result"]
        assert_all_right(result, reference)
        slowest_s = max(max(values) for values in result.latencies_ms.values()) / 1e3
        assert slowest_s < SOCKET_TIMEOUT_S + 2 * COMPUTE_MARGIN_S, slowest_s
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_until(
        lambda: all(httpx.get(f"{base}/readyz", timeout=5).status_code == 200 for _ in range(6)),
        what="/readyz 200 after Redis thaws",
    )
    # /readyz may have reached one worker only: the other may still be inside the retry
    # interval of a round trip that timed out just before the thaw (it computes locally and
    # writes nothing until then). Past one socket timeout plus that interval, both are back.
    time.sleep(SOCKET_TIMEOUT_S + REDIS_RETRY_INTERVAL_S)
    assert cache_hit_on_fresh_connections(base, 5432) == [1] * 8


def test_load_module_is_bounded_to_loopback() -> None:
    with pytest.raises(ValueError, match="loopback"):
        run_load("10.0.0.1", 80, clients=1, duration_s=0.1)
    assert json.dumps(WARM)  # the request bodies are plain JSON
