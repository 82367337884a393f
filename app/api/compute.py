"""CPU-bound service calls run in worker threads, gated so overload is a fast 503, not a queue.

Two lanes, each its own pool of slots, so a cheap request never waits behind expensive ones:

- **light** (``max_light_computations`` slots): requests whose cost is bounded small by their
  size alone -- a chunk plan, one forward, and a simulation that
  :func:`~app.services.is_light_simulation` accepts (at most ``LIGHT_SIMULATION_CHUNK_REQUESTS``
  prefill chunks x requests per replica, no step timeline);
- **heavy** (``max_concurrent_computations`` slots): every optimize and the other simulations.

In each lane at most its slots run at once per worker process (threads share the GIL: more
would only stretch every request) and at most ``max_queued_computations`` wait; beyond that a
request is refused at once with 503 problem+json and ``Retry-After``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import anyio

from app.core.errors import DeadlineExceededError
from app.services.context import REQUEST_STARTED_S, ServiceContext
from app.services.processes import HeavyProcesses

T = TypeVar("T")


class OverloadedError(Exception):
    """Every computation slot is busy and the wait queue is full."""


@dataclass(slots=True)
class ComputeGate:
    limiter: anyio.CapacityLimiter
    max_waiting: int
    light: anyio.CapacityLimiter | None = None
    #: The request deadline (s): it counts from the request's arrival, so a request still
    #: waiting for a slot when it passes answers 504 at once (None: no deadline).
    deadline_s: float | None = None
    #: Child processes for the heavy lane (None: the heavy lane runs in threads).
    processes: HeavyProcesses | None = None

    @classmethod
    def create(
        cls,
        max_concurrent: int,
        max_waiting: int,
        max_light: int = 0,
        deadline_s: float | None = None,
        processes: HeavyProcesses | None = None,
    ) -> ComputeGate:
        light = anyio.CapacityLimiter(max_light) if max_light > 0 else None
        return cls(anyio.CapacityLimiter(max_concurrent), max_waiting, light, deadline_s, processes)

    async def run_service(
        self,
        name: str,
        service: Callable[[ServiceContext, Any], T],
        context: ServiceContext,
        request: Any,
        *,
        light: bool = False,
    ) -> T:
        """``service(context, request)`` in its lane: the heavy lane's in a child process
        when the gate has processes (``name`` selects it there), else in a worker thread."""
        if self.processes is not None and not (light and self.light is not None):
            call: Callable[[], T] = self.processes.submit(name, request, context)
        else:
            call = partial(service, context, request)
        return await self.run(call, light=light)

    async def run(self, fn: Callable[[], T], *, light: bool = False) -> T:
        """Run ``fn`` in a worker thread in its lane (the light lane only if there is one)."""
        limiter = self.light if light and self.light is not None else self.limiter
        stats = limiter.statistics()
        if stats.borrowed_tokens >= stats.total_tokens and stats.tasks_waiting >= self.max_waiting:
            raise OverloadedError(
                f"{stats.borrowed_tokens} computations running and {stats.tasks_waiting} "
                "waiting; retry shortly"
            )
        token = REQUEST_STARTED_S.set(time.monotonic())
        try:
            if self.deadline_s is None:
                return await anyio.to_thread.run_sync(fn, limiter=limiter)
            with anyio.move_on_after(self.deadline_s) as waited:
                await limiter.acquire()
            if waited.cancelled_caught:
                raise DeadlineExceededError(
                    f"no computation slot freed within the {self.deadline_s:g} s deadline; "
                    "retry shortly"
                )
            try:
                return await anyio.to_thread.run_sync(fn)
            finally:
                limiter.release()
        finally:
            REQUEST_STARTED_S.reset(token)
