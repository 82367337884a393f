"""Sweep benchmark: scenarios per second of a mixed simulate/optimize grid (prints figures; not
a pass/fail test).

Qwen3-0.6B and Qwen3-8B on TEST_DEVICE (msmodeling engine, burst and closed-loop workloads): a
simulate grid (prompt length x output length x clients) and an optimize grid (prompt length x
output length x TPOT limit), run

- ``loop``: the service functions called one scenario after another in this process (no sweep
  machinery: the overhead baseline),
- ``sweep 1``: :func:`app.services.sweep.run_sweep` in this process,
- ``sweep N``: the same on a spawn pool of N processes (worker start-up included),
- ``celery N`` (``--workers``): the same tasks stored in a Redis sweep store and queued to a
  real ``chunkwise worker --concurrency N`` on a redis-server this bench starts on loopback
  (the worker started and warmed by a first sweep of 8 simulate and 8 optimize scenarios per
  process before the timed one; from the first message queued to the last row written), with
  the broker's and the store's Redis commands counted (``INFO commandstats``) per scenario, and
  the resident memory of the worker's pool processes (``VmRSS``) read when the timed sweep
  starts and once it is 10 %, 50 %, 90 % and 100 % done.

A first loop warms this process's own caches (catalog, parsed configs) and is reported apart:
spawned workers start cold. Each run gets a fresh service context (an empty latency and
response cache), so no run reads another's answers. ``prepare`` (validate and resolve every
point) is timed on its own.

    PYTHONPATH=$PWD python -m bench.bench_sweep                 # 1 and 2 processes
    PYTHONPATH=$PWD python -m bench.bench_sweep --processes 1 2 4
    PYTHONPATH=$PWD python -m bench.bench_sweep --processes --workers 1 2   # the worker path
    PYTHONPATH=$PWD python -m bench.bench_sweep --hit-rates 18 --workers 1 2  # 9,936 scenarios
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
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


def _loop(tasks: list[sweep.Task]) -> tuple[float, float]:
    """Seconds of the loop over ``tasks`` and this process's CPU seconds in them."""
    context = create_context(_settings())
    started, cpu = time.perf_counter(), time.process_time()
    for task in tasks:
        sweep.evaluate_task(context, task)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    context.close()
    return elapsed, cpu


def _sweep(tasks: list[sweep.Task], processes: int) -> tuple[float, list[dict[str, Any]]]:
    context = create_context(_settings())
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    sweep.run_sweep(context, tasks, processes=processes, done=rows.extend)
    elapsed = time.perf_counter() - started
    context.close()
    return elapsed, rows


#: Seconds between the bench's progress polls, and the Redis commands one poll runs.
POLL_S = 0.05
POLL_COMMANDS = 3


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _redis_commands(client: Any) -> int:
    """Commands the Redis server has run (every kind, ``INFO commandstats``)."""
    stats = client.info("commandstats")
    return sum(int(entry["calls"]) for entry in stats.values())


#: Shares of the timed sweep's rows at which the worker pool's memory is read (0: at its start).
RSS_MARKS = (0.0, 0.1, 0.5, 0.9, 1.0)


def _first(tasks: list[sweep.Task], operation: str, processes: int) -> list[sweep.Task]:
    """The first tasks of ``operation``, ``BATCHES_PER_PROCESS`` per pool process (to warm)."""
    count = processes * sweep.BATCHES_PER_PROCESS
    return [task for task in tasks if task.operation == operation][:count]


def _status_field(pid: int, name: str) -> str | None:
    """A field of ``/proc/<pid>/status`` (None once the process is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(f"{name}:"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def _children(parent: int) -> list[int]:
    """The processes whose parent is ``parent`` (a worker's prefork pool), from /proc."""
    return [
        int(entry)
        for entry in os.listdir("/proc")
        if entry.isdigit() and _status_field(int(entry), "PPid") == str(parent)
    ]


def _pool_rss_mb(parent: int) -> list[float]:
    """Resident memory (MB) of each process of a worker's prefork pool."""
    sizes: list[float] = []
    for pid in _children(parent):
        rss = _status_field(pid, "VmRSS")  # "123456 kB"
        if rss is not None:
            sizes.append(int(rss.split()[0]) / 1024)
    return sorted(sizes)


def _cpu_s(pids: list[int]) -> float:
    """User plus system CPU seconds of the processes (``/proc/<pid>/stat``; one gone counts 0)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (clock ticks)
    return total / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class WorkerRun:
    """A timed sweep on a real worker: seconds from the first message queued to the last row,
    the rows, the Redis commands it cost, the pool processes' resident memory at each of
    :data:`RSS_MARKS`, and the CPU seconds each party spent in it (``pool``: the pool
    processes, ``main``: the worker's main process taking the messages, ``redis``: the
    redis-server of the broker and the store)."""

    elapsed_s: float
    rows: list[dict[str, Any]]
    commands: int
    memory: list[tuple[float, list[float]]]
    cpu_s: dict[str, float]


def _celery(tasks: list[sweep.Task], processes: int) -> WorkerRun:
    """The tasks on a real worker of ``processes`` pool processes."""
    import redis

    from app.services.sweep_jobs import queued_batches
    from app.services.sweep_queue import enqueue
    from app.services.sweep_store import RedisSweepStore, SweepMeta, new_sweep_id

    server = shutil.which("redis-server") or "/usr/bin/redis-server"
    port = _free_port()
    url = f"redis://127.0.0.1:{port}/0"
    workdir = tempfile.mkdtemp(prefix="chunkwise-bench-")
    redis_process = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    env = {k: v for k, v in os.environ.items() if not k.startswith("APP_")}
    env.update(APP_CACHE_BACKEND="memory", APP_BROKER_URL=url, APP_LOG_LEVEL="warning")
    worker = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "worker", "--concurrency", str(processes),
         "--loglevel", "WARNING"],
        env=env,
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    settings = Settings(cache_backend="memory", broker_url=url)
    store = RedisSweepStore(url, ttl_s=3600)

    memory: list[tuple[float, list[float]]] = []

    def run(batch: list[sweep.Task]) -> tuple[float, str, int]:
        """Seconds to the last row, the sweep id, and this bench's own polls; the pool's
        memory appended to ``memory`` at each mark."""
        meta = SweepMeta(
            id=new_sweep_id(), owner=None, total=len(batch), created_s=time.time(), columns=()
        )
        store.create(meta, batch, None)
        marks = list(RSS_MARKS)
        started = time.perf_counter()
        enqueue(settings, meta.id, queued_batches([task.scenario_key for task in batch]))
        polls = 1
        while True:
            progress = store.progress(meta.id, None)
            while marks and progress.done >= marks[0] * len(batch):
                memory.append((marks.pop(0), _pool_rss_mb(worker.pid)))
            if progress.state == "done":
                break
            time.sleep(POLL_S)
            polls += 1
        return time.perf_counter() - started, meta.id, polls

    try:
        # the pool processes warmed by both operations (imports, catalogs, compiled plans)
        run([task for op in ("simulate", "optimize") for task in _first(tasks, op, processes)])
        memory.clear()
        parties = {
            "pool": _children(worker.pid),
            "main": [worker.pid],
            "redis": [redis_process.pid],
        }
        cpu = {party: _cpu_s(pids) for party, pids in parties.items()}
        before = _redis_commands(client)
        elapsed, sweep_id, polls = run(tasks)
        cpu = {party: _cpu_s(pids) - cpu[party] for party, pids in parties.items()}
        # What a sweep costs the Redis: storing it (as the API does: two commands per 1,000
        # scenarios and six), the messages (queued, taken, acknowledged) and the worker's
        # reads and writes; the bench's own progress polls (HGETALL, HLEN, SCARD) left out.
        commands = _redis_commands(client) - before - POLL_COMMANDS * polls
        rows = list(store.iter_rows(sweep_id))
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=30)
        store.close()
        redis_process.terminate()
        redis_process.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)
    return WorkerRun(elapsed, rows, commands, memory, cpu)


def _per_scenario(cpu_s: float, count: int) -> str:
    """CPU per scenario, and the machine's load: on a shared machine both move, the wall time
    most (docs/sweeps.md, "Why one run read 19 %")."""
    return f"CPU {cpu_s / count * 1e3:.3f} ms per scenario (load {os.getloadavg()[0]:.1f})"


def _scaled(spec: dict[str, Any], axis: dict[str, list[float]]) -> dict[str, Any]:
    """``spec`` with one more grid axis."""
    return {**spec, "grid": {**spec["grid"], **axis}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, nargs="*", default=[1, 2])
    parser.add_argument(
        "--workers", type=int, nargs="*", default=[], help="pool processes of a chunkwise worker"
    )
    parser.add_argument(
        "--hit-rates",
        type=int,
        default=1,
        help="a prefix-cache hit-rate axis of this many values (0, 0.05, ...) over both grids: "
        "18 gives the issue's 10,000-scenario sweep (9,936)",
    )
    args = parser.parse_args()
    if not 1 <= args.hit_rates <= 19:
        parser.error("--hit-rates: 1 to 19 values (hit rates up to 0.9)")
    rates = {"prefix_cache_hit_rate": [round(i * 0.05, 2) for i in range(args.hit_rates)]}
    points = expand_grid(_scaled(SIMULATE, rates)) + expand_grid(_scaled(OPTIMIZE, rates))
    context = create_context(_settings())
    started = time.perf_counter()
    tasks = sweep.prepare(context, points)
    prepared = time.perf_counter() - started
    context.close()
    count = len(tasks)
    kinds = {op: sum(1 for t in tasks if t.operation == op) for op in ("simulate", "optimize")}
    print(f"scenarios: {count} ({kinds['simulate']} simulate, {kinds['optimize']} optimize)")
    print(f"prepare (validate + resolve): {prepared:.2f} s, {count / prepared:.0f} scenarios/s")
    # the process's own caches (model configs, compiled plans) warmed
    warm, warm_cpu = _loop(tasks)
    print(
        f"loop, first pass (cold process): {warm:.2f} s, {count / warm:.1f} scenarios/s; "
        f"{_per_scenario(warm_cpu, count)}"
    )
    loop, loop_cpu = _loop(tasks)
    print(
        f"loop (service calls in-process): {loop:.2f} s, {count / loop:.1f} scenarios/s; "
        f"{_per_scenario(loop_cpu, count)}"
    )
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
    for processes in args.workers:
        run = _celery(tasks, processes)
        rows = sorted(run.rows, key=lambda row: row["scenario_key"])
        same = reference is None or rows == reference
        reference = reference or rows
        print(
            f"celery worker, {processes} process(es): {run.elapsed_s:.2f} s, "
            f"{count / run.elapsed_s:.1f} scenarios/s ({run.elapsed_s / loop:.2f}x the loop; "
            f"rows {'identical' if same else 'DIFFER'}; {run.commands / count:.2f} Redis "
            "commands per scenario)"
        )
        cpu = run.cpu_s
        print(
            f"  CPU ms per scenario: pool {cpu['pool'] / count * 1e3:.3f}, worker main "
            f"{cpu['main'] / count * 1e3:.3f}, redis-server {cpu['redis'] / count * 1e3:.3f}: "
            f"{sum(cpu.values()) / loop_cpu:.2f}x the loop's CPU (load {os.getloadavg()[0]:.1f})"
        )
        for share, sizes in run.memory:
            shown = ", ".join(f"{size:.1f}" for size in sizes)
            print(f"  pool RSS at {share:4.0%} of the sweep: {shown} MB (one per process)")


if __name__ == "__main__":
    main()
