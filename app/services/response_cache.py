"""The whole-response cache of ``POST /v1/optimize``: an identical request is answered from
the cache backend, checked like any cached value before it is used."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, TypeVar

from pydantic import ValidationError

from app.cache import JSONValue, all_finite, response_key
from app.core.runner import RUNNER_MODEL_VERSION
from app.models.common import CacheCounters
from app.models.optimize import DisaggOptimizeResponse, OptimizeRequest, OptimizeResponse
from app.services.finite import out_of_range_paths

if TYPE_CHECKING:
    from app.services.context import ServiceContext


ResponseT = TypeVar("ResponseT", OptimizeResponse, DisaggOptimizeResponse)


def optimize_key(request: OptimizeRequest) -> str:
    """The response's key: ``response_key`` folds in the application version, this the
    runner's, so an upgrade never serves an older answer."""
    return response_key("optimize", f"{RUNNER_MODEL_VERSION}|{request.model_dump_json()}")


def cached_response(
    context: ServiceContext,
    key: str,
    cached: JSONValue | None,
    request: OptimizeRequest,
    started: float,
    schema: type[ResponseT],
) -> ResponseT | None:
    """A response-cache hit, re-stamped with this request's timing and cache counters.

    Checked like any cached value: the response ``schema``, every figure in its range (finite,
    not negative but memory left, a latency within ``MAX_CACHED_LATENCY_MS``: a forged body
    with ``ttft_ms: -5.0`` is no answer), and the echo of exactly this request (a body stored
    under another request's key is not its answer); anything else is rejected (counted,
    logged once) and the search runs and overwrites it."""
    if cached is None:
        return None
    try:
        in_range = all_finite(cached) and not out_of_range_paths(cached)
        response = schema.model_validate(cached) if in_range else None
    except ValidationError:
        response = None
    if response is None or response.input != request:
        context.cache.stats.reject(key, "not this request's optimize response")
        return None
    context.stats.add(response_cache_hits=1)
    response.stats.elapsed_ms = (time.perf_counter() - started) * 1e3
    response.stats.cache = CacheCounters(
        backend=context.cache.backend, round_trips=1, response_cache_hit=True
    )
    return response
