"""Service functions: request model -> domain call (through the latency cache) -> response model.

The API and the CLI are thin adapters over these functions. Every function here is synchronous
and CPU-bound; the API runs them in a worker thread (``anyio.to_thread.run_sync``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from app.cache import LatencyCache, create_cache
from app.settings import Settings


class ServiceStats:
    """Thread-safe counters exported by ``/metrics``."""

    __slots__ = ("_lock", "forward_evaluations", "response_cache_hits")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.forward_evaluations = 0
        self.response_cache_hits = 0

    def add(self, *, forward_evaluations: int = 0, response_cache_hits: int = 0) -> None:
        with self._lock:
            self.forward_evaluations += forward_evaluations
            self.response_cache_hits += response_cache_hits


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceContext:
    """What every service function needs; built once per process by the app lifespan or CLI."""

    settings: Settings
    cache: LatencyCache
    stats: ServiceStats = field(default_factory=ServiceStats)

    def close(self) -> None:
        self.cache.close()


def create_context(settings: Settings) -> ServiceContext:
    return ServiceContext(settings=settings, cache=create_cache(settings))
