"""POST /v1/chunk-plan."""

from __future__ import annotations

from pydantic import BaseModel

from app.models.workload import LengthsMixin


class ChunkPlanRequest(LengthsMixin):
    pass


class Chunk(BaseModel):
    index: int
    query_len: int
    seq_len: int
    is_last_chunk: bool


class ChunkPlanResponse(BaseModel):
    input_length: int
    prefix_cache_hit_rate: float
    max_batched_tokens: int
    cached_prefix_tokens: int
    effective_input_length: int
    prefill_num_chunks: int
    chunks: list[Chunk]
