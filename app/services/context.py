"""Per-process service state: settings, the latency cache, counters and the runner memo."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from contextvars import ContextVar
from dataclasses import dataclass, field

from app.cache import LatencyCache, create_cache
from app.core.runner import RunnerServingModel
from app.core.workload import PlanCache
from app.service_settings import ServiceSettings
from app.services.calibration_store import (
    CalibrationStore,
    MemoryCalibrationStore,
    create_calibration_store,
)


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


class RunnerMemo:
    """The memo of built runners: a process-wide LRU of serving models keyed by (resolved
    deployment, layout), at most ``max_entries``, kept for the life of the process (building
    one costs ~0.3 ms: sharding and identity). It holds no forward results."""

    def __init__(self, max_entries: int = 256) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, RunnerServingModel] = OrderedDict()
        self._max_entries = max_entries

    def get_or_build(
        self, key: Hashable, build: Callable[[], RunnerServingModel]
    ) -> RunnerServingModel:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found
        built = build()  # outside the lock; a rare duplicate build is harmless
        with self._lock:
            self._entries[key] = built
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)
        return built


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceContext:
    """What every service function needs; built once per process by the app lifespan or CLI."""

    settings: ServiceSettings
    cache: LatencyCache
    stats: ServiceStats = field(default_factory=ServiceStats)
    runners: RunnerMemo = field(default_factory=RunnerMemo)
    #: Closed-loop plans of this process (scheduling decisions, no latency): a search or a
    #: simulation repeated with other limits, or after its forwards were cached, replays them.
    plans: PlanCache = field(
        default_factory=lambda: PlanCache(ServiceSettings.model_fields["plan_cache_items"].default)
    )
    #: Stored calibrations: the durable store's (``Settings.store_url``), else this process's.
    calibrations: CalibrationStore = field(default_factory=MemoryCalibrationStore)

    def close(self) -> None:
        self.cache.close()
        self.calibrations.close()


def create_context(settings: ServiceSettings, *, store_url: str | None = None) -> ServiceContext:
    """The process's context; ``store_url``: the durable store's Redis when it is not
    ``settings.store_url`` (a sweep worker's is its broker's)."""
    return ServiceContext(
        settings=settings,
        cache=create_cache(settings),
        plans=PlanCache(max_items=settings.plan_cache_items),
        calibrations=create_calibration_store(
            settings.store_url if store_url is None else store_url
        ),
    )


#: When the current request arrived (``time.monotonic()``), set by the API's compute gate before
#: the request waits for a slot: a deadline counts from the arrival, so time spent queued counts.
REQUEST_STARTED_S: ContextVar[float | None] = ContextVar(
    "chunkwise_request_started_s", default=None
)


#: The owner of the current request (the SHA-256 digest of its API key, set by the API's
#: authentication; None: authentication is off, or the CLI): stored calibrations belong to it.
REQUEST_OWNER: ContextVar[str | None] = ContextVar("chunkwise_request_owner", default=None)


def deadline_from(settings: ServiceSettings) -> float:
    """The monotonic time the current computation must end by (from the request's arrival when
    the API set it, else from now: the CLI)."""
    started = REQUEST_STARTED_S.get()
    return (time.monotonic() if started is None else started) + settings.request_deadline_s
