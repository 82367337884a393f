"""The forward-latency model ("ModelRunner"): ops, layers, communication, memory.

Public entry points::

    ModelRunner(model, device, parallel=None, quantization=None, *, reserved_memory_gb=10.0,
                num_mtp_tokens=0, decode_graph_mode=True)
        .run_inference(ForwardShape, *, mtp_draft_tokens=None)
            -> ForwardResult(latency_ms, breakdown, memory, ...)
        .run_mixed(MixedShape, *, mtp_draft_tokens=None) -> ForwardResult   one fused forward
        .forward_ms(ForwardShape, ...) / .mixed_ms(MixedShape, ...) -> float   latency alone
        .memory(ForwardShape | MixedShape) -> MemoryBreakdown
        .identity() -> str          stable cache key of everything that changes results
    RunnerServingModel(runner, num_mtp_tokens=0, mtp_acceptance_rates=())
        implements app.core.cost.ServingModel
    build_runner(model, device, *, parallel=None, quantize_linear_action=None,
                 quantize_attention_action=None, num_mtp_tokens=0, reserved_memory_gb=None)
    parallel_layout(*, num_devices=None, tp=None, ep=1, pp=1) -> ParallelLayout
    forward_request(*, num_queries, query_length, context_length=0, decode=False,
                    num_mtp_tokens=0) -> ForwardShape
    forward_to_dict(runner, result) -> dict      JSON document of one forward
"""

from app.core.runner.forward import (
    build_runner,
    forward_request,
    forward_to_dict,
    parallel_layout,
)
from app.core.runner.ops import Bound, OpCategory, OpCost
from app.core.runner.runner import (
    DEFAULT_RESERVED_MEMORY_GB,
    KV_BLOCK_TOKENS,
    RUNNER_MODEL_VERSION,
    Breakdown,
    CategoryCost,
    ForwardResult,
    MemoryBreakdown,
    ModelRunner,
    check_shape,
)
from app.core.runner.serving import RunnerServingModel

__all__ = [
    "DEFAULT_RESERVED_MEMORY_GB",
    "KV_BLOCK_TOKENS",
    "RUNNER_MODEL_VERSION",
    "Bound",
    "Breakdown",
    "CategoryCost",
    "ForwardResult",
    "MemoryBreakdown",
    "ModelRunner",
    "OpCategory",
    "OpCost",
    "RunnerServingModel",
    "build_runner",
    "check_shape",
    "forward_request",
    "forward_to_dict",
    "parallel_layout",
]
