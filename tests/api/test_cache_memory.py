from __future__ import annotations

import pytest

from app.cache import (
    CACHE_SCHEMA_VERSION,
    LatencyCache,
    MemoryLatencyCache,
    RedisLatencyCache,
    create_cache,
    identity_digest,
    shape_key,
)
from app.core.cost import ForwardShape
from app.settings import Settings


def test_keys_are_versioned_and_carry_the_shape() -> None:
    digest = identity_digest("model=qwen3-32b|device=A2|tp=4|quant=DISABLED")
    key = shape_key(digest, ForwardShape(is_decode=True, concurrency=64, query_len=1, seq_len=4250))
    assert key == f"chunkwise:v{CACHE_SCHEMA_VERSION}:lat:{digest}:d:64:1:4250"
    prefill = shape_key(
        digest, ForwardShape(is_decode=False, concurrency=64, query_len=1, seq_len=4250)
    )
    assert prefill != key


def test_digest_separates_every_identity_field() -> None:
    base = "model=m|device=d|tp=4|quant=DISABLED"
    assert identity_digest(base) == identity_digest(base)
    assert identity_digest(base) != identity_digest(base.replace("tp=4", "tp=8"))
    assert identity_digest(base) != identity_digest(base.replace("DISABLED", "W8A8_DYNAMIC"))


def test_memory_cache_round_trip_and_stats() -> None:
    cache = MemoryLatencyCache(max_entries=10)
    assert isinstance(cache, LatencyCache)
    assert cache.get_many(["a", "b"]) == [None, None]
    cache.set_many({"a": {"latency_ms": 1.5}, "b": {"latency_ms": 2.0}})
    assert cache.get_many(["b", "a", "c"]) == [{"latency_ms": 2.0}, {"latency_ms": 1.5}, None]
    assert cache.stats.snapshot() == {
        "hits": 2,
        "misses": 3,
        "errors": 0,
        "writes": 2,
        "invalid": 0,
    }


def test_memory_cache_evicts_least_recently_used() -> None:
    cache = MemoryLatencyCache(max_entries=2)
    cache.set_many({"a": {"v": 1}, "b": {"v": 2}})
    cache.get_many(["a"])  # a is now the most recent
    cache.set_many({"c": {"v": 3}})
    assert cache.get_many(["a", "b", "c"]) == [{"v": 1}, None, {"v": 3}]


def test_values_that_are_not_strict_json_are_not_cached() -> None:
    cache = MemoryLatencyCache()
    cache.set_many({"nan": {"v": float("nan")}, "ok": {"v": 1.0}})
    assert cache.get_many(["nan", "ok"]) == [None, {"v": 1.0}]


def test_settings_select_the_backend() -> None:
    assert isinstance(create_cache(Settings()), MemoryLatencyCache)
    redis_cache = create_cache(Settings(cache_backend="redis", redis_url="redis://127.0.0.1:1/0"))
    assert isinstance(redis_cache, RedisLatencyCache)
    redis_cache.close()


def test_memory_cache_is_bounded_by_bytes_too() -> None:
    cache = MemoryLatencyCache(max_entries=1000, max_bytes=200)
    cache.set_many({f"k{i}": {"pad": "x" * 40} for i in range(10)})
    assert cache.size_bytes <= 200
    assert 0 < len(cache) < 10
    assert cache.get_many(["k9"]) != [None]  # the newest survive
    cache.set_many({"k9": {"pad": "y"}})  # replacing an entry keeps the count exact
    assert cache.size_bytes == sum(len(k) + len(v) for k, v in cache._data.items())


def test_keys_tell_budgets_apart_through_their_chunk_shapes() -> None:
    from app.core.chunking import prefill_chunk_plan

    digest = identity_digest("model|device|tp4|quant")

    def keys(budget: int) -> set[str]:
        return {
            shape_key(
                digest,
                ForwardShape(
                    is_decode=False, concurrency=1, query_len=c.query_len, seq_len=c.seq_len
                ),
            )
            for c in prefill_chunk_plan(10_000, budget)
        }

    assert len(keys(4096)) == 3 and len(keys(2048)) == 5
    # Only the identical shape is shared: the last chunk, 1808 new tokens on 10000 of context.
    shared = keys(4096) & keys(2048)
    assert shared == {f"chunkwise:v{CACHE_SCHEMA_VERSION}:lat:{digest}:p:1:1808:10000"}


def test_one_request_writes_at_most_the_per_request_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """W7: a request that computes more forwards than the cap still answers, and writes only
    the first ``MAX_KEYS_WRITTEN_PER_REQUEST`` of them to the shared cache."""
    from app.core import limits
    from app.models.simulate import SimulateRequest
    from app.services.context import create_context
    from app.services.simulate import simulate
    from app.settings import Settings

    request = SimulateRequest.model_validate(
        {
            "model": "Qwen/Qwen3-8B",
            "device": "NVIDIA_H100_SXM_80G",
            "input_length": 4096,
            "output_length": 32,
            "max_batched_tokens": 512,
            "concurrency": 16,
        }
    )
    uncapped_context = create_context(Settings(cache_backend="memory"))
    uncapped = simulate(uncapped_context, request)
    assert uncapped.stats.forward_evaluations > 10
    monkeypatch.setattr(limits, "MAX_KEYS_WRITTEN_PER_REQUEST", 10)
    context = create_context(Settings(cache_backend="memory"))
    capped = simulate(context, request)
    assert capped.ttft_ms == uncapped.ttft_ms and capped.tpot_ms == uncapped.tpot_ms
    assert context.cache.stats.snapshot()["writes"] == 10
    again = simulate(context, request)  # the ten are hits, the rest computed again
    assert again.stats.cache.hits == 10
    assert again.stats.forward_evaluations == uncapped.stats.forward_evaluations - 10


def test_a_search_with_other_limits_replays_the_plans_with_the_same_rows() -> None:
    """The process's plan cache: the second search plans nothing new (its limits do not plan)
    and answers as a context without the cache does; ``APP_PLAN_CACHE_ITEMS=0`` keeps none."""
    from app.models.optimize import OptimizeRequest, OptimizeResponse
    from app.services.context import create_context
    from app.services.optimize import optimize

    body = {
        "model": "Qwen/Qwen3-32B",
        "device": "NVIDIA_H200_SXM_141G",
        "quantize_linear_action": "FP8",
        "num_devices": 2,
        "input_length": 2048,
        "output_length": 256,
        "ttft_limit_ms": 2000,
        "tpot_limit_ms": 40,
        "tp_sizes": [2],
    }
    settings = Settings(cache_backend="memory", response_cache=False)
    context = create_context(settings)
    optimize(context, OptimizeRequest.model_validate(body))
    planned = len(context.plans)
    assert planned > 0
    other = OptimizeRequest.model_validate({**body, "tpot_limit_ms": 30, "ttft_limit_ms": 900})
    reused = optimize(context, other)
    fresh = optimize(create_context(settings.model_copy(update={"plan_cache_items": 0})), other)
    assert isinstance(reused, OptimizeResponse) and isinstance(fresh, OptimizeResponse)
    assert reused.rows == fresh.rows and reused.best == fresh.best
    # Only the sizes the first search never probed were planned.
    assert len(context.plans) - planned < reused.stats.probes
