"""The round-robin decode queue of one engine instance, held as request groups.

Decode requests are served from the front of the queue; served requests that still have tokens
to emit re-queue at the back. Requests that emitted their first token in the same step form a
group and stay together until the queue splits them. Three ways to advance the queue, each
exact (a property test compares them with a per-request loop):

- every request advances (``advance_all``): O(finishing groups), via a lazy heap and a shift;
- the front ``d`` requests advance (``take`` + ``requeue``): O(groups touched);
- a stretch of identical round-robin steps with nobody joining (``rotate``): O(G log G) for the
  whole stretch, from each request's position in the sweep order.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from collections.abc import Callable

#: A finished part of a group: (requests, run index of their first token, decode tokens each
#: emitted after its first token).
Finished = tuple[int, int, int]


class DecodeGroup:
    """Requests of one output length that emitted their first token together (run
    ``first_run``) and emit ``tokens`` more in all.

    Effective remaining tokens = ``rem_base - shift`` where the queue's ``shift`` counts the
    steps in which every decode request advanced.
    """

    __slots__ = ("alive", "count", "first_run", "rem_base", "tokens")

    def __init__(self, count: int, rem_base: int, first_run: int, tokens: int) -> None:
        self.count = count
        self.rem_base = rem_base
        self.first_run = first_run
        self.tokens = tokens
        self.alive = True

    def split(self, count: int, rem_base: int) -> DecodeGroup:
        """``count`` of these requests with ``rem_base``, as a group of their own."""
        return DecodeGroup(count, rem_base, self.first_run, self.tokens)


class _Fenwick:
    """Prefix sums over ranks."""

    __slots__ = ("tree",)

    def __init__(self, size: int) -> None:
        self.tree = [0] * (size + 1)

    def add(self, index: int, value: int) -> None:
        index += 1
        while index < len(self.tree):
            self.tree[index] += value
            index += index & -index

    def prefix(self, index: int) -> int:
        """Sum over ranks ``< index``."""
        total = 0
        while index > 0:
            total += self.tree[index]
            index -= index & -index
        return total


class DecodeQueue:
    """Groups in queue order plus the bookkeeping that makes advancing them cheap."""

    def __init__(self) -> None:
        self.groups: deque[DecodeGroup] = deque()
        self.heap: list[tuple[int, int, DecodeGroup]] = []
        self.heap_fresh = True
        self.tiebreak = 0
        self.shift = 0
        self.ready = 0
        self.finished_in_queue = 0  # finished groups advance_all left in ``groups``
        # Over live groups: sum of count x rem_base and of count x first_run (a closed loop's
        # cycle signature, :mod:`app.core.engine.cycles`).
        self.rem_moment = 0
        self.first_moment = 0

    def _moments(self) -> None:
        live = self._live()
        self.rem_moment = sum(g.count * g.rem_base for g in live)
        self.first_moment = sum(g.count * g.first_run for g in live)

    def _leave(self, group: DecodeGroup) -> None:
        """``group`` finished."""
        group.alive = False
        self.ready -= group.count
        self.rem_moment -= group.count * group.rem_base
        self.first_moment -= group.count * group.first_run

    def shift_first_runs(self, runs: int) -> None:
        """Every live group got its first token ``runs`` runs later (a skip of cycles)."""
        for group in self._live():
            group.first_run += runs
        self._moments()

    def _live(self) -> list[DecodeGroup]:
        return [g for g in self.groups if g.alive]

    def min_remaining(self) -> int:
        """Fewest tokens any live group still has to emit (-1 when the queue is empty)."""
        if not self.heap_fresh:
            self.heap = [(g.rem_base, i, g) for i, g in enumerate(self._live())]
            heapq.heapify(self.heap)
            self.tiebreak = len(self.heap)
            self.heap_fresh = True
        heap = self.heap
        while heap:
            rem_base, _, group = heap[0]
            if group.alive and group.rem_base == rem_base:
                return rem_base - self.shift
            heapq.heappop(heap)
        return -1

    def promote(
        self, count: int, remaining: int, first_run: int, *, front: bool, tokens: int | None = None
    ) -> None:
        """``count`` requests join with ``remaining`` tokens to emit (before any shift to come),
        of ``tokens`` decode tokens in all (``remaining`` when not given)."""
        total = remaining if tokens is None else tokens
        group = DecodeGroup(count, remaining + self.shift, first_run, total)
        if front:
            self.groups.appendleft(group)
        else:
            self.groups.append(group)
        if self.heap_fresh:
            self.tiebreak += 1
            heapq.heappush(self.heap, (group.rem_base, self.tiebreak, group))
        self.ready += count
        self.rem_moment += count * group.rem_base
        self.first_moment += count * first_run

    def advance_all(self, steps: int) -> list[Finished]:
        """Every request emits ``steps`` tokens; returns who finished (at the last step)."""
        self.shift += steps
        finished: list[Finished] = []
        while self.min_remaining() == 0:
            _, _, group = heapq.heappop(self.heap)
            self._leave(group)
            finished.append((group.count, group.first_run, group.tokens))
        self.finished_in_queue += len(finished)
        if self.finished_in_queue > len(self.groups) // 2:
            # Finished groups are skipped wherever the queue is read: forget them once they
            # are half of it (the live groups keep their order).
            self.groups = deque(self._live())
            self.finished_in_queue = 0
        return finished

    def take(self, d_step: int) -> list[DecodeGroup]:
        """Pop the front ``d_step`` requests, each having emitted one token."""
        selected = []
        need = d_step
        while need:
            group = self.groups.popleft()
            if not group.alive:
                continue
            if group.count > need:
                group.count -= need
                self.groups.appendleft(group)
                group = group.split(need, group.rem_base)
            need -= group.count
            group.rem_base -= 1
            self.rem_moment -= group.count
            selected.append(group)
        self.heap_fresh = False
        return selected

    def requeue(self, selected: list[DecodeGroup]) -> list[Finished]:
        """Finished requests leave, the others go to the back; returns who finished."""
        finished: list[Finished] = []
        for group in selected:
            if group.rem_base == self.shift:
                self._leave(group)
                finished.append((group.count, group.first_run, group.tokens))
            else:
                self.groups.append(group)
        return finished

    def rotate(
        self,
        d_step: int,
        on_finish: Callable[[int, list[Finished], int], bool],
        max_steps: int | None = None,
    ) -> list[tuple[int, list[Finished]]]:
        """Round-robin steps of ``d_step < ready`` requests while nobody joins the queue.

        Requests are served in sweeps over the queue order; a request with ``m`` tokens left
        finishes in its ``m``-th sweep, so its final slot is
        ``sum_y min(m_y, m - 1) + #{y up to it in queue order with m_y >= m}`` and its final
        step ``ceil(slot / d_step)``. After each step with finishes, ``on_finish(ready, who,
        steps so far)`` is told and says whether the stretch goes on (the decision is
        unchanged). The stretch ends after ``max_steps`` steps at the latest (a request arriving
        then). Returns the runs as ``(repeat, finished at the run's end)`` and leaves the queue
        as it is then.
        """
        live = self._live()
        rem = [g.rem_base - self.shift for g in live]
        sweeps = _Sweeps(live, rem)
        events = sweeps.finish_events(live, rem, d_step)
        runs: list[tuple[int, list[Finished]]] = []
        previous = 0
        ready = self.ready
        for step in sorted(events):
            if max_steps is not None and step > max_steps:
                if max_steps > previous:  # cut short: nobody finishes in the last run
                    runs.append((max_steps - previous, []))
                    previous = max_steps
                break
            finished = events[step]
            runs.append((step - previous, finished))
            previous = step
            ready -= sum(part[0] for part in finished)
            self.ready = ready  # admission inside ``on_finish`` counts the running requests
            keep_going = on_finish(ready, finished, step)
            if ready == 0 or not keep_going:
                break
        self.groups = deque(self._after_sweeps(live, rem, sweeps, previous * d_step))
        self.finished_in_queue = 0
        self._moments()
        self.ready = ready
        self.heap_fresh = False
        return runs

    def _after_sweeps(
        self, live: list[DecodeGroup], rem: list[int], sweeps: _Sweeps, served_slots: int
    ) -> list[DecodeGroup]:
        """The queue after ``served_slots`` slots: sweep k* is under way with ``offset`` of its
        members served; unserved members come first, then the served survivors."""
        sweep = sweeps.sweep_at(served_slots)
        offset = served_slots - sweeps.slots_before_sweep(sweep)
        unserved: list[DecodeGroup] = []
        served: list[DecodeGroup] = []
        position = 0
        for g, m in zip(live, rem, strict=True):
            g.alive = False
            if m < sweep:
                continue  # finished in an earlier sweep
            in_sweep = max(0, min(g.count, offset - position))
            position += g.count
            if g.count - in_sweep:
                left = m - (sweep - 1)
                unserved.append(g.split(g.count - in_sweep, left + self.shift))
            if in_sweep and m > sweep:
                served.append(g.split(in_sweep, m - sweep + self.shift))
        return unserved + served


class _Sweeps:
    """The sweeps of a round-robin stretch over live groups with ``rem`` tokens left each:
    a request with ``m`` tokens left is served once per sweep and finishes in sweep ``m``."""

    __slots__ = ("below_count", "below_sum", "rank", "total", "values")

    def __init__(self, live: list[DecodeGroup], rem: list[int]) -> None:
        values = sorted(set(rem))
        rank = {v: i for i, v in enumerate(values)}
        count_at = [0] * len(values)
        for g, m in zip(live, rem, strict=True):
            count_at[rank[m]] += g.count
        below_sum = [0] * (len(values) + 1)
        below_count = [0] * (len(values) + 1)
        for i, v in enumerate(values):
            below_sum[i + 1] = below_sum[i] + v * count_at[i]
            below_count[i + 1] = below_count[i] + count_at[i]
        self.values = values
        self.rank = rank
        self.below_sum = below_sum
        self.below_count = below_count
        self.total = below_count[-1]

    def slots_before_sweep(self, k: int) -> int:
        """Slots served before sweep ``k``: sum_y min(m_y, k - 1)."""
        i = bisect.bisect_left(self.values, k)
        return self.below_sum[i] + (k - 1) * (self.total - self.below_count[i])

    def sweep_at(self, served_slots: int) -> int:
        """The largest ``k`` with ``slots_before_sweep(k) <= served_slots``."""
        lo_k, hi_k = 1, self.values[-1]
        while lo_k < hi_k:
            mid = (lo_k + hi_k + 1) // 2
            if self.slots_before_sweep(mid) <= served_slots:
                lo_k = mid
            else:
                hi_k = mid - 1
        return lo_k

    def finish_events(
        self, live: list[DecodeGroup], rem: list[int], d_step: int
    ) -> dict[int, list[Finished]]:
        """Who finishes at which step (1-based) of ``d_step`` requests each."""
        events: dict[int, list[Finished]] = {}
        values = self.values
        seen = _Fenwick(len(values))
        for g, m in zip(live, rem, strict=True):
            r = self.rank[m]
            before = seen.prefix(len(values)) - seen.prefix(r)  # earlier, with m_y >= m
            seen.add(r, g.count)
            first = self.slots_before_sweep(m) + before + 1
            last = first + g.count - 1
            step = -(-first // d_step)
            while (step - 1) * d_step < last:
                lo = max(first, (step - 1) * d_step + 1)
                hi = min(last, step * d_step)
                events.setdefault(step, []).append((hi - lo + 1, g.first_run, g.tokens))
                step += 1
        return events
