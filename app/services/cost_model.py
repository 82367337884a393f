"""The cache-backed latency model: one forward record per shape, read from and written to the
latency cache in batches, computed by the runner on a miss.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from app.cache import JSONObject, JSONValue, LatencyCache, identity_digest, shape_key
from app.core import limits
from app.core.cost import AnyShape, ForwardShape, MixedShape
from app.core.errors import DeadlineExceededError, InvalidParameterError, UnsupportedError
from app.core.parallel import ParallelLayout
from app.core.runner import RunnerServingModel
from app.core.scenario import ResolvedDeployment, build_serving_model
from app.models.common import CacheCounters
from app.services.context import ServiceContext, ServiceStats, deadline_from

#: Order of the memory figures in a compact cache record (the runner's MemoryBreakdown fields).
MEMORY_KEYS = (
    "capacity_gb",
    "weights_gb",
    "kv_cache_gb",
    "activation_gb",
    "reserved_gb",
    "available_gb",
)


logger = logging.getLogger("chunkwise.services")


@dataclass(frozen=True, slots=True)
class ForwardRecord:
    """What the engine needs from one forward: latency, memory left and the memory picture.

    Cached as a flat JSON array ``[latency_ms, memory_left_gb, *memory figures]`` (compact and
    fast to decode; thousands are read per request).
    """

    latency_ms: float
    memory_left_gb: float
    memory_gb: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> list[float]:
        memory = [float(self.memory_gb.get(key, 0.0)) for key in MEMORY_KEYS]
        return [self.latency_ms, self.memory_left_gb, *memory]

    @classmethod
    def from_json(cls, value: JSONValue) -> ForwardRecord | None:
        """The record a cached array holds, or ``None`` when it fails the schema: exactly
        ``2 + len(MEMORY_KEYS)`` JSON numbers (no booleans, strings or nulls), all finite, the
        latency in (0, ``MAX_CACHED_LATENCY_MS``], the memory figures at most
        ``MAX_CACHED_MEMORY_GB`` in size and those other than ``available_gb`` >= 0 (memory
        left and available may be negative: the forward does not fit)."""
        if not isinstance(value, list) or len(value) != 2 + len(MEMORY_KEYS):
            return None
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
            return None
        numbers = [float(v) for v in value]
        if not all(math.isfinite(v) for v in numbers):
            return None
        if not 0 < numbers[0] <= limits.MAX_CACHED_LATENCY_MS:
            return None
        if any(abs(v) > limits.MAX_CACHED_MEMORY_GB for v in numbers[1:]):
            return None
        memory = dict(zip(MEMORY_KEYS, numbers[2:], strict=True))
        if any(v < 0 for k, v in memory.items() if k != "available_gb"):
            return None
        return cls(numbers[0], numbers[1], memory)


def capped_writes(pending: dict[str, JSONValue]) -> dict[str, JSONValue]:
    """At most ``MAX_KEYS_WRITTEN_PER_REQUEST`` entries of one request's write, the first
    computed first (a manifest passed first stays): a request past it is still answered, and
    the forwards it computed beyond the cap are computed again by the next such request
    rather than filling the shared cache (one request wrote 162,048 keys, 58.7 MB, before)."""
    cap = limits.MAX_KEYS_WRITTEN_PER_REQUEST
    if len(pending) <= cap:
        return pending
    logger.info("writing %d of %d computed cache entries (per-request cap)", cap, len(pending))
    return dict(itertools.islice(pending.items(), cap))


class ShapeEvaluator(Protocol):
    """Computes forwards for one deployment (model, device, layout, quantization, ...)."""

    def identity(self) -> str:
        """Stable description of everything but the shape (goes into the cache key)."""
        ...

    def evaluate(self, shape: AnyShape) -> ForwardRecord: ...

    def kv_capacity_requests(self, context_len: int, max_batched_tokens: int) -> int:
        """Requests whose KV cache of ``context_len`` tokens fits on one replica."""
        ...


@dataclass(slots=True)
class CacheUsage:
    """Cache activity of one request."""

    hits: int = 0
    misses: int = 0
    computed: int = 0
    round_trips: int = 0


class CachedServingModel:
    """A ``ServingModel`` (and the engine's batch latency interface) over the latency cache.

    Each batch of shapes costs one ``MGET`` for the shapes this object has not seen yet; misses
    are computed by the evaluator; new records are written back by :meth:`flush` in one
    pipeline.

    The request's memo of forwards: every :class:`ForwardRecord` (latency, memory left, memory
    picture) it has read or computed, keyed by the shape, for one request on one layout (a new
    instance per layout, never shared). It is the only memo between the engine and the latency
    cache: the optimizer's :class:`~app.core.optimizer.MemoLatency` passes straight through it
    (it is a ``MemoisedLatencyModel``). The counters in ``usage`` (hits, misses, computed) are
    the response's cache ``stats``.
    """

    def __init__(
        self,
        evaluator: ShapeEvaluator,
        cache: LatencyCache,
        *,
        usage: CacheUsage | None = None,
        stats: ServiceStats | None = None,
        deadline: float | None = None,
        on_deadline: Callable[[], None] | None = None,
        preloaded: Mapping[str, JSONValue] | None = None,
    ) -> None:
        self._evaluator = evaluator
        self._on_deadline = on_deadline
        self._preloaded = preloaded if preloaded is not None else {}
        self.keys_seen: list[str] = []
        self._cache = cache
        self._digest = identity_digest(evaluator.identity())
        self._local: dict[AnyShape, ForwardRecord] = {}
        self._pending: dict[str, JSONValue] = {}
        self._stats = stats
        self._deadline = deadline
        self.usage = usage if usage is not None else CacheUsage()

    # -- batching ------------------------------------------------------------------------
    def prefetch(self, shapes: Iterable[AnyShape]) -> None:
        """Make every shape available locally: one MGET, then compute the misses."""
        wanted = [s for s in dict.fromkeys(shapes) if s not in self._local]
        if not wanted:
            return
        self.check_deadline()
        keys = [shape_key(self._digest, s) for s in wanted]
        self.keys_seen.extend(keys)
        preloaded = self._preloaded
        values: list[JSONValue | None] = [preloaded.get(key) for key in keys]
        missing = [i for i, value in enumerate(values) if value is None]
        if missing:  # one MGET for what the request's manifest did not bring
            fetched = self._cache.get_many([keys[i] for i in missing])
            self.usage.round_trips += 1
            for i, value in zip(missing, fetched, strict=True):
                values[i] = value
        computed = 0
        for shape, key, value in zip(wanted, keys, values, strict=True):
            record = ForwardRecord.from_json(value) if value is not None else None
            if value is not None and record is None:
                self._cache.stats.reject(key, "not a forward record")
            if record is not None:
                self.usage.hits += 1
            else:
                self.usage.misses += 1
                record = self._evaluator.evaluate(shape)
                computed += 1
                stored = record.to_json()
                if ForwardRecord.from_json(stored) is not None:  # else served, not cached
                    self._pending[key] = stored
                if computed % 64 == 0:
                    self.check_deadline()
            self._local[shape] = record
        self.usage.computed += computed
        if self._stats is not None and computed:
            self._stats.add(forward_evaluations=computed)

    def take_pending(self) -> dict[str, JSONValue]:
        """The records computed since the last call (for a caller that batches writes)."""
        pending, self._pending = self._pending, {}
        return pending

    def flush(self) -> None:
        """Write the newly computed records back (one pipelined write with TTL)."""
        pending = capped_writes(self.take_pending())
        if pending:
            self._cache.set_many(pending)

    def records(self, shapes: Sequence[AnyShape]) -> list[ForwardRecord]:
        self.prefetch(shapes)
        return [self._local[s] for s in shapes]

    def _record(self, shape: AnyShape) -> ForwardRecord:
        record = self._local.get(shape)
        if record is None:
            self.prefetch((shape,))
            record = self._local[shape]
        return record

    def check_deadline(self) -> None:
        """Raise :class:`DeadlineExceededError` once the request's deadline passed, after
        writing what was computed (the engine loops call it now and then)."""
        if self._deadline is not None and time.monotonic() > self._deadline:
            if self._on_deadline is not None:
                self._on_deadline()  # keep what was computed: a narrower retry reuses it
            raise DeadlineExceededError(
                "the computation ran past its deadline; narrow the search (fewer layouts, "
                "shorter lengths or a larger max_batched_tokens)"
            )

    # -- engine interfaces ---------------------------------------------------------------
    def forward_latencies_ms(self, shapes: Sequence[AnyShape]) -> Mapping[AnyShape, float]:
        self.prefetch(shapes)
        return {s: self._local[s].latency_ms for s in shapes}

    def mixed_ms(self, shape: MixedShape) -> float:
        return self._record(shape).latency_ms

    def prefill_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        shape = ForwardShape(
            is_decode=False, concurrency=concurrency, query_len=query_len, seq_len=seq_len
        )
        return self._record(shape).latency_ms

    def decode_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        shape = ForwardShape(
            is_decode=True, concurrency=concurrency, query_len=query_len, seq_len=seq_len
        )
        return self._record(shape).latency_ms

    def memory_left_gb(
        self, is_decode: bool, concurrency: int, query_len: int, seq_len: int
    ) -> float:
        shape = ForwardShape(
            is_decode=is_decode, concurrency=concurrency, query_len=query_len, seq_len=seq_len
        )
        return self._record(shape).memory_left_gb

    def memory_breakdown_gb(
        self, is_decode: bool, concurrency: int, query_len: int, seq_len: int
    ) -> Mapping[str, float]:
        shape = ForwardShape(
            is_decode=is_decode, concurrency=concurrency, query_len=query_len, seq_len=seq_len
        )
        return self._record(shape).memory_gb

    def kv_capacity_requests(self, context_len: int, max_batched_tokens: int) -> int:
        """KV admission (closed-loop workloads): asked of the evaluator, not cached."""
        return self._evaluator.kv_capacity_requests(context_len, max_batched_tokens)

    @property
    def shapes_seen(self) -> int:
        return len(self._local)


def evaluate_forward(serving: RunnerServingModel, shape: AnyShape) -> ForwardRecord:
    """Latency (MTP-folded for decode), memory left and the memory picture of one shape."""
    if isinstance(shape, MixedShape):
        mixed = serving.mixed_memory(shape)
        return ForwardRecord(
            latency_ms=serving.mixed_ms(shape),
            memory_left_gb=mixed.available_gb,
            memory_gb=mixed.to_dict(),
        )
    c, q, s = shape.concurrency, shape.query_len, shape.seq_len
    latency_ms = serving.decode_ms(c, q, s) if shape.is_decode else serving.prefill_ms(c, q, s)
    memory = serving.runner.memory(
        ForwardShape(is_decode=shape.is_decode, concurrency=c, query_len=q, seq_len=max(s, q))
    )
    return ForwardRecord(
        latency_ms=latency_ms,
        memory_left_gb=serving.memory_left_gb(shape.is_decode, c, q, s),
        memory_gb=memory.to_dict(),
    )


class RunnerEvaluator:
    """The runner's serving adapter for one layout seen as a :class:`ShapeEvaluator` (an
    adapter, not a memo: :class:`CachedServingModel` asks it once per shape it misses)."""

    __slots__ = ("_calibration", "_serving")

    def __init__(self, serving: RunnerServingModel, calibration: str = "") -> None:
        self._serving = serving
        self._calibration = calibration

    def identity(self) -> str:
        # model, device (a calibration's efficiencies included), layout, quantization, MTP,
        # host times, and the calibration's digest
        calibration = f"|calibration={self._calibration}" if self._calibration else ""
        return self._serving.identity() + calibration

    def evaluate(self, shape: AnyShape) -> ForwardRecord:
        return evaluate_forward(self._serving, shape)

    def kv_capacity_requests(self, context_len: int, max_batched_tokens: int) -> int:
        return self._serving.kv_capacity_requests(context_len, max_batched_tokens)


class ModelFactory:
    """Builds one caching serving model per layout for one request, and totals its usage.

    Runners come from the process's :class:`~app.services.context.RunnerMemo` (the one memo of
    built runners); forwards are memoised by each :class:`CachedServingModel`.
    """

    def __init__(self, context: ServiceContext, deployment: ResolvedDeployment) -> None:
        self.context = context
        self.deployment = deployment
        self.usage = CacheUsage()
        self.deadline = deadline_from(context.settings)
        self.models: list[CachedServingModel] = []
        self.on_layout: Callable[[ParallelLayout], None] | None = None
        self.preloaded: dict[str, JSONValue] = {}
        self._manifest_keys: frozenset[str] = frozenset()

    def preload(self, manifest: JSONValue | None) -> None:
        """Fetch every key a previous identical search used, in one MGET.

        ``manifest`` is ``{"keys": [...]}`` as written by :meth:`manifest`; the search then
        finds its forwards locally instead of asking the cache once per probe batch.
        """
        if not isinstance(manifest, dict) or not isinstance(manifest.get("keys"), list):
            return
        keys = [k for k in manifest["keys"] if isinstance(k, str)][: limits.MAX_MANIFEST_KEYS]
        if not keys:
            return
        self._manifest_keys = frozenset(keys)
        values = self.context.cache.get_many(keys)
        self.usage.round_trips += 1
        self.preloaded.update((k, v) for k, v in zip(keys, values, strict=True) if v is not None)

    def manifest(self) -> JSONObject | None:
        """The keys this search used, when they differ from the manifest it was given and the
        cache is shared. An in-process cache has no round trip for a manifest to save, and
        there each distinct search would leave one (~3 KB for a small-model optimize): a sweep
        worker's memory grew by one per optimize scenario (docs/sweeps.md, "Memory")."""
        if not self.context.cache.shared:
            return None
        keys = frozenset(k for model in self.models for k in model.keys_seen)
        if not keys or keys == self._manifest_keys or len(keys) > limits.MAX_MANIFEST_KEYS:
            return None
        return {"keys": sorted(keys)}

    def serving(self, layout: ParallelLayout) -> RunnerServingModel:
        """The runner's (uncached) serving model of a layout, from the process's runner memo."""
        deployment = self.deployment
        return self.context.runners.get_or_build(
            (deployment, layout), lambda: build_serving_model(deployment, layout)
        )

    def __call__(self, layout: ParallelLayout) -> CachedServingModel:
        if self.on_layout is not None:
            self.on_layout(layout)
        calibration = self.deployment.calibration
        model = CachedServingModel(
            RunnerEvaluator(self.serving(layout), "" if calibration is None else calibration.id),
            self.context.cache,
            usage=self.usage,
            stats=self.context.stats,
            deadline=self.deadline,
            on_deadline=self.flush,
            preloaded=self.preloaded,
        )
        self.models.append(model)
        return model

    def flush(self, extra: Mapping[str, JSONValue] | None = None) -> None:
        """One pipelined write of everything computed by this request (plus ``extra``)."""
        pending: dict[str, JSONValue] = dict(extra or {})
        for model in self.models:
            pending.update(model.take_pending())
        pending = capped_writes(pending)
        if pending:
            self.context.cache.set_many(pending)

    @property
    def shapes(self) -> int:
        return sum(model.shapes_seen for model in self.models)

    def counters(self, *, response_cache_hit: bool = False) -> CacheCounters:
        return CacheCounters(
            backend=self.context.cache.backend,
            hits=self.usage.hits,
            misses=self.usage.misses,
            round_trips=self.usage.round_trips,
            response_cache_hit=response_cache_hit,
        )

    def usable_layouts(
        self, layouts: Sequence[ParallelLayout]
    ) -> tuple[list[ParallelLayout], dict[str, str]]:
        """Layouts the runner can build; the others with the reason (e.g. TP vs heads)."""
        usable: list[ParallelLayout] = []
        rejected: dict[str, str] = {}
        for layout in layouts:
            try:
                self.serving(layout)
            except (InvalidParameterError, UnsupportedError) as exc:
                rejected[layout.label] = str(exc)
            else:
                usable.append(layout)
        return usable, rejected
