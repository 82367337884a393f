"""POST /v1/forward: one forward pass (flags follow ``chunkwise forward``)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from app.core import limits
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
        strict=True, ge=1, le=limits.MAX_INPUT_LENGTH, description="new tokens per request"
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
        description="default: num_devices / pp (or 1)",
    )
    ep_size: int = Field(default=1, strict=True, ge=1, le=limits.MAX_PARALLEL_SIZE)
    pp_size: int = Field(default=1, strict=True, ge=1, le=limits.MAX_PARALLEL_SIZE)
    num_mtp_tokens: int = Field(
        default=0,
        strict=True,
        ge=0,
        le=limits.MAX_MTP_TOKENS,
        description="decode: verify 1 + n tokens per request and add the draft passes",
    )


class OpOut(BaseModel):
    name: str
    category: str
    scope: str
    count: int
    flops: float
    hbm_bytes: float
    comm_bytes: float
    compute_ms: float
    memory_ms: float
    comm_ms: float
    launch_ms: float
    time_ms: float
    total_ms: float
    bound: str


class CategoryOut(BaseModel):
    category: str
    time_ms: float
    bound: str = Field(description="compute, memory, communication or overhead")


class BreakdownOut(BaseModel):
    bound: str
    categories: list[CategoryOut]
    ops: list[OpOut]


class MemoryOut(BaseModel):
    """GB per device (decimal); ``available_gb < 0`` means the forward does not fit."""

    capacity_gb: float
    weights_gb: float
    kv_cache_gb: float
    activation_gb: float
    reserved_gb: float
    available_gb: float


class ParallelOut(BaseModel):
    tp: int
    dp: int
    ep: int
    pp: int
    label: str


class RequestOut(BaseModel):
    is_decode: bool
    concurrency: int
    query_len: int
    seq_len: int
    mtp_draft_tokens: int


class ForwardResponse(BaseModel):
    """The document of ``chunkwise forward --format json`` plus the input echo and cache use."""

    input: ForwardRequest
    model: str
    device: str
    parallel: ParallelOut
    quantization: dict[str, str]
    identity: str = Field(description="runner identity (the latency-cache key material)")
    request: RequestOut
    latency_ms: float
    breakdown: BreakdownOut
    memory: MemoryOut
    notes: list[str]
    cache: CacheCounters
