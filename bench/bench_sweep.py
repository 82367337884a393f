"""Sweep benchmark: scenarios per second of a mixed simulate/optimize grid (prints figures; not
a pass/fail test).

Qwen3-0.6B and Qwen3-8B on TEST_DEVICE (msmodeling engine, burst and closed-loop workloads): a
simulate grid (prompt length x output length x clients) and an optimize grid (prompt length x
output length x TPOT limit), run

- ``loop``: the service functions called one scenario after another in this process (no sweep
  machinery: the overhead baseline),
- ``sweep 1``: :func:`app.services.sweep.run_sweep` in this process,
- ``sweep N``: the same on a spawn pool of N processes (worker start-up included).

A first loop warms this process's own caches (catalog, parsed configs) and is reported apart:
spawned workers start cold. Each run gets a fresh service context (an empty latency and
response cache), so no run reads another's answers. ``prepare`` (validate and resolve every
point) is timed on its own.

    PYTHONPATH=$PWD python -m bench.bench_sweep                 # 1 and 2 processes
    PYTHONPATH=$PWD python -m bench.bench_sweep --processes 1 2 4
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from app.core.sweep import expand_grid
from app.services import sweep
from app.services.context import create_context
from app.settings import Settings

BASE = {
    "engine": "msmodeling",
    "model": "Qwen/Qwen3-0.6B",
    "device": "TEST_DEVICE",
    "input_length": 256,
    "output_length": 32,
}
SIMULATE = {
    "operation": "simulate",
    "base": {**BASE, "concurrency": 1},
    "grid": {
        "input_length": [128, 256, 512, 1024, 2048, 4096],
        "output_length": [16, 64, 256],
        "concurrency": [1, 4, 16, 64, 256],
        "workload": ["burst", "closed_loop"],
        "model": ["Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B"],
    },
}
OPTIMIZE = {
    "operation": "optimize",
    "base": {**BASE, "num_devices": 1},
    "grid": {
        "input_length": [128, 256, 512, 1024, 2048, 4096],
        "output_length": [64, 256],
        "tpot_limit_ms": [10, 20, 50, 100],
        "workload": ["burst", "closed_loop"],
        "model": ["Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B"],
    },
}


def _settings() -> Settings:
    return Settings(cache_backend="memory")


def _loop(tasks: list[sweep.Task]) -> float:
    context = create_context(_settings())
    started = time.perf_counter()
    for task in tasks:
        sweep.evaluate_task(context, task)
    context.close()
    return time.perf_counter() - started


def _sweep(tasks: list[sweep.Task], processes: int) -> tuple[float, list[dict[str, Any]]]:
    context = create_context(_settings())
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    sweep.run_sweep(context, tasks, processes=processes, done=rows.extend)
    elapsed = time.perf_counter() - started
    context.close()
    return elapsed, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    points = expand_grid(SIMULATE) + expand_grid(OPTIMIZE)
    context = create_context(_settings())
    started = time.perf_counter()
    tasks = sweep.prepare(context, points)
    prepared = time.perf_counter() - started
    context.close()
    count = len(tasks)
    kinds = {op: sum(1 for t in tasks if t.operation == op) for op in ("simulate", "optimize")}
    print(f"scenarios: {count} ({kinds['simulate']} simulate, {kinds['optimize']} optimize)")
    print(f"prepare (validate + resolve): {prepared:.2f} s, {count / prepared:.0f} scenarios/s")
    warm = _loop(tasks)  # the process's own caches (model configs, compiled plans) warmed
    print(f"loop, first pass (cold process): {warm:.2f} s, {count / warm:.1f} scenarios/s")
    loop = _loop(tasks)
    print(f"loop (service calls in-process): {loop:.2f} s, {count / loop:.1f} scenarios/s")
    reference: list[dict[str, Any]] | None = None
    for processes in args.processes:
        elapsed, rows = _sweep(tasks, processes)
        rows.sort(key=lambda row: row["scenario_key"])
        same = reference is None or rows == reference
        reference = reference or rows
        errors = sum(1 for row in rows if row["error"])
        print(
            f"sweep, {processes} process(es): {elapsed:.2f} s, {count / elapsed:.1f} scenarios/s "
            f"({elapsed / loop:.2f}x the loop; rows {'identical' if same else 'DIFFER'}, "
            f"{errors} errors)"
        )


if __name__ == "__main__":
    main()
