"""Whole cycles of a closed loop in one move: the engine's state repeats, so its future does.

A closed loop of ``C`` clients settles, after a warm-up of about one round of requests, into a
periodic schedule: every client's request is prefilled, decodes and finishes at the same
point of every cycle, and its successor takes its place. The engine loop is deterministic in
its state (the pending prefill segments with their progress, the decode groups with the
tokens they have left, the waiting requests, and how many runs ago each of them arrived or got
its first token), so once the state at the top of an iteration equals the state ``P`` runs
earlier, the next runs are those ``P`` runs again, with every run index shifted by ``P`` --
for as long as every finish is still re-submitted in full.

:class:`CycleFinder` watches for that repeat (a cheap signature every iteration, the full
state only when the signature matches, one snapshot per round of requests) and, when it sees
it, the engine appends the cycle's runs and records ``k`` more times, shifted, for the largest
``k`` the submissions left allow (:meth:`~app.core.engine.loop.Engine.skip_cycles`); the drain
at the end is simulated step by step. The result is exactly the plan the loop would have
produced (a property test compares them), at the cost of about two rounds instead of
``requests_per_client`` rounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class CyclicEngine(Protocol):
    """What the finder reads of the engine loop (:class:`~app.core.engine.loop.Engine`)."""

    done: int

    def cycle_signature(self) -> tuple[int, ...]: ...

    def cycle_state_is(self, state: tuple[object, ...]) -> bool: ...

    def cycle_state(self) -> tuple[object, ...]: ...

    def cycle_mark(self) -> tuple[int, ...]: ...

    def skip_cycles(self, mark: tuple[int, ...]) -> bool: ...


@dataclass(slots=True)
class _Snapshot:
    signature: tuple[int, ...]
    state: tuple[object, ...]
    mark: tuple[int, ...]  # the engine's counters then (runs, records, done, submitted)
    done: int


class CycleFinder:
    """Finds the first repeat of the engine's state after the warm-up and skips ahead once.

    ``round_requests``: requests in one round (the clients); a snapshot is taken once that many
    finished, and replaced by a new one after each further round without a repeat.
    """

    __slots__ = ("finished", "round_requests", "skipped", "snapshot")

    def __init__(self, round_requests: int) -> None:
        self.round_requests = max(1, round_requests)
        self.snapshot: _Snapshot | None = None
        self.finished = False  # the state repeated: nothing more to watch
        self.skipped = False  # and the engine skipped cycles then

    def observe(self, engine: CyclicEngine) -> None:
        """Called at the top of every loop iteration."""
        snapshot = self.snapshot
        if snapshot is None:
            if engine.done >= self.round_requests:
                self._take(engine)
            return
        signature = engine.cycle_signature()
        if signature == snapshot.signature and engine.cycle_state_is(snapshot.state):
            self.skipped = engine.skip_cycles(snapshot.mark)
            self.finished = True
            return
        if engine.done >= snapshot.done + self.round_requests:
            self._take(engine)  # no repeat within a round: watch from here

    def _take(self, engine: CyclicEngine) -> None:
        self.snapshot = _Snapshot(
            engine.cycle_signature(), engine.cycle_state(), engine.cycle_mark(), engine.done
        )
