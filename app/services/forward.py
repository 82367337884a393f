"""``POST /v1/forward``: one forward pass (latency, per-op breakdown, memory)."""

from __future__ import annotations

from app.cache import identity_digest, shape_key
from app.core.catalog import parse_quantization
from app.core.cost import ForwardShape
from app.core.runner import forward_request, forward_to_dict, parallel_layout
from app.models.common import CacheCounters
from app.models.forward import ForwardRequest, ForwardResponse
from app.services.context import ServiceContext
from app.services.resolve import ResolvedDeployment, resolve_device, resolve_model


def forward(
    context: ServiceContext, request: ForwardRequest, *, allow_paths: bool = False
) -> ForwardResponse:
    """One forward; the full result (breakdown included) is cached under its own key kind."""
    deployment = ResolvedDeployment(
        model=resolve_model(request.model, allow_paths=allow_paths),
        device=resolve_device(request.device),
        quantization=parse_quantization(
            request.quantize_linear_action, request.quantize_attention_action
        ),
        reserved_memory_gb=request.reserved_memory_gb,
        num_mtp_tokens=request.num_mtp_tokens,
        mtp_acceptance_rates=(),
    )
    layout = parallel_layout(
        num_devices=request.num_devices,
        tp=request.tp_size,
        ep=request.ep_size,
        pp=request.pp_size,
    )
    runner = deployment.runner(layout)
    info = forward_request(
        num_queries=request.num_queries,
        query_length=request.query_length,
        context_length=request.context_length,
        decode=request.decode,
        num_mtp_tokens=request.num_mtp_tokens,
    )
    shape = ForwardShape(
        is_decode=info.is_decode,
        concurrency=info.concurrency,
        query_len=info.query_len,
        seq_len=info.seq_len,
    )
    key = shape_key(
        identity_digest(f"{runner.identity()}|draft={info.mtp_draft_tokens}"), shape, kind="fwd"
    )
    cached = context.cache.get_many([key])[0]
    body = cached if isinstance(cached, dict) and "breakdown" in cached else None
    if body is None:
        body = forward_to_dict(runner, runner.run_inference(info))
        context.stats.add(forward_evaluations=1)
        context.cache.set_many({key: body})
    hit = body is cached
    return ForwardResponse.model_validate(
        {
            **body,
            "input": request,
            "cache": CacheCounters(
                backend=context.cache.backend,
                hits=int(hit),
                misses=int(not hit),
                round_trips=1,
            ),
        }
    )
