"""Prefill chunk plan and the optimizer's input data (RFC §3.1.3, §3.4.2.2).

``effective_input_length E = L - floor(L * h)`` is what prefill computes; decode keeps the full
``L`` as context. The plan splits ``E`` into chunks of at most ``max_batched_tokens``; chunk ``k``
computes ``query_len`` new tokens and ends with ``seq_len`` tokens of (non-cached) context.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from app.core.errors import InvalidParameterError

#: Largest accepted input/output length and token budget (tokens). Bounds keep arithmetic and
#: memory sane; the service may apply tighter ones.
MAX_LENGTH_TOKENS = 10_000_000


@dataclass(frozen=True, slots=True)
class PrefillChunk:
    """One prefill chunk of one request."""

    index: int
    query_len: int
    seq_len: int
    is_last_chunk: bool


def require_int(
    name: str, value: object, minimum: int, maximum: int | None = MAX_LENGTH_TOKENS
) -> int:
    """``value`` if it is an ``int`` (not a ``bool``) in ``[minimum, maximum]`` (no upper bound
    when ``maximum`` is ``None``); the one integer check of the engine, workloads, schedulers,
    optimizers and layouts (every ``InvalidParameterError`` for an integer reads the same)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidParameterError(name, value, _int_range(minimum, maximum))
    if maximum is not None and value > maximum:
        raise InvalidParameterError(name, value, _int_range(minimum, maximum))
    return value


def _int_range(minimum: int, maximum: int | None) -> str:
    if maximum is None:
        return f"an integer >= {minimum}"
    return f"an integer in [{minimum}, {maximum}]"


def require_number(name: str, value: object, low: float, high: float) -> None:
    """A number (not a ``bool``) in ``[low, high]`` (NaN is in no range)."""
    if isinstance(value, bool) or not (isinstance(value, int | float) and low <= value <= high):
        raise InvalidParameterError(name, value, f"a number in [{low:g}, {high:g}]")


def require_limit(name: str, value: float | None) -> None:
    """A latency limit: omitted, or a finite number > 0."""
    if value is None:
        return
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidParameterError(name, value, "a finite number > 0 (or omitted)")


def effective_input_length(input_length: int, prefix_cache_hit_rate: float) -> int:
    """Tokens left to prefill after the prefix cache: ``L - floor(L * h)``."""
    require_int("input_length", input_length, 1)
    require_hit_rate(prefix_cache_hit_rate)
    # The rate is read as the decimal the user wrote (0.29 is 29/100, not 0.28999...).
    cached = math.floor(input_length * Fraction(repr(float(prefix_cache_hit_rate))))
    effective = input_length - cached
    if effective < 1:
        raise InvalidParameterError(
            "prefix_cache_hit_rate",
            prefix_cache_hit_rate,
            f"small enough to leave at least 1 token to prefill (input_length={input_length})",
        )
    return effective


def require_hit_rate(value: float) -> None:
    """A prefix-cache hit rate in ``[0, 1)``."""
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or not 0.0 <= value < 1.0
    ):
        raise InvalidParameterError("prefix_cache_hit_rate", value, "a number in [0, 1)")


def prefill_chunk_plan(
    effective_input_length: int, max_batched_tokens: int
) -> tuple[PrefillChunk, ...]:
    """Split ``effective_input_length`` tokens into chunks of at most ``max_batched_tokens``."""
    require_int("effective_input_length", effective_input_length, 1)
    require_int("max_batched_tokens", max_batched_tokens, 1)
    num_chunks = -(-effective_input_length // max_batched_tokens)
    chunks = []
    for index in range(num_chunks):
        consumed = index * max_batched_tokens
        query_len = min(max_batched_tokens, effective_input_length - consumed)
        chunks.append(
            PrefillChunk(
                index=index,
                query_len=query_len,
                seq_len=consumed + query_len,
                is_last_chunk=index == num_chunks - 1,
            )
        )
    return tuple(chunks)


def decode_query_len(num_mtp_tokens: int) -> int:
    """Tokens per request in a decode forward: one plus the speculative (MTP) tokens."""
    return 1 + num_mtp_tokens


def decode_seq_len(input_length: int, output_length: int, num_mtp_tokens: int) -> int:
    """Context of the representative decode forward: ``L + O // 2 + query_len`` (mid-decode)."""
    return input_length + output_length // 2 + decode_query_len(num_mtp_tokens)
