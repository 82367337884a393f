"""Measurement windows of a serving run.

- ``benchmark``: every one of the ``num_requests`` requests counts, from ``t = 0`` to the last
  completion, as serving benchmarks report their means (the first wave, where all clients start
  together, is part of the mean);
- ``steady_state``: discards the warm-up (until the first ``C`` requests completed) and the
  drain (after the last submission); TTFT is averaged over requests that arrived and got their
  first token inside the window, TPOT over requests that decoded inside it, throughput counts
  the tokens emitted inside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from app.core.errors import InvalidParameterError

if TYPE_CHECKING:
    from app.core.engine.plan import CycleCopies, RequestRecords, StepRun

Window = Literal["benchmark", "steady_state"]
WINDOWS: tuple[Window, ...] = ("benchmark", "steady_state")
#: The window a request gets when it names none: every request counts, as benchmarks report.
DEFAULT_WINDOW: Window = "benchmark"

Records = tuple[tuple[int, int, int], ...]
FinishRecords = tuple[tuple[int, int, int, int], ...]


def check_window(window: object) -> Window:
    if window not in WINDOWS:
        raise InvalidParameterError("window", window, f"one of {', '.join(WINDOWS)}")
    return window


def steady_window(
    records: RequestRecords,
    runs: Sequence[StepRun],
    ends: Sequence[float],
    *,
    clients: int,
    num_requests: int,
) -> tuple[float, float]:
    """From the end of the warm-up (first ``clients`` completions) to the last submission."""
    completed = 0
    start_ms = None
    for run, t_ms in zip(runs, ends, strict=True):
        completed += run.finished
        if completed >= clients:
            start_ms = t_ms
            break
    last = records.last_arrival_run
    end_ms = ends[last] if last >= 0 else 0.0
    if start_ms is None or end_ms <= start_ms:
        raise InvalidParameterError(
            "num_requests",
            num_requests,
            f"large enough that submissions go on after the first {clients} completions "
            "(the steady-state window starts there and ends at the last submission)",
        )
    return start_ms, end_ms


def measured_records(
    records: RequestRecords,
    runs: Sequence[StepRun],
    ends: Sequence[float],
    *,
    window: Window,
    clients: int,
    num_requests: int,
) -> tuple[float, float, Records, FinishRecords, CycleCopies | None]:
    """The window ``(start_ms, end_ms)`` of a serving run (its engine ``runs`` ending at
    ``ends``), the first-token and finish records inside it, and the skipped cycle those
    records still imply (:class:`~app.core.engine.plan.CycleCopies`: the benchmark window takes
    every record, copies included, without expanding them)."""
    if window == "benchmark":
        return 0.0, ends[-1], records.first, records.finish, records.cycle

    def at(run: int) -> float:
        return ends[run] if run >= 0 else 0.0

    start_ms, end_ms = steady_window(
        records, runs, ends, clients=clients, num_requests=num_requests
    )
    first = tuple(r for r in records.all_first() if at(r[1]) >= start_ms and at(r[2]) <= end_ms)
    finish = tuple(r for r in records.all_finish() if at(r[1]) >= start_ms and at(r[2]) <= end_ms)
    if not first or not finish:
        raise InvalidParameterError(
            "num_requests",
            num_requests,
            "large enough that some requests run entirely inside the steady-state window",
        )
    return start_ms, end_ms, first, finish, None
