"""CPU-bound service calls run in worker threads, gated so overload is a fast 503, not a queue.

At most ``max_concurrent_computations`` run at once per worker process (threads share the GIL:
more would only stretch every request) and at most ``max_queued_computations`` wait; beyond
that a request is refused at once with 503 problem+json and ``Retry-After``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio

T = TypeVar("T")


class OverloadedError(Exception):
    """Every computation slot is busy and the wait queue is full."""


@dataclass(slots=True)
class ComputeGate:
    limiter: anyio.CapacityLimiter
    max_waiting: int

    @classmethod
    def create(cls, max_concurrent: int, max_waiting: int) -> ComputeGate:
        return cls(anyio.CapacityLimiter(max_concurrent), max_waiting)

    async def run(self, fn: Callable[[], T]) -> T:
        stats = self.limiter.statistics()
        if stats.borrowed_tokens >= stats.total_tokens and stats.tasks_waiting >= self.max_waiting:
            raise OverloadedError(
                f"{stats.borrowed_tokens} computations running and {stats.tasks_waiting} "
                "waiting; retry shortly"
            )
        return await anyio.to_thread.run_sync(fn, limiter=self.limiter)
