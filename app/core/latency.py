"""The contract between the engine (simulation, optimizers) and a forward-latency model.

The engine never builds a latency model itself: it receives any object with these methods.
Tests inject fakes; the service injects a cached ``ModelRunner`` adapter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class ForwardShape:
    """One forward pass on one data-parallel replica.

    ``concurrency`` requests each compute ``query_len`` new tokens with ``seq_len`` tokens of
    context after the forward (``seq_len >= query_len``).
    """

    is_decode: bool
    concurrency: int
    query_len: int
    seq_len: int


@runtime_checkable
class LatencyModel(Protocol):
    """Forward latency in milliseconds for one replica."""

    def prefill_ms(self, concurrency: int, query_len: int, seq_len: int) -> float: ...

    def decode_ms(self, concurrency: int, query_len: int, seq_len: int) -> float: ...


@runtime_checkable
class MemoryModel(Protocol):
    """Device memory left (GB, may be negative) after a forward of this shape is admitted."""

    def memory_left_gb(
        self, is_decode: bool, concurrency: int, query_len: int, seq_len: int
    ) -> float: ...


@runtime_checkable
class ServingModel(LatencyModel, MemoryModel, Protocol):
    """What the optimizers need: latency and memory headroom."""
