"""THE contract between the engine (simulation, workloads, optimizers) and a cost model.

The engine never builds a latency model itself: it receives any object with these methods.
Tests inject fakes; the service injects a cached ``ModelRunner`` adapter. Every protocol a
cost model may implement lives here, and nowhere else:

- :class:`LatencyModel` (required): ``prefill_ms`` / ``decode_ms`` of one forward;
- :class:`BatchLatencyModel` (optional): the latencies of many shapes in one call;
- :class:`MixedLatencyModel` (optional): a fused mixed step (:class:`MixedShape`);
- :class:`MemoryModel` (the optimizers): memory left after a forward is admitted;
- :class:`ServingModel`: latency and memory, what the optimizers search over;
- :class:`KvAdmissionModel` (optional): how many requests fit the KV cache of a replica;
- :class:`MemoryBreakdownModel` (optional): the memory picture behind ``memory_left_gb``.

A mixed engine step (a prefill chunk beside decodes) is costed from its two parts by the
scheduler's ``mixed_latency`` rule (``max``, ``sum``), or, with ``fused``, as one forward over
the combined tokens: a :class:`MixedShape`, which only a :class:`MixedLatencyModel` (the
analytic runner) can cost. Any other model is rejected with :class:`UnsupportedError` as soon
as a fused mixed step needs a latency (no silent fallback to another rule).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from app.core.errors import InvalidParameterError, UnsupportedError


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


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class MixedShape:
    """One engine step that runs a prefill part and a decode part as ONE forward (fused).

    The dense parts (GEMMs, MoE, norms, collectives, lm_head) see ``prefill`` and ``decode``
    tokens together; attention stays per part; the per-forward overhead is paid once.
    """

    prefill: ForwardShape
    decode: ForwardShape

    def __post_init__(self) -> None:
        if self.prefill.is_decode:
            raise InvalidParameterError("prefill", self.prefill, "a prefill shape")
        if not self.decode.is_decode:
            raise InvalidParameterError("decode", self.decode, "a decode shape")


#: What a latency model may be asked to cost: one forward, or a fused mixed step.
AnyShape = ForwardShape | MixedShape


def shape_order(shape: AnyShape) -> tuple[int, ForwardShape, ForwardShape]:
    """Sort key over both kinds (pure shapes first, each kind in its own order)."""
    if isinstance(shape, MixedShape):
        return (1, shape.prefill, shape.decode)
    return (0, shape, shape)


@runtime_checkable
class LatencyModel(Protocol):
    """Forward latency in milliseconds for one replica."""

    def prefill_ms(self, concurrency: int, query_len: int, seq_len: int) -> float: ...

    def decode_ms(self, concurrency: int, query_len: int, seq_len: int) -> float: ...


@runtime_checkable
class Interruptible(Protocol):
    """Optional: a model that carries the caller's deadline. Long loops (the engine's) call
    ``check_deadline`` now and then; it raises :class:`~app.core.errors.DeadlineExceededError`
    once the deadline passed (after keeping what was computed)."""

    def check_deadline(self) -> None: ...


def interrupt_of(model: object) -> Callable[[], None] | None:
    """The deadline check of ``model`` (``None`` when it has none)."""
    return model.check_deadline if isinstance(model, Interruptible) else None


@runtime_checkable
class BatchLatencyModel(Protocol):
    """Optional batch interface: latencies of many shapes in one call (one cache round trip).

    A batch model that is given :class:`MixedShape` s and cannot cost them raises
    :class:`~app.core.errors.UnsupportedError` (see :func:`fused_unsupported`).
    """

    def forward_latencies_ms(self, shapes: Sequence[AnyShape]) -> Mapping[AnyShape, float]: ...


@runtime_checkable
class MixedLatencyModel(Protocol):
    """Optional capability: the latency of a fused mixed step (``mixed_latency="fused"``)."""

    def mixed_ms(self, shape: MixedShape) -> float: ...


def fused_unsupported(model: object) -> UnsupportedError:
    """The error for ``mixed_latency="fused"`` over a model that cannot cost a mixed forward."""
    return UnsupportedError(
        f"mixed_latency='fused' costs a mixed step as one forward over the combined tokens, "
        f"which needs the analytic runner's latency model; {type(model).__name__} only has "
        "prefill_ms/decode_ms (use mixed_latency 'max' or 'sum' with it)"
    )


@runtime_checkable
class MemoryModel(Protocol):
    """Device memory left (GB, may be negative) after a forward of this shape is admitted."""

    def memory_left_gb(
        self, is_decode: bool, concurrency: int, query_len: int, seq_len: int
    ) -> float: ...


@runtime_checkable
class ServingModel(LatencyModel, MemoryModel, Protocol):
    """What the optimizers need: latency and memory headroom."""


@runtime_checkable
class KvAdmissionModel(Protocol):
    """Optional: how many requests of a given context fit the KV cache of one replica."""

    def kv_capacity_requests(self, context_len: int, max_batched_tokens: int) -> int: ...


@runtime_checkable
class MemoryBreakdownModel(Protocol):
    """Optional: the memory picture (GB per device) behind ``memory_left_gb``."""

    def memory_breakdown_gb(
        self, is_decode: bool, concurrency: int, query_len: int, seq_len: int
    ) -> Mapping[str, float]: ...


@runtime_checkable
class MemoisedLatencyModel(Protocol):
    """A batch latency model that evaluates each shape at most once by itself (the service's
    cache-backed model keeps every record of its request): a search adds no memo over it."""

    def forward_latencies_ms(self, shapes: Sequence[AnyShape]) -> Mapping[AnyShape, float]: ...

    @property
    def shapes_seen(self) -> int: ...
