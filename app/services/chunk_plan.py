"""``POST /v1/chunk-plan``: the prefill chunk plan of one prompt."""

from __future__ import annotations

import math

from app.core import limits
from app.core.chunking import effective_input_length, prefill_chunk_plan
from app.core.errors import InvalidParameterError
from app.models.plan import Chunk, ChunkPlanRequest, ChunkPlanResponse


def chunk_plan(request: ChunkPlanRequest) -> ChunkPlanResponse:
    effective = effective_input_length(request.input_length, request.prefix_cache_hit_rate)
    num_chunks = math.ceil(effective / request.max_batched_tokens)
    if num_chunks > limits.MAX_PLAN_CHUNKS:
        raise InvalidParameterError(
            "max_batched_tokens",
            request.max_batched_tokens,
            f">= {math.ceil(effective / limits.MAX_PLAN_CHUNKS)} for effective_input_length "
            f"{effective} (at most {limits.MAX_PLAN_CHUNKS} chunks)",
        )
    plan = prefill_chunk_plan(effective, request.max_batched_tokens)
    return ChunkPlanResponse(
        input_length=request.input_length,
        prefix_cache_hit_rate=request.prefix_cache_hit_rate,
        max_batched_tokens=request.max_batched_tokens,
        cached_prefix_tokens=request.input_length - effective,
        effective_input_length=effective,
        prefill_num_chunks=len(plan),
        chunks=[
            Chunk(
                index=c.index,
                query_len=c.query_len,
                seq_len=c.seq_len,
                is_last_chunk=c.is_last_chunk,
            )
            for c in plan
        ],
    )
