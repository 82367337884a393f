"""POST /v1/forward: one forward pass (flags follow ``chunkwise forward``)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from app.core import limits
from app.models import texts
from app.models.common import CacheCounters
from app.models.workload import DeploymentMixin


class ForwardRequest(DeploymentMixin):
    num_queries: int = Field(
        strict=True,
        ge=1,
        le=limits.MAX_FORWARD_CONCURRENCY,
        description="requests in the forward (on one data-parallel replica)",
        examples=[1],
    )
    query_length: int = Field(
        strict=True, ge=1, le=limits.MAX_INPUT_LENGTH, description=texts.QUERY_LEN
    )
    context_length: int = Field(
        default=0,
        strict=True,
        ge=0,
        le=limits.MAX_INPUT_LENGTH,
        description="tokens already cached per request (seq_len = context + query)",
    )
    decode: bool = Field(default=False, description="a decode step (reads the KV cache)")
    num_devices: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=limits.MAX_NUM_DEVICES,
        description="tp * dp * pp devices (default: tp * pp)",
    )
    tp_size: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=limits.MAX_PARALLEL_SIZE,
        description="tensor-parallel size, devices (default: num_devices / pp, or 1)",
    )
    ep_size: int = Field(
        default=1, strict=True, ge=1, le=limits.MAX_PARALLEL_SIZE, description=texts.EP_SIZE
    )
    pp_size: int = Field(
        default=1,
        strict=True,
        ge=1,
        le=limits.MAX_PARALLEL_SIZE,
        description="pipeline-parallel stages (devices in series)",
    )
    num_mtp_tokens: int = Field(
        default=0,
        strict=True,
        ge=0,
        le=limits.MAX_MTP_TOKENS,
        description="decode: verify 1 + n tokens per request and add the draft passes",
    )


#: What dominated an op's, a category's or the forward's time.
_BOUND = "compute, memory, communication or overhead"
_CATEGORY = "gemm, attention, moe, communication, elementwise, lm_head or overhead"


class OpOut(BaseModel):
    """One operator on one device, costed per instance; ``count`` instances run per forward."""

    name: str = Field(description="the operator, e.g. qkv_proj")
    category: str = Field(description=_CATEGORY)
    scope: str = Field(
        description="where it runs: model, mtp, eagle3, or layers[i]:<ffn> (a layer group, with "
        ":window<n> or :linear when its attention is so)"
    )
    count: int = Field(description="instances per forward (identical layers costed once)")
    flops: float = Field(description="FLOPs of one instance on one device")
    hbm_bytes: float = Field(description="HBM bytes one instance reads and writes on one device")
    comm_bytes: float = Field(description="a collective's message per device, bytes (else 0)")
    compute_ms: float = Field(description="flops at the device's effective peak, ms")
    memory_ms: float = Field(description="hbm_bytes at the effective HBM bandwidth, ms")
    comm_ms: float = Field(description="the collective's time on the interconnect, ms")
    launch_ms: float = Field(description="kernel launch or fixed cost of one instance, ms")
    time_ms: float = Field(
        description="one instance, ms: max(compute_ms, memory_ms, comm_ms) + launch_ms"
    )
    total_ms: float = Field(description="count x time_ms, ms")
    bound: str = Field(description=f"what dominated its time: {_BOUND}")
    source: str = Field(
        description="what priced it: default (physics-derived rates) or fitted:<engine> (the "
        "engine's curves fitted to measured kernels, docs/kernels.md)"
    )


class CategoryOut(BaseModel):
    category: str = Field(description=_CATEGORY)
    time_ms: float = Field(description="total_ms of its ops, ms")
    bound: str = Field(description=_BOUND)


class BreakdownOut(BaseModel):
    bound: str = Field(description=f"what dominated the forward's time: {_BOUND}")
    categories: list[CategoryOut] = Field(description="time per op category")
    ops: list[OpOut] = Field(description="every op of the forward")


class MemoryOut(BaseModel):
    """GB per device (decimal); ``available_gb < 0`` means the forward does not fit."""

    capacity_gb: float = Field(description=f"the device's HBM capacity, {texts.GB}")
    weights_gb: float = Field(description=f"weights on the busiest device, {texts.GB}")
    kv_cache_gb: float = Field(description=f"KV cache of the forward's requests, {texts.GB}")
    activation_gb: float = Field(description=f"activations of the forward, {texts.GB}")
    reserved_gb: float = Field(
        description=f"held back per device (runtime, graphs, fragmentation), {texts.GB}"
    )
    available_gb: float = Field(
        description=f"capacity - weights - KV cache - activations - reserved, {texts.GB} "
        "(< 0: does not fit)"
    )


class ParallelOut(BaseModel):
    tp: int = Field(description=texts.TP)
    dp: int = Field(description=texts.DP)
    ep: int = Field(description=texts.EP)
    pp: int = Field(description=texts.PP)
    label: str = Field(description=texts.PARALLEL)


class RequestOut(BaseModel):
    is_decode: bool = Field(description="a decode step (reads the KV cache)")
    concurrency: int = Field(description=texts.SHAPE_CONCURRENCY)
    query_len: int = Field(description=texts.QUERY_LEN)
    seq_len: int = Field(description="tokens of context per request after the forward")
    mtp_draft_tokens: int = Field(
        description="MTP draft tokens per request, one draft pass each (0: none)"
    )


class ForwardResponse(BaseModel):
    """The document of ``chunkwise forward --format json`` plus the input echo and cache use."""

    input: ForwardRequest = Field(description="the request, echoed")
    model: str = Field(description=texts.MODEL_NAME)
    device: str = Field(description=texts.DEVICE_NAME)
    parallel: ParallelOut = Field(description="the layout")
    quantization: dict[str, str] = Field(
        description="the quantize_linear_action and quantize_attention_action used"
    )
    identity: str = Field(description="runner identity (the latency-cache key material)")
    request: RequestOut = Field(description="the forward's shape")
    latency_ms: float = Field(description="the forward's time, ms: the sum of its ops' total_ms")
    breakdown: BreakdownOut = Field(description="the time by op and by op category")
    memory: MemoryOut = Field(description="the busiest device's memory during the forward")
    notes: list[str] = Field(description="what the model assumed or approximated")
    cache: CacheCounters = Field(description=texts.CACHE_USE)
