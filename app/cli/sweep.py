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
        self.show(self.done + count)

    def show(self, done: int) -> None:
        """Report ``done`` scenarios (a line per 10 % off a terminal)."""
        self.done = done
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
    if args.remote:
        return _remote(args, out)
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


#: Seconds between two progress polls of a remote sweep.
POLL_INTERVAL_S = 1.0
#: The environment variable holding the bearer token of a remote service (APP_API_KEYS there).
API_KEY_ENV = "CHUNKWISE_API_KEY"


def _problem(response: Any) -> str:
    """A failed answer's one-line reason (its problem+json detail when it has one)."""
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = None
    return f"{response.status_code} {detail or response.reason_phrase}"


def idempotency_key(body: Any) -> str:
    """The Idempotency-Key of a remote sweep: the digest of its spec (the same spec submitted
    again follows the sweep it created)."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _remote(args: argparse.Namespace, out: Any) -> int:
    """Submit the spec to ``--remote`` (POST /v1/sweeps, the spec's digest as Idempotency-Key:
    running the command again follows the same sweep), poll its progress, write its rows."""
    import os
    from pathlib import Path

    import httpx

    from app.core.errors import ChunkwiseError
    from app.services import sweep

    try:
        sweep.check_out(out)
        spec = sweep.load_spec(Path(args.spec))
    except ChunkwiseError as err:
        return fail(err)
    body = {"csv": spec} if isinstance(spec, str) else spec
    headers = {"Idempotency-Key": idempotency_key(body)}
    token = os.environ.get(API_KEY_ENV)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    base = args.remote.rstrip("/")
    try:
        with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
            created = client.post("/v1/sweeps", json=body)
            if created.status_code != 202:
                return fail(f"{base}: POST /v1/sweeps: {_problem(created)}")
            status = created.json()
            location = created.headers.get("location", f"/v1/sweeps/{status['id']}")
            print(
                f"chunkwise: sweep {status['id']} at {base}: {status['total']} scenarios",
                file=sys.stderr,
            )
            progress = Progress(status["total"], sys.stderr, terminal=sys.stderr.isatty())
            while status["state"] == "running":
                progress.show(status["done"])
                time.sleep(POLL_INTERVAL_S)
                answer = client.get(location)
                if answer.status_code != 200:
                    return fail(f"{base}: GET {location}: {_problem(answer)}")
                status = answer.json()
            progress.show(status["done"])
            suffix = out.suffix.lower().lstrip(".")
            rows = client.get(f"{location}/results", params={"format": suffix})
            if rows.status_code != 200:
                return fail(f"{base}: GET {location}/results: {_problem(rows)}")
    except httpx.HTTPError as err:
        return fail(f"{base}: {err}")
    partial = out.with_name(out.name + ".partial")
    partial.write_bytes(rows.content)
    partial.replace(out)
    print(
        f"chunkwise: sweep {status['state']}: {status['done']} rows "
        f"({status['failed']} with an error) written to {out}",
        file=sys.stderr,
    )
    return 0 if status["state"] == "done" else 1
