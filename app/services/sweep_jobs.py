"""Sweeps of the API (``/v1/sweeps``): submitted, queued, watched, read, cancelled.

    SweepRequest --points + prepare (every scenario validated and resolved)--> Tasks
        --store.create--> the sweep (its tasks in the store) --dispatch--> batches of keys
        --> Celery workers (a broker configured) or the API's own process pool (none)
        --> one row per scenario key in the store <-- progress / rows / cancel

With a broker (``APP_BROKER_URL``, or ``APP_REDIS_URL`` when the cache backend is Redis) the
sweep lives in the Redis sweep store and its batches go to ``chunkwise worker`` processes on
any machine (:mod:`.sweep_queue`). Without one the API runs the batches in a ``spawn`` pool of
``APP_SWEEP_PROCESSES`` processes of its own, started with its first sweep, and keeps the sweep
in memory (gone when the API stops): a laptop needs nothing else.
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.core.sweep import SweepPoint, expand_csv, expand_grid
from app.services import sweep
from app.services.sweep_store import (
    MemorySweepStore,
    RedisSweepStore,
    SweepMeta,
    SweepProgress,
    SweepStore,
    SweepStoreError,
    new_sweep_id,
)
from app.settings import Settings

if TYPE_CHECKING:
    from app.models.sweep import SweepRequest
    from app.services.context import ServiceContext

logger = logging.getLogger("chunkwise.sweeps")

#: A queued sweep is split into at least this many batches (so as many workers share it),
#: each of at most ``sweep.MAX_BATCH`` scenarios.
MIN_QUEUED_BATCHES = 64


def points_of(request: SweepRequest) -> tuple[SweepPoint, ...]:
    """The scenarios' request bodies of a spec (an error names the field or the count)."""
    if request.csv is not None:
        return sweep.typed_points(expand_csv(request.csv))
    return expand_grid(request.grid_document())


def queued_batches(keys: Sequence[str]) -> list[Sequence[str]]:
    """The keys in batches: at least :data:`MIN_QUEUED_BATCHES` when there are that many
    scenarios, at most ``sweep.MAX_BATCH`` scenarios each."""
    return list(sweep.batches(keys, MIN_QUEUED_BATCHES // sweep.BATCHES_PER_PROCESS))


def idempotency_digest(key: str | None) -> str | None:
    return None if key is None else hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Submitted:
    """A submission's answer: the sweep's id, and whether it is a new one."""

    sweep_id: str
    created: bool


class LocalPool:
    """The API's own sweep pool (no broker): batches in ``spawn`` processes, rows to the
    store as each batch ends; a batch whose process died is rows with that error."""

    def __init__(self, settings: Settings, store: SweepStore) -> None:
        self._settings = settings
        self._store = store
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self._futures: dict[str, list[Future[list[dict[str, Any]]]]] = {}

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            # A pool whose process died is broken for good (its batches were rows with the
            # error): the next sweep gets a new one.
            if self._pool is not None and getattr(self._pool, "_broken", False):
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=self._settings.sweep_processes,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=sweep.worker_start,
                    initargs=(self._settings.model_dump_json(),),
                )
            return self._pool

    def dispatch(
        self,
        sweep_id: str,
        tasks: Sequence[sweep.Task],
        *,
        owner: str | None = None,
        calibrations: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        """The tasks' batches to the pool, evaluated as ``owner`` with ``calibrations`` (the
        stored profiles they name, when this process keeps them: the pool cannot read them)."""
        pool = self._executor()
        futures = []
        for batch in sweep.batches(tasks, self._settings.sweep_processes):
            future = pool.submit(sweep.evaluate_batch, batch, owner, calibrations)
            future.add_done_callback(self._writer(sweep_id, batch))
            futures.append(future)
        with self._lock:
            self._futures[sweep_id] = futures

    def _writer(
        self, sweep_id: str, batch: Sequence[sweep.Task]
    ) -> Callable[[Future[list[dict[str, Any]]]], None]:
        def write(future: Future[list[dict[str, Any]]]) -> None:
            if future.cancelled():
                return
            error = future.exception()
            if error is None:
                rows = future.result()
            else:
                logger.error("a sweep batch failed in the API's pool: %s", error)
                rows = [sweep.error_row(task, f"the evaluation failed: {error}") for task in batch]
            self._store.put_rows(sweep_id, rows)

        return write

    def cancel(self, sweep_id: str) -> None:
        with self._lock:
            futures = self._futures.pop(sweep_id, [])
        for future in futures:
            future.cancel()

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


class Sweeps:
    """The API's sweeps: the store, and where batches run (Celery or the local pool)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        broker = settings.sweep_broker
        self.executor = "celery" if broker else "local"
        self.store: SweepStore
        self._local: LocalPool | None = None
        if broker:
            self.store = RedisSweepStore(settings.store_url, ttl_s=settings.sweep_ttl_s)
        else:
            self.store = MemorySweepStore()
            self._local = LocalPool(settings, self.store)

    def submit(
        self,
        context: ServiceContext,
        request: SweepRequest,
        *,
        owner: str | None,
        idempotency_key: str | None,
    ) -> Submitted:
        """Validate and resolve every scenario (an error raises before anything is stored),
        store the sweep and queue its batches (blocking: run it in a thread)."""
        tasks = sweep.prepare(context, points_of(request))
        meta = SweepMeta(
            id=new_sweep_id(),
            owner=owner,
            total=len(tasks),
            created_s=time.time(),
            columns=tuple(sweep.columns(tasks)),
        )
        sweep_id = self.store.create(meta, tasks, idempotency_digest(idempotency_key))
        if sweep_id != meta.id:
            self._resume(sweep_id, owner)
            return Submitted(sweep_id, created=False)
        if self._local is not None:
            self._local.dispatch(
                sweep_id, tasks, owner=owner, calibrations=_kept_calibrations(context, tasks)
            )
        else:
            from app.services.sweep_queue import enqueue

            try:
                enqueue(self.settings, sweep_id, queued_batches([t.scenario_key for t in tasks]))
            except Exception as exc:  # kombu's connection errors have no common base
                failed = f"the broker did not take the sweep's batches: {exc}"
                raise SweepStoreError(failed) from exc
        return Submitted(sweep_id, created=True)

    def _resume(self, sweep_id: str, owner: str | None) -> None:
        """A resubmitted sweep that is running but has written no row for longer than the
        visibility timeout has lost batches (kombu's Redis transport can lose a message taken
        by ``BRPOP`` whose reply a broker restart cut off): its scenarios without a row are
        queued again. Rows already written stay (a row is written once)."""
        if self._local is not None:
            return
        progress = self.store.progress(sweep_id, owner)
        quiet_s = time.time() - (progress.last_s or progress.meta.created_s)
        if progress.state != "running" or quiet_s <= self.settings.sweep_visibility_timeout_s:
            return
        from app.services.sweep_queue import enqueue

        missing = self.store.missing(sweep_id)
        logger.warning("sweep %s: %d scenarios queued again (resubmitted)", sweep_id, len(missing))
        enqueue(self.settings, sweep_id, queued_batches(missing))

    def progress(self, sweep_id: str, owner: str | None) -> SweepProgress:
        return self.store.progress(sweep_id, owner)

    def rows(self, sweep_id: str, owner: str | None) -> tuple[SweepMeta, Iterator[dict[str, Any]]]:
        """The sweep's meta (checked now: 404 before a streamed answer starts) and its rows."""
        meta = self.store.progress(sweep_id, owner).meta
        return meta, self.store.iter_rows(sweep_id)

    def cancel(self, sweep_id: str, owner: str | None) -> SweepProgress:
        self.store.cancel(sweep_id, owner)
        if self._local is not None:
            self._local.cancel(sweep_id)
        return self.store.progress(sweep_id, owner)

    def close(self) -> None:
        if self._local is not None:
            self._local.close()
        self.store.close()


def _kept_calibrations(
    context: ServiceContext, tasks: Sequence[sweep.Task]
) -> dict[str, Mapping[str, Any]]:
    """The stored profiles the tasks name, as stored, when this process keeps them (a shared
    store: none, the pool reads it); ``prepare`` has read each as the sweep's owner."""
    if context.calibrations.shared:
        return {}
    found = {ref: context.calibrations.get(ref) for ref in sweep.named_calibrations(tasks)}
    return {ref: value for ref, value in found.items() if isinstance(value, dict)}


def rate_and_eta(progress: SweepProgress, now_s: float) -> tuple[float | None, float | None]:
    """Scenarios per second since creation (until the last row once done) and the seconds
    left at that rate."""
    if progress.done == 0:
        return None, None
    end = progress.last_s if progress.state != "running" and progress.last_s else now_s
    rate = progress.done / max(end - progress.meta.created_s, 1e-6)
    left = progress.meta.total - progress.done
    eta = left / rate if progress.state == "running" and left > 0 else None
    return rate, eta
