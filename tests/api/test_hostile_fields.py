"""The hostile-body set: every top-level field of every request body, replaced by each of a
dozen hostile values (wrong types, out-of-range and non-finite numbers, huge strings, deep
nesting, control characters), against the real app (638 cases). Every answer is a 200 or a 4xx
problem+json (a 503 or 504 when the gate or the deadline answers): never a 500."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings

DEEP: Any = 1
for _ in range(400):
    DEEP = [DEEP]

HOSTILE: dict[str, object] = {
    "null": None,
    "empty list": [],
    "empty object": {},
    "long string": "x" * 20_000,
    "control characters": "a\u0000b\r\nc\u202e",
    "negative": -1,
    "zero": 0,
    "huge float": 1.7e308,
    "huge negative": -1.7e308,
    "beyond int64": 2**70,
    "boolean": True,
    "NaN as a string": "NaN",
    "deep list": DEEP,
}

BASE = {
    "model": "Qwen/Qwen3-0.6B",
    "device": "TEST_DEVICE",
    "input_length": 256,
    "output_length": 16,
}
BODIES: dict[str, dict[str, object]] = {
    "/v1/chunk-plan": {"input_length": 256, "max_batched_tokens": 128},
    "/v1/forward": {"model": "Qwen/Qwen3-0.6B", "device": "TEST_DEVICE", "query_length": 64},
    "/v1/simulate": {**BASE, "concurrency": 2, "engine": "msmodeling"},
    "/v1/optimize": {**BASE, "num_devices": 1, "tpot_limit_ms": 50},
    "/v1/plan": {**BASE, "request_rate": 1, "tpot_limit_ms": 50, "num_requests": 20},
    "/v1/calibrations": {"csv": "case_id,model\nx,y\n"},
}
EXTRA_FIELDS = {
    "/v1/simulate": ["tp_size", "dp_size", "workload", "scheduler", "engine_options",
                     "calibration", "prefix_cache_hit_rate", "num_mtp_tokens"],
    "/v1/optimize": ["tp_sizes", "mode", "top_k", "max_batch_size", "calibration"],
    "/v1/plan": ["percentile", "headroom", "price_per_device_hour", "seed", "tp_size"],
    "/v1/calibrations": ["points", "engine", "free"],
    "/v1/forward": ["num_queries", "tp_size", "quantize_linear_action"],
}  # fmt: skip

CASES = [
    (path, field, name)
    for path, body in BODIES.items()
    for field in sorted({*body, *EXTRA_FIELDS.get(path, ())})
    for name in HOSTILE
]


@pytest.fixture(scope="module")
def hostile_client() -> Iterator[TestClient]:
    settings = Settings(cache_backend="memory", log_level="critical", request_deadline_s=2)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


def test_the_set_is_large() -> None:
    assert len(CASES) >= 200


@pytest.mark.parametrize(("path", "field", "name"), CASES)
def test_a_hostile_field_is_never_a_500(
    hostile_client: TestClient, path: str, field: str, name: str
) -> None:
    body = {**BODIES[path], field: HOSTILE[name]}
    response = hostile_client.post(path, json=body)
    assert response.status_code < 500 or response.status_code in (503, 504), response.text[:500]
    if response.status_code >= 400:
        assert response.headers["content-type"] == "application/problem+json"
