"""``APP_HEAVY_PROCESSES``: the heavy lane in child processes of a worker, against a real
redis-server. The answers are the threads' answers; domain errors, the deadline's 504 and the
counters come back from the child; a cheap request is served by the worker alone."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from app import services
from app.models.optimize import OptimizeRequest
from app.settings import Settings
from tests.integration.conftest import RedisServer, Uvicorn
from tests.integration.servers import redis_env, start_server

pytestmark = [pytest.mark.integration]

OPTIMIZE: dict[str, Any] = {
    "engine": "msmodeling",
    "model": "Qwen/Qwen3-32B",
    "device": "ATLAS_800_A2_376T_64G",
    "num_devices": 8,
    "input_length": 3500,
    "output_length": 1500,
    "max_batched_tokens": 8192,
    "tpot_limit_ms": 50,
    "tp_sizes": [2, 4],
}
#: A cold closed-loop search of many layouts: seconds of work, past a 1 s deadline.
HEAVY: dict[str, Any] = {
    "model": "Qwen/Qwen3-32B",
    "device": "ATLAS_800_A2_376T_64G",
    "num_devices": 8,
    "input_length": 7001,
    "output_length": 2048,
    "max_batched_tokens": 512,
    "tpot_limit_ms": 200,
}


@pytest.fixture
def server(redis_server: RedisServer, tmp_path: Path) -> Iterator[Uvicorn]:
    env = redis_env(
        redis_server, heavy_processes="1", request_deadline_s="1", response_cache="false"
    )
    process = start_server(Uvicorn(env, workers=1), tmp_path / "uvicorn.log", timeout_s=60)
    try:
        yield process
    finally:
        process.stop()


def _counted(base_url: str) -> float:
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    line = next(x for x in text.splitlines() if x.startswith("chunkwise_forward_evaluations"))
    return float(line.split()[-1])


def test_the_heavy_lane_in_a_child_answers_as_the_threads_do(server: Uvicorn) -> None:
    url = server.base_url
    response = httpx.post(f"{url}/v1/optimize", json=OPTIMIZE, timeout=60)
    assert response.status_code == 200, response.text
    in_threads = services.optimize(
        services.create_context(Settings(cache_backend="memory", response_cache=False)),
        OptimizeRequest.model_validate(OPTIMIZE),
    ).model_dump(mode="json")
    body = response.json()
    assert body["rows"] == in_threads["rows"] and body["pareto"] == in_threads["pareto"]
    # The child's forwards count in the worker's /metrics.
    assert _counted(url) >= body["stats"]["forward_evaluations"] > 0


def test_domain_errors_and_the_deadline_come_back_from_the_child(server: Uvicorn) -> None:
    url = server.base_url
    unknown = httpx.post(f"{url}/v1/optimize", json={**OPTIMIZE, "model": "acme/X-1B"})
    assert unknown.status_code == 422 and "Qwen/Qwen3-32B" in unknown.json()["valid"]
    started = time.monotonic()
    late = httpx.post(f"{url}/v1/optimize", json=HEAVY, timeout=60)
    assert late.status_code == 504, late.text
    assert late.headers["content-type"] == "application/problem+json"
    assert time.monotonic() - started < 3.0  # deadline 1 s
    # A cheap request meanwhile is the worker's own (the light lane).
    plan = httpx.post(
        f"{url}/v1/chunk-plan", json={"input_length": 3500, "max_batched_tokens": 2048}
    )
    assert plan.status_code == 200 and plan.json()["prefill_num_chunks"] == 2


def test_processes_need_a_shared_cache_backend() -> None:
    with pytest.raises(ValidationError, match="heavy_processes needs cache_backend 'redis'"):
        Settings(heavy_processes=1, cache_backend="memory")
