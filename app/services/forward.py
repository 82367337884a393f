"""One forward pass (latency, per-op breakdown, memory): ``POST /v1/forward`` and
``chunkwise forward`` both go through :func:`run_forward` / :func:`forward`.

    run = run_forward(request, allow_paths=True)     # uncached: the CLI's table and JSON
    run.result, run.to_dict()
    forward(context, request) -> ForwardResponse     # the API: the same document, cached
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.cache import JSONValue, all_finite, identity_digest, shape_key
from app.core.cost import ForwardShape
from app.core.runner import (
    ForwardResult,
    ModelRunner,
    forward_request,
    forward_to_dict,
    parallel_layout,
)
from app.services.context import ServiceContext
from app.services.finite import out_of_range_paths
from app.services.resolve import derived_quantization, resolve_deployment

if TYPE_CHECKING:  # the wire models load with the first forward, not with app.services
    from app.models.common import CacheCounters
    from app.models.forward import ForwardRequest, ForwardResponse


@dataclass(frozen=True, slots=True, kw_only=True)
class ForwardPlan:
    """The runner and the shape of a forward request, before anything is computed."""

    runner: ModelRunner
    shape: ForwardShape
    mtp_draft_tokens: int  # the MTP draft passes of a decode step (0 for a prefill)

    def cache_key(self) -> str:
        """The latency-cache key of the full forward document (kind ``fwd``)."""
        identity = f"{self.runner.identity()}|draft={self.mtp_draft_tokens}"
        return shape_key(identity_digest(identity), self.shape, kind="fwd")

    def run(self) -> ForwardRun:
        result = self.runner.run_inference(self.shape, mtp_draft_tokens=self.mtp_draft_tokens)
        return ForwardRun(runner=self.runner, result=result)


@dataclass(frozen=True, slots=True, kw_only=True)
class ForwardRun:
    """A computed forward: the runner (names, layout, identity) and its result."""

    runner: ModelRunner
    result: ForwardResult

    def to_dict(self) -> dict[str, Any]:
        """The forward document (``chunkwise forward --format json``, the API body's core)."""
        return forward_to_dict(self.runner, self.result)


def plan_forward(request: ForwardRequest, *, allow_paths: bool = False) -> ForwardPlan:
    """Resolve the request's deployment and layout and build its shape (domain errors)."""
    deployment = resolve_deployment(request, allow_paths=allow_paths)
    layout = parallel_layout(
        num_devices=request.num_devices,
        tp=request.tp_size,
        ep=request.ep_size,
        pp=request.pp_size,
    )
    runner = deployment.runner(layout)
    shape = forward_request(
        num_queries=request.num_queries,
        query_length=request.query_length,
        context_length=request.context_length,
        decode=request.decode,
        num_mtp_tokens=request.num_mtp_tokens,
    )
    drafts = request.num_mtp_tokens if request.decode else 0
    return ForwardPlan(runner=runner, shape=shape, mtp_draft_tokens=drafts)


def run_forward(request: ForwardRequest, *, allow_paths: bool = False) -> ForwardRun:
    """One forward computed now (no cache): what ``chunkwise forward`` prints."""
    return plan_forward(request, allow_paths=allow_paths).run()


def forward(
    context: ServiceContext, request: ForwardRequest, *, allow_paths: bool = False
) -> ForwardResponse:
    """One forward; the full result (breakdown included) is cached under its own key kind;
    a cached document is served only when it passes its checks (:func:`_cached_forward`)."""
    from app.models.forward import ForwardResponse

    plan = plan_forward(request, allow_paths=allow_paths)
    # The echo: the quantization the runner ran where the request left it null (derived).
    request = request.model_copy(update=derived_quantization(request, plan.runner.quantization))
    key = plan.cache_key()
    cached = context.cache.get_many([key])[0]
    if cached is not None:
        response = _cached_forward(context, key, cached, request)
        if response is not None:
            return response
    body = plan.run().to_dict()
    context.stats.add(forward_evaluations=1)
    context.cache.set_many({key: body})
    return ForwardResponse.model_validate(
        {**body, "input": request, "cache": _counters(context, hit=False)}
    )


def _counters(context: ServiceContext, *, hit: bool) -> CacheCounters:
    from app.models.common import CacheCounters

    return CacheCounters(
        backend=context.cache.backend, hits=int(hit), misses=int(not hit), round_trips=1
    )


def _cached_forward(
    context: ServiceContext, key: str, cached: JSONValue, request: ForwardRequest
) -> ForwardResponse | None:
    """A cached forward document that passes the response schema with every figure in its
    range (:func:`out_of_range_paths`); anything else is rejected (counted, logged once) and
    recomputed."""
    from pydantic import ValidationError

    from app.models.forward import ForwardResponse

    if isinstance(cached, dict) and all_finite(cached) and not out_of_range_paths(cached):
        try:
            response = ForwardResponse.model_validate(
                {**cached, "input": request, "cache": _counters(context, hit=True)}
            )
        except ValidationError:
            pass
        else:
            if response.latency_ms > 0:
                return response
    context.cache.stats.reject(key, "not a forward document")
    return None
