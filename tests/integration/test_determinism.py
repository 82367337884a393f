"""Identical requests give byte-identical bodies across workers, with or without Redis.

Only the fields that describe *how* an answer was obtained may differ: ``elapsed_ms``, the
forward evaluations a request had to compute, and its ``cache`` counters (backend, hits,
misses, round trips, response-cache hit). Everything else -- every float of every row, probe,
timeline step and breakdown -- must be the same bytes whether the numbers were computed by
this worker, read from Redis after another worker computed them, replayed from the response
cache, computed by a worker with the in-process cache, or computed while Redis was down.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.integration.conftest import RedisServer, Uvicorn, wait_until
from tests.integration.servers import redis_env, start_server

pytestmark = [pytest.mark.integration]

#: How an answer was obtained, not what it is.
VOLATILE = {"elapsed_ms", "forward_evaluations", "cache"}

MODEL = {"model": "Qwen/Qwen3-32B", "device": "ATLAS_800_A2_376T_64G"}
REQUESTS: list[tuple[str, dict[str, Any]]] = [
    ("/v1/chunk-plan", {"input_length": 9000, "max_batched_tokens": 2048}),
    (
        "/v1/forward",
        {**MODEL, "num_queries": 4, "query_length": 1024, "context_length": 512, "tp_size": 4},
    ),
    (
        "/v1/simulate",
        {
            **MODEL,
            "input_length": 3500,
            "output_length": 300,
            "max_batched_tokens": 2048,
            "concurrency": 32,
            "tp_size": 4,
            "include_timeline": True,
        },
    ),
    (
        "/v1/simulate",
        {
            **MODEL,
            "input_length": 5000,
            "output_length": 200,
            "max_batched_tokens": 1024,
            "concurrency": 16,
            "tp_size": 8,
            "workload": "closed_loop",
            "requests_per_client": 3,
            "scheduler": {"name": "vllm", "max_num_seqs": 8},
        },
    ),
    (
        "/v1/simulate",
        {
            **MODEL,
            "input_length": 5000,
            "output_length": 100,
            "max_batched_tokens": 1024,
            "concurrency": 16,
            "tp_size": 8,
            "include_timeline": True,
            "scheduler": {"name": "sglang_mixed_chunk", "mixed_latency": "fused"},
        },
    ),
    (
        "/v1/optimize",
        {
            **MODEL,
            "num_devices": 8,
            "input_length": 3500,
            "output_length": 1500,
            "max_batched_tokens": 2048,
            "tpot_limit_ms": 50,
            "tp_sizes": [4, 8],
        },
    ),
    (
        "/v1/optimize",
        {
            **MODEL,
            "num_devices": 8,
            "input_length": 3500,
            "output_length": 1500,
            "max_batched_tokens": 8192,
            "ttft_limit_ms": 2000,
            "tpot_limit_ms": 50,
            "mode": "pd_ratio",
            "prefill_devices_per_instance": 4,
            "decode_devices_per_instance": 8,
        },
    ),
]


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def canonical(raw: bytes) -> bytes:
    """The body without the volatile fields, keys and floats in the order/repr the server sent.

    ``json`` keeps key order and Python floats round-trip exactly through ``repr``, so two
    bodies are equal here iff they were byte-identical outside the volatile fields.
    """
    return json.dumps(_strip(json.loads(raw)), separators=(",", ":"), allow_nan=False).encode()


def post(base_url: str, path: str, body: dict[str, Any]) -> bytes:
    response = httpx.post(f"{base_url}{path}", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.content


@pytest.fixture
def workers(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[Uvicorn, Uvicorn]]:
    env = redis_env(redis_server)
    first, second = Uvicorn(env=env, workers=1), Uvicorn(env=env, workers=1)
    try:
        start_server(first, tmp_path / "a.log")
        start_server(second, tmp_path / "b.log")
        yield first, second
    finally:
        first.stop()
        second.stop()


def test_identical_requests_give_identical_bodies(
    workers: tuple[Uvicorn, Uvicorn], redis_server: RedisServer
) -> None:
    a, b = workers
    with TestClient(create_app(Settings(cache_backend="memory", log_level="warning"))) as local:
        for path, body in REQUESTS:
            computed = post(a.base_url, path, body)  # cold: computed by A, written to Redis
            reference = canonical(computed)
            bodies = {
                "B, read from Redis": post(b.base_url, path, body),
                "A again (warm / response cache)": post(a.base_url, path, body),
                "in-process cache, cold": local.post(path, json=body).content,
                "in-process cache, warm": local.post(path, json=body).content,
            }
            for source, raw in bodies.items():
                assert canonical(raw) == reference, f"{path} differs: {source}"
            if path != "/v1/chunk-plan":  # the latency cache really was exercised
                assert json.loads(computed) != json.loads(bodies["B, read from Redis"])

        redis_server.stop()
        wait_until(
            lambda: httpx.get(f"{a.base_url}/readyz").status_code == 503,
            what="readyz 503 with Redis down",
        )
        for path, body in REQUESTS:
            without_redis = post(a.base_url, path, {**body})
            assert canonical(without_redis) == canonical(local.post(path, json=body).content), (
                f"{path} differs with Redis down"
            )
