"""POST /v1/chunk-plan."""

from __future__ import annotations

from pydantic import BaseModel, Field

from app.models import texts
from app.models.workload import LengthsMixin


class ChunkPlanRequest(LengthsMixin):
    pass


class Chunk(BaseModel):
    index: int = Field(description="the chunk's place in the plan, from 0")
    query_len: int = Field(description="new tokens the chunk prefills")
    seq_len: int = Field(
        description="tokens of context after the chunk (the cached prefix not counted)"
    )
    is_last_chunk: bool = Field(description="the chunk whose end emits the first token")


class ChunkPlanResponse(BaseModel):
    input_length: int = Field(description="prompt tokens per request (echoed)")
    prefix_cache_hit_rate: float = Field(
        description="fraction of each prompt in the prefix cache (echoed)"
    )
    max_batched_tokens: int = Field(
        description="the token budget: most tokens one chunk prefills (echoed)"
    )
    cached_prefix_tokens: int = Field(
        description="tokens served by the prefix cache: floor(input_length x prefix_cache_hit_rate)"
    )
    effective_input_length: int = Field(description=texts.EFFECTIVE_INPUT_LENGTH)
    prefill_num_chunks: int = Field(description=texts.PREFILL_NUM_CHUNKS)
    chunks: list[Chunk] = Field(description="one request's prefill chunks, in order")
