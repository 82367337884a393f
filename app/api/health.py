"""Liveness, readiness and metrics."""

from __future__ import annotations

import anyio
from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from app.api.deps import ContextDep
from app.api.errors import PROBLEM_JSON, problem_response
from app.models.common import CacheStatus, Health, Problem, Readiness

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """Liveness: the process answers (does not touch the cache)."""
    return Health()


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Problem, "content": {PROBLEM_JSON: {}}}},
)
async def readyz(request: Request, context: ContextDep) -> Response | Readiness:
    """Readiness: the cache backend answers a probe now (503 otherwise)."""
    health = await anyio.to_thread.run_sync(context.cache.check)
    cache = CacheStatus(
        backend=health.backend,
        reachable=health.reachable,
        detail=health.detail,
        writable=health.writable,
    )
    if not (health.reachable and health.writable):
        return problem_response(
            request,
            503,
            "Cache backend unreachable" if not health.reachable else "Cache backend refuses writes",
            f"{health.backend}: {health.detail}",
            kind="cache-unavailable",
            headers={"Retry-After": "1"},
            cache=cache.model_dump(),
        )
    return Readiness(status="ready", cache=cache)


@router.get("/metrics", response_class=Response, include_in_schema=True)
def metrics(request: Request) -> Response:
    """Prometheus text exposition: requests, latency, cache hits/misses/errors, evaluations."""
    return Response(request.app.state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
