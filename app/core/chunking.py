"""Prefill chunk plan and the optimizer's input data (RFC §3.1.3, §3.4.2.2).

``effective_input_length E = L - floor(L * h)`` is what prefill computes; decode keeps the full
``L`` as context. The plan splits ``E`` into chunks of at most ``max_batched_tokens``; chunk ``k``
computes ``query_len`` new tokens and ends with ``seq_len`` tokens of (non-cached) context.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
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


def _require_int(name: str, value: object, minimum: int, maximum: int = MAX_LENGTH_TOKENS) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise InvalidParameterError(name, value, f"an integer in [{minimum}, {maximum}]")
    return value


def _require_limit(name: str, value: float | None) -> None:
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
    _require_int("input_length", input_length, 1)
    _require_hit_rate(prefix_cache_hit_rate)
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


def _require_hit_rate(value: float) -> None:
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
    _require_int("effective_input_length", effective_input_length, 1)
    _require_int("max_batched_tokens", max_batched_tokens, 1)
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


@dataclass(frozen=True, slots=True, kw_only=True)
class OptimizerData:
    """Everything the optimizers need about the workload, validated on construction."""

    input_length: int
    output_length: int
    max_batched_tokens: int
    prefix_cache_hit_rate: float = 0.0
    ttft_limit_ms: float | None = None
    tpot_limit_ms: float | None = None
    num_mtp_tokens: int = 0
    mtp_acceptance_rates: tuple[float, ...] = ()
    num_devices: int = 1
    _plan: tuple[PrefillChunk, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _require_int("input_length", self.input_length, 1)
        _require_int("output_length", self.output_length, 1)
        _require_int("max_batched_tokens", self.max_batched_tokens, 1)
        _require_hit_rate(self.prefix_cache_hit_rate)
        _require_limit("ttft_limit_ms", self.ttft_limit_ms)
        _require_limit("tpot_limit_ms", self.tpot_limit_ms)
        _require_int("num_mtp_tokens", self.num_mtp_tokens, 0, 16)
        _require_int("num_devices", self.num_devices, 1, 1_000_000)
        rates = self.mtp_acceptance_rates
        if not isinstance(rates, tuple) or not all(
            isinstance(r, int | float) and not isinstance(r, bool) and 0.0 <= r <= 1.0
            for r in rates
        ):
            raise InvalidParameterError(
                "mtp_acceptance_rates", rates, "a tuple of numbers in [0, 1]"
            )
        if self.num_mtp_tokens and len(rates) < self.num_mtp_tokens:
            raise InvalidParameterError(
                "mtp_acceptance_rates",
                rates,
                f"at least num_mtp_tokens={self.num_mtp_tokens} rates",
            )
        plan = prefill_chunk_plan(
            effective_input_length(self.input_length, self.prefix_cache_hit_rate),
            self.max_batched_tokens,
        )
        object.__setattr__(self, "_plan", plan)

    def get_effective_input_length(self, is_decode: bool = False) -> int:
        """Prefill works on the uncached tokens; decode keeps the full input as context."""
        if is_decode:
            return self.input_length
        return self._plan[-1].seq_len

    def get_prefill_chunk_plan(self) -> tuple[PrefillChunk, ...]:
        return self._plan

    @property
    def effective_input_length(self) -> int:
        return self._plan[-1].seq_len

    @property
    def prefill_num_chunks(self) -> int:
        return len(self._plan)

    @property
    def decode_query_len(self) -> int:
        """Tokens per request in a decode forward (:func:`decode_query_len`)."""
        return decode_query_len(self.num_mtp_tokens)

    @property
    def decode_seq_len(self) -> int:
        """Context of a representative decode forward (:func:`decode_seq_len`)."""
        return decode_seq_len(self.input_length, self.output_length, self.num_mtp_tokens)
