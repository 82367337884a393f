"""The latency cache: one interface, an in-process LRU (default) and Redis (shared by workers).

Values are small JSON objects (never pickle). Callers batch their I/O: plan every key a request
needs, fetch them with one :meth:`LatencyCache.get_many` (one ``MGET``), compute the misses and
write them back with one :meth:`LatencyCache.set_many` (one pipeline with a TTL).

A Redis failure never fails a request: the operation is answered as all-miss (reads) or dropped
(writes), a warning is logged, the ``errors`` counter grows, :meth:`check` reports the backend
unreachable (``/readyz`` answers 503), and after ``retry_interval_s`` the next operation tries
again, so the client reconnects on its own once Redis is back.

Key layout (versioned; bump :data:`CACHE_SCHEMA_VERSION` when the value format or the latency
model changes)::

    chunkwise:v<schema>:<kind>:<digest of app version + runner identity>:<p|d>:<conc>:<q>:<s>
    chunkwise:v<schema>:<kind>:<digest>:m:<p conc>:<p q>:<p s>:<d conc>:<d q>:<d s>

The second form is a fused mixed step (a prefill part and a decode part in one forward): its own
phase letter and six numbers, so it never collides with a prefill or decode key.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from app import __version__
from app.core.cost import AnyShape, MixedShape
from app.service_settings import ServiceSettings

if TYPE_CHECKING:
    import redis

logger = logging.getLogger("chunkwise.cache")

CACHE_SCHEMA_VERSION = 1
KEY_PREFIX = "chunkwise"

JSONObject = dict[str, Any]
#: What a cache stores: a JSON object or array (compact records are arrays).
JSONValue = dict[str, Any] | list[Any]


def identity_digest(identity: str) -> str:
    """Digest of everything that changes a forward's cost except its shape.

    ``identity`` is the runner's stable description (model, device, parallel layout,
    quantization, ...); the application version is mixed in so a release never reads numbers
    produced by an older latency model.
    """
    payload = f"{__version__}\x00{identity}".encode()
    return hashlib.sha256(payload).hexdigest()[:24]


def shape_key(digest: str, shape: AnyShape, kind: str = "lat") -> str:
    """Cache key of one forward shape or fused mixed step (``kind`` separates compact and full
    records)."""
    if isinstance(shape, MixedShape):
        p, d = shape.prefill, shape.decode
        tail = (
            f"m:{p.concurrency}:{p.query_len}:{p.seq_len}:{d.concurrency}:{d.query_len}:{d.seq_len}"
        )
    else:
        phase = "d" if shape.is_decode else "p"
        tail = f"{phase}:{shape.concurrency}:{shape.query_len}:{shape.seq_len}"
    return f"{KEY_PREFIX}:v{CACHE_SCHEMA_VERSION}:{kind}:{digest}:{tail}"


def response_key(kind: str, canonical_request: str) -> str:
    """Cache key of a whole response to a canonical (sorted-keys JSON) request."""
    payload = f"{__version__}\x00{canonical_request}".encode()
    return f"{KEY_PREFIX}:v{CACHE_SCHEMA_VERSION}:resp:{kind}:{hashlib.sha256(payload).hexdigest()}"


#: The key a readiness check writes to learn whether a refusing Redis accepts writes again.
PROBE_KEY = f"{KEY_PREFIX}:v{CACHE_SCHEMA_VERSION}:probe"
PROBE_TTL_S = 60


class CacheStats:
    """Thread-safe counters; ``/metrics`` reads them at scrape time."""

    __slots__ = ("_lock", "_warned_invalid", "errors", "hits", "invalid", "misses", "writes")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.errors = 0
        self.writes = 0
        self.invalid = 0
        self._warned_invalid = False

    def add(
        self, *, hits: int = 0, misses: int = 0, errors: int = 0, writes: int = 0, invalid: int = 0
    ) -> None:
        with self._lock:
            self.hits += hits
            self.misses += misses
            self.errors += errors
            self.writes += writes
            self.invalid += invalid

    def reject(self, key: str, why: str) -> None:
        """A value read under ``key`` failed its schema: counted (``invalid``), logged once per
        process (a poisoned cache would otherwise log on every read), recomputed by the caller
        and overwritten with the computed value."""
        with self._lock:
            self.invalid += 1
            first = not self._warned_invalid
            self._warned_invalid = True
        if first:
            logger.warning(
                "cache value under %s failed its check (%s); recomputing and overwriting "
                "(further invalid values are only counted: chunkwise_cache_invalid_total)",
                key,
                why,
            )

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {
                "hits": self.hits,
                "misses": self.misses,
                "errors": self.errors,
                "writes": self.writes,
                "invalid": self.invalid,
            }


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheHealth:
    backend: str
    reachable: bool
    detail: str = ""
    #: False while the backend answers but refuses writes (a full Redis under ``noeviction``,
    #: a read-only replica): requests are answered, nothing computed is kept.
    writable: bool = True


@runtime_checkable
class LatencyCache(Protocol):
    """Batched JSON key/value store for forward-pass results."""

    backend: str
    #: Whether other processes read what this one writes, over a network (Redis): what saves
    #: a round trip, such as an optimize search's manifest, is worth storing only then.
    shared: bool
    stats: CacheStats

    def get_many(self, keys: Sequence[str]) -> list[JSONValue | None]:
        """Values for ``keys`` in order; ``None`` for a miss. Never raises for backend errors."""
        ...

    def set_many(self, items: Mapping[str, JSONValue], *, ttl_s: int | None = None) -> bool:
        """Store every item (one round trip; ``ttl_s``: their expiry instead of the backend's
        default, where the backend expires keys). Never raises for backend errors: False when
        the backend did not take them (unreachable, refusing writes), True otherwise."""
        ...

    def delete_many(self, keys: Sequence[str]) -> None:
        """Remove ``keys`` (one round trip). Never raises for backend errors."""
        ...

    def check(self) -> CacheHealth:
        """Probe the backend now (used by ``/readyz``)."""
        ...

    def close(self) -> None: ...


class MemoryLatencyCache:
    """In-process LRU bounded by entry count and by bytes. Values are JSON text, like Redis."""

    backend = "memory"
    shared = False

    def __init__(self, max_entries: int = 200_000, max_bytes: int = 256 * 1024 * 1024) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError("max_entries and max_bytes must be >= 1")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.stats = CacheStats()
        self._data: OrderedDict[str, str] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._data)

    @property
    def size_bytes(self) -> int:
        """Approximate: characters of keys and JSON values."""
        return self._bytes

    def get_many(self, keys: Sequence[str]) -> list[JSONValue | None]:
        raws: list[str | None] = []
        with self._lock:
            for key in keys:
                raw = self._data.get(key)
                if raw is not None:
                    self._data.move_to_end(key)
                raws.append(raw)
        out = [_decode(raw) for raw in raws]  # decode outside the lock
        hits = sum(value is not None for value in out)
        self.stats.add(hits=hits, misses=len(out) - hits)
        return out

    def set_many(self, items: Mapping[str, JSONValue], *, ttl_s: int | None = None) -> bool:
        # An LRU: keys leave by eviction (values that expire say so themselves).
        encoded = _encode_all(items)
        if not encoded:
            return True
        with self._lock:
            for key, raw in encoded.items():
                old = self._data.pop(key, None)
                if old is not None:
                    self._bytes -= len(key) + len(old)
                self._data[key] = raw
                self._bytes += len(key) + len(raw)
            while self._data and (
                len(self._data) > self.max_entries or self._bytes > self.max_bytes
            ):
                key, raw = self._data.popitem(last=False)
                self._bytes -= len(key) + len(raw)
        self.stats.add(writes=len(encoded))
        return True

    def delete_many(self, keys: Sequence[str]) -> None:
        with self._lock:
            for key in keys:
                raw = self._data.pop(key, None)
                if raw is not None:
                    self._bytes -= len(key) + len(raw)

    def check(self) -> CacheHealth:
        return CacheHealth(
            backend=self.backend,
            reachable=True,
            detail=f"{len(self)} entries, {self._bytes} bytes",
        )

    def close(self) -> None:
        with self._lock:
            self._data.clear()
            self._bytes = 0


class RedisLatencyCache:
    """Redis backend shared by every worker; degrades to all-miss when Redis is unreachable."""

    backend = "redis"
    shared = True

    def __init__(
        self,
        url: str,
        *,
        ttl_s: int = 7 * 24 * 3600,
        connect_timeout_s: float = 0.25,
        socket_timeout_s: float = 0.5,
        retry_interval_s: float = 1.0,
    ) -> None:
        self.url = url
        self.ttl_s = ttl_s
        self.retry_interval_s = retry_interval_s
        self.stats = CacheStats()
        # The redis client is imported here, not with this module: only this backend needs it
        # (about 0.1 s of every CLI start-up otherwise).
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        # A server reply refusing a write (OOM under noeviction, READONLY): Redis is reachable
        # and reads go on; only writes pause.
        self._refusals: tuple[type[BaseException], ...] = (redis.ResponseError,)
        # No client-side retries: one failed round trip costs at most one socket timeout.
        self._client: redis.Redis = redis.Redis.from_url(
            url,
            socket_connect_timeout=connect_timeout_s,
            socket_timeout=socket_timeout_s,
            retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False,
            health_check_interval=30,
        )
        self._lock = threading.Lock()
        self._down_until = 0.0
        self._last_error = ""
        self._reachable = True
        self._refusing_until = 0.0
        self._refusal = ""

    # -- failure bookkeeping -------------------------------------------------------------
    def _skipping(self) -> bool:
        with self._lock:
            return time.monotonic() < self._down_until

    def _failed(self, operation: str, exc: BaseException) -> None:
        self.stats.add(errors=1)
        with self._lock:
            was_reachable = self._reachable
            self._reachable = False
            self._last_error = _describe(exc)
            self._down_until = time.monotonic() + self.retry_interval_s
        if was_reachable:
            logger.warning(
                "redis cache unreachable during %s (%s); computing locally and retrying in %.1fs",
                operation,
                self._last_error,
                self.retry_interval_s,
            )

    def _succeeded(self) -> None:
        with self._lock:
            was_reachable = self._reachable
            self._reachable = True
            self._down_until = 0.0
            self._last_error = ""
        if not was_reachable:
            logger.info("redis cache reachable again at %s", redact_url(self.url))

    def _refusing(self) -> bool:
        with self._lock:
            return time.monotonic() < self._refusing_until

    def _refused(self, exc: BaseException) -> None:
        """A write refused by the server: pause writes for the retry interval; one warning
        when it starts (not one per request), one info line when writes are accepted again."""
        self.stats.add(errors=1)
        with self._lock:
            first = not self._refusal
            self._refusal = _describe(exc)
            self._refusing_until = time.monotonic() + self.retry_interval_s
        if first:
            logger.warning(
                "redis cache refuses writes (%s); reads go on, computed forwards are not kept, "
                "writes are retried every %.1fs",
                self._refusal,
                self.retry_interval_s,
            )

    def _accepted(self) -> None:
        with self._lock:
            was_refusing = bool(self._refusal)
            self._refusal = ""
            self._refusing_until = 0.0
        if was_refusing:
            logger.info("redis cache accepts writes again at %s", redact_url(self.url))

    # -- LatencyCache --------------------------------------------------------------------
    def get_many(self, keys: Sequence[str]) -> list[JSONValue | None]:
        if not keys:
            return []
        if self._skipping():
            self.stats.add(misses=len(keys))
            return [None] * len(keys)
        try:
            raws = self._client.mget(list(keys))
        except self._errors as exc:
            self._failed("MGET", exc)
            self.stats.add(misses=len(keys))
            return [None] * len(keys)
        self._succeeded()
        out = [_decode(raw) for raw in raws]
        hits = sum(value is not None for value in out)
        self.stats.add(hits=hits, misses=len(out) - hits)
        return out

    def set_many(self, items: Mapping[str, JSONValue], *, ttl_s: int | None = None) -> bool:
        encoded = _encode_all(items)
        if not encoded:
            return True
        if self._skipping() or self._refusing():
            return False
        try:
            pipe = self._client.pipeline(transaction=False)
            for key, raw in encoded.items():
                pipe.set(key, raw, ex=self.ttl_s if ttl_s is None else ttl_s)
            pipe.execute()
        except self._refusals as exc:
            self._succeeded()  # it answered
            self._refused(exc)
            return False
        except self._errors as exc:
            self._failed("pipelined SET", exc)
            return False
        self._succeeded()
        self._accepted()
        self.stats.add(writes=len(encoded))
        return True

    def delete_many(self, keys: Sequence[str]) -> None:
        if not keys or self._skipping():
            return
        try:
            self._client.delete(*keys)
        except self._errors as exc:
            self._failed("DEL", exc)
            return
        self._succeeded()

    def check(self) -> CacheHealth:
        try:
            self._client.ping()
        except self._errors as exc:
            self._failed("PING", exc)
            return CacheHealth(backend=self.backend, reachable=False, detail=self._last_error)
        self._succeeded()
        # Probe with one small write, every time: a Redis that filled up refuses the writes of
        # every process (a heavy lane's children write, the worker may not), and one accepted
        # write clears a refusal without waiting for traffic (which an unready worker does
        # not get).
        try:
            self._client.set(PROBE_KEY, "1", ex=PROBE_TTL_S)
        except self._refusals as exc:
            self._refused(exc)
        except self._errors as exc:
            self._failed("probe SET", exc)
            return CacheHealth(backend=self.backend, reachable=False, detail=self._last_error)
        else:
            self._accepted()
        with self._lock:
            refusal = self._refusal
        if refusal:
            return CacheHealth(
                backend=self.backend,
                reachable=True,
                writable=False,
                detail=f"refuses writes ({refusal})",
            )
        return CacheHealth(backend=self.backend, reachable=True, detail=redact_url(self.url))

    def close(self) -> None:
        self._client.close()


def create_cache(settings: ServiceSettings) -> LatencyCache:
    """The backend chosen by ``APP_CACHE_BACKEND``."""
    if settings.cache_backend == "redis":
        return RedisLatencyCache(
            settings.redis_url,
            ttl_s=settings.cache_ttl_s,
            connect_timeout_s=settings.redis_connect_timeout_s,
            socket_timeout_s=settings.redis_socket_timeout_s,
            retry_interval_s=settings.redis_retry_interval_s,
        )
    return MemoryLatencyCache(settings.cache_max_entries, settings.cache_max_bytes)


def _encode_all(items: Mapping[str, JSONValue]) -> dict[str, str]:
    """JSON text per key; values that are not strict JSON (NaN, inf) are not cached."""
    out: dict[str, str] = {}
    for key, value in items.items():
        try:
            out[key] = json.dumps(value, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError):
            logger.debug("not caching %s: value is not strict JSON", key)
    return out


def _decode(raw: str | bytes | None) -> JSONValue | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None  # a corrupt (or absurdly nested) entry is a miss; the next write replaces it
    return value if isinstance(value, dict | list) else None


#: Deepest nesting a cached document may have (responses nest about six levels).
MAX_CACHED_DEPTH = 32


def all_finite(value: JSONValue) -> bool:
    """Whether a cached JSON document holds only finite numbers (``json.loads`` reads ``NaN``
    and ``Infinity``) and nests at most ``MAX_CACHED_DEPTH`` levels; walked iteratively."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= MAX_CACHED_DEPTH:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(item, float) and not math.isfinite(item):
            return False
    return True


#: Longest error text a health answer or a log line quotes.
MAX_ERROR_TEXT = 200


def _describe(exc: BaseException) -> str:
    """An error of the backend as health answers and logs show it: its class and the server's
    message, without the command (redis-py prefixes a pipeline's error with the command and
    its key, "Command # 1 (SET calibration:cal-... ...) of pipeline caused error: ...": no key
    or value appears in any error text)."""
    text = str(exc).rpartition(" of pipeline caused error: ")[2]
    return f"{type(exc).__name__}: {text}"[:MAX_ERROR_TEXT]


def durable_client(
    url: str, *, socket_timeout_s: float, retries: int, decode_responses: bool = False
) -> redis.Redis:
    """A client of a durable store (sweeps, calibrations: docs/sweeps.md), unlike the latency
    cache's: a lost connection (a Redis restart) is retried ``retries`` times, backing off to
    2 s, before the caller's error (the API answers 503 soon; a worker waits longer)."""
    import redis
    from redis.backoff import ExponentialBackoff
    from redis.retry import Retry

    client: redis.Redis = redis.Redis.from_url(
        url,
        socket_connect_timeout=2.0,
        socket_timeout=socket_timeout_s,
        retry=Retry(ExponentialBackoff(cap=2.0, base=0.1), retries),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
        health_check_interval=30,
        decode_responses=decode_responses,
    )
    return client


def redact_url(url: str) -> str:
    """The URL without its password, for logs and health output."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.rpartition('@')[2]}"
