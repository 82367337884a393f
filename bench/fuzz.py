"""Schemathesis at scale (issue 15): every operation of ``/openapi.json``, with catalog names
that exist so generated bodies reach the engine, ``--examples`` cases per operation and test;
counts the cases and their statuses and fails on any 500 (the same tests CI runs at 50).

    python -m bench.fuzz [--examples 700] [--engine-only]

``--engine-only`` runs only the pass whose bodies carry names that exist (schema-valid, repaired
for the cross-field rules) and counts the cases that reached the engine (answered 200, or 504
when the computation ran into the deadline).
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=700)
    parser.add_argument("--engine-only", action="store_true")
    args = parser.parse_args(argv)
    log = Path(tempfile.mkdtemp(prefix="chunkwise-fuzz-")) / "cases.log"
    env = {
        **os.environ,
        "CHUNKWISE_FUZZ_EXAMPLES": str(args.examples),
        "CHUNKWISE_FUZZ_LOG": str(log),
    }
    started = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/api/test_fuzz.py", "-q", "-p", "no:cacheprovider",
         "--no-cov", "-x", "--timeout", "0",  # one operation's examples take longer than
         # the suite's per-test timeout at this scale
         *(["-k", "valid_names"] if args.engine_only else [])],
        env=env,
        check=False,
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    statuses = collections.Counter(line.rsplit(" ", 1)[1] for line in lines)
    operations = collections.Counter(line.rsplit(" ", 1)[0] for line in lines)
    print(f"{len(lines)} cases over {len(operations)} operations in {elapsed:.0f} s")
    print("statuses: " + ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items())))
    print(f"reached the engine (200 or 504): {statuses['200'] + statuses['504']}")
    for operation, count in sorted(operations.items()):
        print(f"  {operation}: {count}")
    return run.returncode or int(
        any(s.startswith("5") and s not in ("503", "504") for s in statuses)
    )


if __name__ == "__main__":
    raise SystemExit(main())
