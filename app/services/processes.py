"""Heavy computations in child processes (``APP_HEAVY_PROCESSES``), so they never hold the
worker's interpreter lock while cheap requests wait for it.

Threads of one worker process share one interpreter lock: while eight searches run in threads,
a chunk plan waits for its turn behind them (``bench/deadline.py``). With ``heavy_processes``
> 0 the worker hands every heavy computation (optimize, a heavy simulate, a capacity plan) to a
pool of that many child processes started with ``spawn`` (no lock or thread is inherited from
the worker); the worker process keeps only the event loop and the light lane.

Each child builds its own :class:`ServiceContext` from the worker's settings: its own
connection to the cache backend, its own runner memo. That is why processes need a shared
cache backend (Redis): an in-process cache would be one per child, invisible to the worker and
to the other children. The request's arrival time travels with it, so the deadline still counts
from the arrival (the monotonic clock is the machine's). The answer, or the domain error, comes
back pickled; counters a child records (forwards computed, response-cache hits) are its own.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from app.services.context import (
    REQUEST_OWNER,
    REQUEST_STARTED_S,
    ServiceContext,
    create_context,
)
from app.settings import Settings

logger = logging.getLogger("chunkwise.processes")

#: The exit status of a child whose worker died (its computation has no one to answer).
PARENT_GONE_EXIT_CODE = 3
#: The child's context (built once, by the pool's initializer): ``{"context": ...}``.
_CHILD: dict[str, ServiceContext] = {}


def _die_with_parent() -> None:
    """End this child when its worker ends, however it ends (a SIGKILL runs no clean-up: an
    orphaned child held 91 MB and a Redis connection for minutes). ``spawn`` hands a child the
    read end of a pipe whose write end only the parent holds (``parent_process().sentinel``):
    the kernel closes it when the parent dies, and a daemon thread waiting on it exits."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    sentinel = parent.sentinel

    def watch() -> None:
        multiprocessing.connection.wait([sentinel])
        os._exit(PARENT_GONE_EXIT_CODE)

    threading.Thread(target=watch, name="chunkwise-parent-watch", daemon=True).start()


def _init_child(settings_json: str) -> None:
    """Watch the parent (:func:`_die_with_parent`), build the child's context and import what
    its computations need (the services and the request models a pickled request unpickles
    into), before the first request arrives."""
    _die_with_parent()
    import app.models.calibration
    import app.models.optimize
    import app.models.simulate  # noqa: F401  # imported for their unpickling, not used here

    _services()
    _CHILD["context"] = create_context(Settings.model_validate_json(settings_json))


def _services() -> dict[str, Callable[..., Any]]:
    """The computations a child runs, by name (imported in the child)."""
    from app.services.calibration import create_calibration
    from app.services.capacity import plan
    from app.services.optimize import optimize
    from app.services.simulate import simulate

    return {
        "optimize": optimize,
        "simulate": simulate,
        "plan": plan,
        "calibrate": create_calibration,
    }


def _run_in_child(
    name: str, request: Any, started_s: float | None, owner: str | None = None
) -> tuple[Any, dict[str, int]]:
    """``name``'s service on ``request`` in the child, its deadline counting from
    ``started_s`` (the request's arrival in the worker), on behalf of ``owner`` (the request's
    key digest); with what it added to the child's counters, which the worker's ``/metrics``
    reports."""
    context = _CHILD["context"]  # the pool's initializer built it
    stats = context.stats
    before = (stats.forward_evaluations, stats.response_cache_hits)
    token = REQUEST_STARTED_S.set(started_s)
    owned = REQUEST_OWNER.set(owner)
    try:
        result = _services()[name](context, request)
    finally:
        REQUEST_OWNER.reset(owned)
        REQUEST_STARTED_S.reset(token)
    counted = {
        "forward_evaluations": stats.forward_evaluations - before[0],
        "response_cache_hits": stats.response_cache_hits - before[1],
    }
    return result, counted


def _started() -> None:
    """Nothing: submitted once per child so the pool starts its children at once."""


class ChildProcessLostError(Exception):
    """A child process died under a computation (killed, out of memory): the pool was
    restarted and the request may be retried (503 with ``Retry-After``)."""


class HeavyProcesses:
    """A ``spawn`` pool of ``processes`` children running heavy service calls; a pool whose
    child died is replaced by a new one (the computations it held answer 503)."""

    def __init__(self, settings: Settings, processes: int) -> None:
        self.processes = processes
        self._settings_json = settings.model_dump_json()
        self._lock = threading.Lock()
        self.pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        """A pool whose children start now (they import the engine and build their context
        before the first heavy request, not during its deadline)."""
        pool = ProcessPoolExecutor(
            max_workers=self.processes,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_child,
            initargs=(self._settings_json,),
        )
        for _ in range(self.processes):
            pool.submit(_started)
        return pool

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        """A new pool instead of ``broken`` (once, whichever request noticed first)."""
        with self._lock:
            if self.pool is broken:
                broken.shutdown(wait=False, cancel_futures=True)
                self.pool = self._new_pool()
                logger.error("a heavy-lane child process died; its pool was restarted")

    def submit(self, name: str, request: Any, context: ServiceContext) -> Callable[[], Any]:
        """A blocking call running ``name`` on ``request`` in a child (for a worker thread);
        what the child counted is added to ``context``'s counters."""

        def call() -> Any:  # the gate's thread: its context carries the arrival time
            started_s, owner = REQUEST_STARTED_S.get(), REQUEST_OWNER.get()
            pool = self.pool
            try:
                future = pool.submit(_run_in_child, name, request, started_s, owner)
                result, counted = future.result()
            except BrokenProcessPool as exc:
                self._replace(pool)
                raise ChildProcessLostError(
                    "the process computing this request stopped (restarted); retry shortly"
                ) from exc
            context.stats.add(**counted)
            return result

        return call

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
