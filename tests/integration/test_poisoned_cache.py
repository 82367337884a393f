"""Issue 15's D7 and D9 against a real redis-server: a poisoned value under a real key never
changes an answer; it is counted, recomputed and overwritten with the computed value."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.models.forward import ForwardRequest
from app.models.optimize import OptimizeRequest
from app.models.simulate import SimulateRequest
from app.services.context import create_context
from app.services.forward import forward
from app.services.optimize import optimize as optimize_service
from app.services.simulate import simulate
from app.settings import Settings
from tests.integration.conftest import RedisServer

pytestmark = pytest.mark.integration

SIMULATE = {
    "model": "Qwen/Qwen3-8B",
    "device": "NVIDIA_H100_SXM_80G",
    "input_length": 2048,
    "output_length": 64,
    "max_batched_tokens": 1024,
    "concurrency": 8,
    "tp_size": 2,
}
#: Written in place of a record's latency (the rest of the record kept) ...
IN_RECORD = ["-1", "0", "NaN", "Infinity", '"12.5"', "true", "null", "1e308", "1.5e15"]
#: ... or in place of the whole record: an object, or JSON nested past its recursion limit
#: (unparsable: a plain miss rather than an invalid value).
WHOLE = ['{"breakdown": 1}', "[" * 5000 + "]" * 5000]


def _settings(server: RedisServer) -> Settings:
    return Settings(cache_backend="redis", redis_url=server.url, log_level="warning")


def _run(server: RedisServer, call: Any) -> Any:
    context = create_context(_settings(server))
    try:
        return call(context), context.cache.stats.snapshot()
    finally:
        context.close()


def _lat_keys(server: RedisServer) -> list[str]:
    return sorted(
        str(k, "utf-8") if isinstance(k, bytes) else k
        for k in server.client().keys("chunkwise:v1:lat:*")
    )


def _poison(server: RedisServer, raw: str, *, whole: bool) -> None:
    client = server.client()
    for key in _lat_keys(server):
        value = client.get(key)
        assert value is not None
        rest = json.loads(value)[1:]
        client.set(key, raw if whole else f"[{raw},{','.join(map(str, rest))}]")


@pytest.mark.parametrize(
    ("raw", "whole"),
    [(raw, False) for raw in IN_RECORD] + [(raw, True) for raw in WHOLE],
    ids=[*IN_RECORD, "object", "deep"],
)
def test_poisoned_latency_records_never_change_a_simulation(
    redis_server: RedisServer, raw: str, whole: bool
) -> None:
    request = SimulateRequest.model_validate(SIMULATE)
    clean, _ = _run(redis_server, lambda c: simulate(c, request))
    _poison(redis_server, raw, whole=whole)
    again, stats = _run(redis_server, lambda c: simulate(c, request))
    assert (again.ttft_ms, again.tpot_ms, again.makespan_ms) == (
        clean.ttft_ms,
        clean.tpot_ms,
        clean.makespan_ms,
    )
    assert again.stats.forward_evaluations == clean.stats.shapes  # all recomputed
    parsable = not raw.startswith("[")
    assert stats["invalid"] == (clean.stats.shapes if parsable else 0)
    # ... and overwritten: the next run reads every record back as a hit.
    third, stats = _run(redis_server, lambda c: simulate(c, request))
    assert third.stats.forward_evaluations == 0 and stats["invalid"] == 0


@pytest.mark.parametrize("raw", ['{"breakdown": 1}', '{"latency_ms": -3}', "[" * 5000])
def test_a_poisoned_forward_document_is_recomputed(redis_server: RedisServer, raw: str) -> None:
    request = ForwardRequest.model_validate(
        {
            "model": "Qwen/Qwen3-8B",
            "device": "NVIDIA_H100_SXM_80G",
            "num_queries": 1,
            "query_length": 512,
        }
    )
    clean, _ = _run(redis_server, lambda c: forward(c, request))
    client = redis_server.client()
    (key,) = client.keys("chunkwise:v1:fwd:*")
    client.set(key, raw)
    again, stats = _run(redis_server, lambda c: forward(c, request))
    assert again.latency_ms == clean.latency_ms and again.cache.misses == 1
    assert stats["invalid"] == (0 if raw.startswith("[") else 1)  # unparsable = a plain miss
    assert json.loads(client.get(key) or b"null")["latency_ms"] == clean.latency_ms


def test_a_forged_optimize_response_is_not_served(redis_server: RedisServer) -> None:
    """D9: a body stored under a request's response-cache key that echoes another request (or
    any body failing the schema) is not that request's answer."""
    body = _optimize_body()
    request = OptimizeRequest.model_validate(body)
    other = OptimizeRequest.model_validate({**body, "input_length": 1024})
    clean, _ = _run(redis_server, lambda c: optimize_service(c, request))
    forged_source, _ = _run(redis_server, lambda c: optimize_service(c, other))
    client = redis_server.client()
    keys = sorted(client.keys("chunkwise:v1:resp:optimize:*"))
    assert len(keys) == 2
    forged = forged_source.model_dump(mode="json")
    for key in keys:  # every response key now holds the other request's body
        client.set(key, json.dumps(forged))
    again, stats = _run(redis_server, lambda c: optimize_service(c, request))
    assert again.best is not None and clean.best is not None
    assert again.best.throughput_tokens_s == clean.best.throughput_tokens_s
    assert not again.stats.cache.response_cache_hit and stats["invalid"] >= 1


def test_a_memory_figure_beyond_its_range_is_recomputed(redis_server: RedisServer) -> None:
    request = SimulateRequest.model_validate(SIMULATE)
    clean, _ = _run(redis_server, lambda c: simulate(c, request))
    client = redis_server.client()
    for key in _lat_keys(redis_server):
        record = json.loads(client.get(key) or b"null")
        client.set(key, json.dumps([record[0], -1e300, *record[2:]]))
    again, stats = _run(redis_server, lambda c: simulate(c, request))
    assert again.model_dump(exclude={"stats"}) == clean.model_dump(exclude={"stats"})
    assert stats["invalid"] == clean.stats.shapes


def _optimize_body() -> dict[str, Any]:
    return {
        "model": "Qwen/Qwen3-8B",
        "device": "NVIDIA_H100_SXM_80G",
        "num_devices": 2,
        "input_length": 2048,
        "output_length": 256,
        "max_batched_tokens": 2048,
        "tpot_limit_ms": 50,
    }


@pytest.mark.parametrize(
    ("where", "value"),
    [("ttft_ms", -5.0), ("tpot_ms", 1e300), ("throughput_tokens_s", -1.0)],
)
def test_a_forged_optimize_body_echoing_its_request_is_not_served(
    redis_server: RedisServer, where: str, value: float
) -> None:
    """N1: every served figure is checked, not only the echo: a body under the request's own
    key that echoes it exactly but holds a figure no answer has is a bad cache value."""
    request = OptimizeRequest.model_validate(_optimize_body())
    clean, _ = _run(redis_server, lambda c: optimize_service(c, request))
    assert clean.best is not None
    client = redis_server.client()
    (key,) = client.keys("chunkwise:v1:resp:optimize:*")
    forged = json.loads(client.get(key) or b"null")
    forged["best"][where] = value
    client.set(key, json.dumps(forged))
    again, stats = _run(redis_server, lambda c: optimize_service(c, request))
    assert not again.stats.cache.response_cache_hit and stats["invalid"] == 1
    assert again.best is not None
    assert getattr(again.best, where) == getattr(clean.best, where)
    # ... and overwritten with the computed answer.
    assert json.loads(client.get(key) or b"null")["best"][where] == getattr(clean.best, where)


def test_a_forward_document_with_a_negative_figure_is_recomputed(
    redis_server: RedisServer,
) -> None:
    request = ForwardRequest.model_validate(
        {
            "model": "Qwen/Qwen3-8B",
            "device": "NVIDIA_H100_SXM_80G",
            "num_queries": 1,
            "query_length": 512,
        }
    )
    clean, _ = _run(redis_server, lambda c: forward(c, request))
    client = redis_server.client()
    (key,) = client.keys("chunkwise:v1:fwd:*")
    document = json.loads(client.get(key) or b"null")
    document["latency_ms"] = 1e300
    client.set(key, json.dumps(document))
    again, stats = _run(redis_server, lambda c: forward(c, request))
    assert again.latency_ms == clean.latency_ms and again.cache.misses == 1
    assert stats["invalid"] == 1
