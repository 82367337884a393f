"""Where stored calibrations live: the durable store, never the latency cache's LRU.

A profile a client fitted is data it cannot get back without its measurements, so it lives
where sweeps do (docs/sweeps.md, "Durable state"): the Redis of ``APP_SWEEP_STORE_URL``, else
the sweeps' broker (``APP_BROKER_URL``, or ``APP_REDIS_URL`` when the cache backend is Redis),
configured with persistence and ``noeviction``. Without one, the process keeps its profiles in
a store of their own (:class:`MemoryCalibrationStore`): latency traffic never evicts one, they
are gone when the process stops, and the store holds at most
:data:`MAX_MEMORY_CALIBRATIONS`.

Key layout (unchanged from when profiles lived in the cache backend)::

    calibration:<id>   JSON {id, owner, profile, expires_at_s}, with the same TTL on the key
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Protocol

from app.cache import JSONObject, JSONValue, durable_client, redact_url

KEY_PREFIX = "calibration:"
#: Most profiles a process keeps without a durable store (a profile's JSON is at most 64 KiB:
#: at most 64 MiB). Expired ones are dropped first; past it a new one is refused, never an
#: older one evicted.
MAX_MEMORY_CALIBRATIONS = 1000


class CalibrationStoreError(Exception):
    """The calibration store cannot do what was asked (a 503). ``retry_after_s``: when a retry
    may succeed (None: not before the deployment changes)."""

    title = "Calibration not stored"
    retry_after_s: int | None = 1


class StoreUnavailableError(CalibrationStoreError):
    """The store did not take the write (unreachable, full, read-only): answering 201 with an
    id that then 404s would lose the profile silently."""


class StoreUnreachableError(CalibrationStoreError):
    """The store did not answer a read: the profile may exist (not a 404)."""

    title = "Calibration store unavailable"


class UnsharedStoreError(CalibrationStoreError):
    """Several workers serve the port and each keeps its own profiles: a profile one stored,
    the others would not know."""

    retry_after_s = None


class StoreFullError(CalibrationStoreError):
    """The in-process store holds :data:`MAX_MEMORY_CALIBRATIONS` profiles."""

    retry_after_s = None


class CalibrationStore(Protocol):
    """Stored profiles by id: JSON values with an expiry."""

    #: Whether every process of the deployment reads what this one writes.
    shared: bool

    def put(self, calibration_id: str, value: JSONObject, *, ttl_s: int) -> None:
        """Store ``value`` for ``ttl_s`` seconds (raises :class:`CalibrationStoreError`)."""
        ...

    def get(self, calibration_id: str) -> JSONValue | None:
        """The stored value (None: none, or not JSON); raises :class:`StoreUnreachableError`."""
        ...

    def delete(self, calibration_id: str) -> None: ...

    def close(self) -> None: ...


class MemoryCalibrationStore:
    """This process's profiles (no durable store configured): a dict, not an LRU."""

    shared = False

    def __init__(self, max_items: int | None = None) -> None:
        self.max_items = MAX_MEMORY_CALIBRATIONS if max_items is None else max_items
        self._lock = threading.Lock()
        self._values: dict[str, tuple[str, float]] = {}  # id -> (JSON text, monotonic expiry)

    def __len__(self) -> int:
        return len(self._values)

    def put(self, calibration_id: str, value: JSONObject, *, ttl_s: int) -> None:
        now = time.monotonic()
        with self._lock:
            for key in [k for k, (_, until) in self._values.items() if until <= now]:
                del self._values[key]
            if calibration_id not in self._values and len(self._values) >= self.max_items:
                raise StoreFullError(
                    f"the calibration was not stored: this process keeps at most "
                    f"{self.max_items} profiles without a durable store; delete some, or set "
                    "APP_SWEEP_STORE_URL (or APP_BROKER_URL) to a Redis store"
                )
            self._values[calibration_id] = (json.dumps(value), now + ttl_s)

    def get(self, calibration_id: str) -> JSONValue | None:
        with self._lock:
            found = self._values.get(calibration_id)
        if found is None or found[1] <= time.monotonic():
            return None
        loaded: JSONValue = json.loads(found[0])
        return loaded

    def delete(self, calibration_id: str) -> None:
        with self._lock:
            self._values.pop(calibration_id, None)

    def close(self) -> None:
        with self._lock:
            self._values.clear()


class RedisCalibrationStore:
    """Profiles in the durable Redis (every worker, API process and heavy-lane child reads
    them)."""

    shared = True

    def __init__(self, url: str, *, socket_timeout_s: float = 5.0, retries: int = 2) -> None:
        import redis

        self.url = url
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self._client = durable_client(url, socket_timeout_s=socket_timeout_s, retries=retries)

    def _failed(self, exc: BaseException) -> str:
        # The store's URL without its password, the error's class: no key, no value.
        return f"the calibration store ({redact_url(self.url)}) failed: {type(exc).__name__}"

    def put(self, calibration_id: str, value: JSONObject, *, ttl_s: int) -> None:
        try:
            self._client.set(KEY_PREFIX + calibration_id, json.dumps(value), ex=ttl_s)
        except self._errors as exc:
            raise StoreUnavailableError(
                f"the calibration was not stored: {self._failed(exc)}; retry shortly"
            ) from None

    def get(self, calibration_id: str) -> JSONValue | None:
        try:
            raw: Any = self._client.get(KEY_PREFIX + calibration_id)
        except self._errors as exc:
            raise StoreUnreachableError(f"{self._failed(exc)}; retry shortly") from None
        if raw is None:
            return None
        try:
            loaded = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
        return loaded if isinstance(loaded, dict | list) else None

    def delete(self, calibration_id: str) -> None:
        try:
            self._client.delete(KEY_PREFIX + calibration_id)
        except self._errors as exc:
            raise StoreUnreachableError(f"{self._failed(exc)}; retry shortly") from None

    def close(self) -> None:
        self._client.close()


def create_calibration_store(url: str) -> CalibrationStore:
    """The Redis store at ``url`` (the durable store's); this process's own when empty."""
    return RedisCalibrationStore(url) if url else MemoryCalibrationStore()
