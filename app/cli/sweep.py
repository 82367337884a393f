"""``chunkwise sweep SPEC --out FILE``: a spec's scenarios run locally (a thin adapter over
:mod:`app.services.sweep`), resumable from OUT."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from app.cli.commands import fail, run_service

if TYPE_CHECKING:
    from app.services.context import ServiceContext

#: A non-terminal stderr gets a line per this fraction of the scenarios.
PROGRESS_STEP = 0.1


class Progress:
    """Scenarios done, rate and ETA: one rewritten line on a terminal, else a line per 10 %."""

    def __init__(self, total: int, stream: TextIO, *, terminal: bool) -> None:
        self.total, self.stream, self.terminal = total, stream, terminal
        self.done = 0
        self.started = time.monotonic()
        self.next_step = PROGRESS_STEP

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.done / elapsed
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        eta = "?" if left == float("inf") else f"{left:.0f} s"
        return f"chunkwise: sweep {self.done}/{self.total} scenarios, {rate:.2f}/s, ETA {eta}"

    def add(self, count: int) -> None:
        self.done += count
        if self.terminal:
            end = "\n" if self.done >= self.total else ""
            print(f"\r{self.line()}", end=end, file=self.stream, flush=True)
            return
        fraction = self.done / self.total if self.total else 1.0
        if fraction >= self.next_step - 1e-9:
            print(self.line(), file=self.stream, flush=True)
            while self.next_step <= fraction + 1e-9:
                self.next_step += PROGRESS_STEP


def cmd_sweep(args: argparse.Namespace) -> int:
    from pathlib import Path

    from app.core.errors import ChunkwiseError
    from app.services import sweep

    if args.processes < 1:
        return fail(f"--processes {args.processes}: at least 1")
    out = Path(args.out)
    try:
        sweep.check_out(out)
        points = sweep.load_points(Path(args.spec))
        rows: list[dict[str, Any]] = sweep.read_rows(out)
    except ChunkwiseError as err:
        return fail(err)

    def call(context: ServiceContext) -> int:
        tasks = sweep.prepare(context, points)
        written = {str(row.get("scenario_key")) for row in rows}
        todo = [task for task in tasks if task.scenario_key not in written]
        names = sweep.columns(tasks, rows)
        skipped = len(tasks) - len(todo)
        print(
            f"chunkwise: sweep {len(points)} points, {len(tasks)} scenarios, "
            f"{skipped} already in {out.name}, {len(todo)} to run",
            file=sys.stderr,
        )
        progress = Progress(len(todo), sys.stderr, terminal=sys.stderr.isatty())

        def done(batch: list[dict[str, Any]]) -> None:
            rows.extend(batch)
            sweep.write_rows(out, names, rows)
            progress.add(len(batch))

        sweep.run_sweep(context, todo, processes=args.processes, done=done)
        if not todo:
            sweep.write_rows(out, names, rows)
        failed = sum(1 for row in rows if row.get("error"))
        print(
            f"chunkwise: sweep wrote {len(rows)} rows ({failed} with an error) to {out}",
            file=sys.stderr,
        )
        return 0

    return run_service(call)
