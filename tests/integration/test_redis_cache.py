"""The Redis backend against a real redis-server: batching, TTL, failure and reconnection."""

from __future__ import annotations

import logging

import pytest

from app.cache import RedisLatencyCache
from tests.integration.conftest import RedisServer, wait_until

pytestmark = pytest.mark.integration


def make_cache(server: RedisServer, retry_interval_s: float = 0.0) -> RedisLatencyCache:
    return RedisLatencyCache(
        server.url,
        ttl_s=60,
        connect_timeout_s=0.2,
        socket_timeout_s=0.5,
        retry_interval_s=retry_interval_s,
    )


def test_round_trip_with_ttl(redis_server: RedisServer) -> None:
    cache = make_cache(redis_server)
    try:
        assert cache.get_many(["k1", "k2"]) == [None, None]
        cache.set_many({"k1": {"latency_ms": 1.25}, "k2": {"latency_ms": 3.5}})
        assert cache.get_many(["k2", "k1", "k3"]) == [
            {"latency_ms": 3.5},
            {"latency_ms": 1.25},
            None,
        ]
        raw = redis_server.client()
        assert 0 < int(raw.ttl("k1")) <= 60
        assert raw.get("k1") == b'{"latency_ms":1.25}'
        assert cache.stats.snapshot() == {
            "hits": 2,
            "misses": 3,
            "errors": 0,
            "writes": 2,
            "invalid": 0,
        }
        assert cache.check().reachable
    finally:
        cache.close()


def test_one_mget_and_one_pipeline_per_batch(redis_server: RedisServer) -> None:
    cache = make_cache(redis_server)
    raw = redis_server.client()
    try:
        raw.config_resetstat()
        keys = [f"k{i}" for i in range(50)]
        cache.get_many(keys)
        cache.set_many({key: {"v": i} for i, key in enumerate(keys)})
        stats = raw.info("commandstats")
        assert stats["cmdstat_mget"]["calls"] == 1
        assert stats["cmdstat_set"]["calls"] == 50  # pipelined: one round trip, 50 commands
    finally:
        cache.close()


def test_a_corrupt_entry_is_a_miss(redis_server: RedisServer) -> None:
    cache = make_cache(redis_server)
    try:
        redis_server.client().set("bad", b"\xff not json")
        assert cache.get_many(["bad"]) == [None]
    finally:
        cache.close()


def test_redis_stop_degrades_then_reconnects(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    cache = make_cache(redis_server)
    try:
        cache.set_many({"k": {"v": 1}})
        redis_server.stop()
        with caplog.at_level(logging.WARNING, logger="chunkwise.cache"):
            assert cache.get_many(["k"]) == [None]  # degraded: a miss, not an exception
            cache.set_many({"k2": {"v": 2}})  # dropped, not raised
        assert cache.stats.errors >= 1
        assert any("unreachable" in r.getMessage() for r in caplog.records)
        assert not cache.check().reachable
        redis_server.start()  # same port, empty data set
        assert cache.check().reachable
        cache.set_many({"k": {"v": 3}})
        assert cache.get_many(["k"]) == [{"v": 3}]
    finally:
        cache.close()


def test_failures_are_skipped_for_the_retry_interval(redis_server: RedisServer) -> None:
    cache = make_cache(redis_server, retry_interval_s=60)
    try:
        redis_server.stop()
        cache.get_many(["a"])
        errors = cache.stats.errors
        for _ in range(20):
            assert cache.get_many(["a"]) == [None]
        assert cache.stats.errors == errors  # no further round trips while the breaker is open
        redis_server.start()
        assert cache.check().reachable  # a probe closes the breaker at once
        assert cache.get_many(["a"]) == [None]
        assert cache.stats.errors == errors
    finally:
        cache.close()


@pytest.mark.fault
def test_a_frozen_redis_costs_one_socket_timeout_then_recovers(redis_server: RedisServer) -> None:
    import os
    import signal
    import time

    cache = make_cache(redis_server, retry_interval_s=0.0)
    assert redis_server.process is not None
    pid = redis_server.process.pid
    try:
        cache.set_many({"k": {"v": 1}})
        os.kill(pid, signal.SIGSTOP)  # accepts nothing, answers nothing: a hung server
        try:
            start = time.monotonic()
            assert cache.get_many(["k"]) == [None]
            elapsed = time.monotonic() - start
            assert elapsed < 2.0, elapsed  # socket timeout 0.5 s, no client retries
            assert not cache.check().reachable
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_until(lambda: cache.check().reachable, what="redis to answer again")
        assert cache.get_many(["k"]) == [{"v": 1}]
    finally:
        cache.close()


def test_fused_mixed_steps_are_shared_through_redis(redis_server: RedisServer) -> None:
    """A fused simulation computed by one context is read back by another (another worker):
    the warm one computes nothing, and the mixed steps live under their own ``m`` keys."""
    from app.core.cost import MixedShape
    from app.core.scheduler import make_scheduler
    from app.core.workload import plan_closed_loop
    from app.models.simulate import SimulateRequest
    from app.services.context import create_context
    from app.services.resolve import resolve_profile
    from app.services.simulate import simulate
    from app.services.sizing import workload_spec
    from app.settings import Settings

    request = SimulateRequest.model_validate(
        {
            "model": "Qwen/Qwen3-32B",
            "device": "NVIDIA_H100_SXM_80G",
            "input_length": 4096,
            "output_length": 128,
            "max_batched_tokens": 2048,
            "concurrency": 16,
            "tp_size": 8,
            "scheduler": {"name": "vllm", "mixed_latency": "fused"},
        }
    )
    settings = Settings(cache_backend="redis", redis_url=redis_server.url, log_level="warning")
    raw = redis_server.client()
    raw.flushall()
    responses = []
    for _ in range(2):  # two contexts: nothing shared but Redis
        context = create_context(settings)
        try:
            responses.append(simulate(context, request))
        finally:
            context.close()
    cold, warm = responses
    assert cold.stats.forward_evaluations == cold.stats.shapes > 0
    assert warm.stats.forward_evaluations == 0
    assert warm.stats.cache.hits == cold.stats.shapes
    assert warm.ttft_ms == cold.ttft_ms and warm.makespan_ms == cold.makespan_ms
    # The request's engine (vllm) runs a closed loop: its plan, not a burst's (the turnaround's
    # first wave makes a mixed step no burst has).
    plan = plan_closed_loop(
        workload_spec(request, 8, resolve_profile(request)),
        16,
        make_scheduler("vllm", mixed_latency="fused"),
    )
    mixed = [s for s in plan.shapes if isinstance(s, MixedShape)]
    assert mixed
    keys = [k if isinstance(k, str) else k.decode() for k in raw.keys("chunkwise:v1:lat:*")]
    assert sum(":m:" in k for k in keys) == len(mixed)
    assert len(keys) == cold.stats.shapes  # every record one key, none overwritten
