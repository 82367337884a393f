"""Why a deployment does not fit in memory, with its numbers, and the concrete ways out.

An infeasible answer names the binding constraint (the weights against what the reserve leaves,
or one request's KV cache and the activations against what the weights leave) and lists what
would make it fit: quantized weights, more devices, a shorter context, an FP8 KV cache. Used by
``/v1/simulate`` and ``/v1/optimize`` (``reason`` and ``suggestions``) and so by the CLI.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.core.catalog.quantization import AttentionQuantAction, LinearQuantAction
from app.core.cost import ForwardShape
from app.core.optimizer.agg import largest_prefill_shape
from app.core.parallel import ParallelLayout
from app.core.spec import WorkloadSpec
from app.services.resolve import ResolvedDeployment

#: Weight formats a deployment in 16-bit weights is pointed to (msmodeling's default first).
QUANTIZED_LINEAR = (LinearQuantAction.W8A8_DYNAMIC, LinearQuantAction.FP8)
#: Share of what the reserve leaves that the weights may take when advising a device count: the
#: rest holds at least some KV blocks and the activations.
WEIGHTS_SHARE_OF_FREE = 0.9


@dataclass(frozen=True, slots=True)
class MemoryAdvice:
    reason: str
    suggestions: tuple[str, ...]


def memory_advice(
    deployment: ResolvedDeployment, layout: ParallelLayout, data: WorkloadSpec, requests: int = 1
) -> MemoryAdvice:
    """The binding memory constraint of ``layout`` for ``requests`` requests in flight per
    replica (one prefill chunk each; 1: the smallest step that must fit) and the ways out."""
    runner = deployment.runner(layout)
    context = data.input_length + data.output_length
    # The steps the simulation checks: every request decoding, and the largest prefill step.
    decode = data.decode_shape(requests)
    prefill = largest_prefill_shape(data, requests)
    steps = (
        ForwardShape(
            is_decode=True, concurrency=requests, query_len=decode.query_len, seq_len=context
        ),
        ForwardShape(
            is_decode=False,
            concurrency=prefill.concurrency,
            query_len=prefill.query_len,
            seq_len=context,
        ),
    )
    peak = min((runner.memory(step) for step in steps), key=lambda m: m.available_gb)
    after_reserve = peak.capacity_gb - peak.reserved_gb
    linear = deployment.quantization.linear
    fmt = "16-bit" if linear is LinearQuantAction.DISABLED else linear.value
    suggestions: list[str] = []
    if peak.weights_gb >= after_reserve:
        reason = (
            f"memory: {peak.weights_gb:.1f} GB of {fmt} weights per device against "
            f"{after_reserve:.1f} GB left after the {peak.reserved_gb:.1f} GB reserve "
            f"({peak.capacity_gb:.1f} GB device, {layout.label})"
        )
    else:
        left = after_reserve - peak.weights_gb
        who = "one request's KV cache" if requests == 1 else f"the KV cache of {requests} requests"
        reason = (
            f"memory: {who} ({context:,} tokens each, {peak.kv_cache_gb:.1f} GB) and the "
            f"activations ({peak.activation_gb:.1f} GB) against the {left:.1f} GB left per "
            f"device after {peak.weights_gb:.1f} GB of weights and the {peak.reserved_gb:.1f} GB "
            f"reserve ({layout.label})"
        )
        if requests > 1:
            suggestions.append("fewer requests in flight per replica (concurrency)")
    if linear is LinearQuantAction.DISABLED:
        suggestions.append(
            "quantize the weights: quantize_linear_action "
            + " or ".join(action.value for action in QUANTIZED_LINEAR)
            + " (--quantize-linear-action) about halves them"
        )
    total_weights = peak.weights_gb * layout.tp * layout.pp
    needed = math.ceil(total_weights / max(after_reserve * WEIGHTS_SHARE_OF_FREE, 1e-9))
    if needed > layout.tp * layout.pp:
        suggestions.append(
            f"more devices per replica: tensor parallelism over at least {needed} devices "
            f"spreads the {total_weights:.1f} GB of weights"
        )
    if peak.kv_cache_gb > 0:
        suggestions.append(
            "a shorter context (input_length + output_length) or a larger prefix-cache hit rate"
        )
        if deployment.quantization.attention is AttentionQuantAction.DISABLED:
            suggestions.append(
                "an FP8 KV cache: quantize_attention_action FP8 (--quantize-attention-action) "
                "halves it"
            )
    if deployment.reserved_memory_gb is None and peak.reserved_gb > 0:
        suggestions.append(
            f"a smaller reserve: reserved_memory_gb (now {peak.reserved_gb:.1f} GB per device)"
        )
    return MemoryAdvice(reason=reason, suggestions=tuple(suggestions))
