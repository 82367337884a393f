"""HTTP benchmark of the issue-4 performance targets (prints figures; not a pass/fail test).

Starts a real ``redis-server`` on a free loopback port and ``uvicorn`` with N workers sharing
it (``APP_CACHE_BACKEND=redis``; the whole-response cache is OFF so "warm" means every forward is
a latency-cache hit, not a replayed response), then measures:

1. cold ``POST /v1/optimize`` (Redis flushed before each run) -- target < 1.5 s;
2. warm ``POST /v1/optimize`` p50 -- target < 50 ms;
   Qwen3-32B, 8 x ATLAS_800_A2_376T_64G, 3500/1500 tokens, TPOT <= 50 ms, TP 1/2/4/8;
3. warm ``POST /v1/simulate`` throughput with closed-loop clients -- target >= 200 req/s with
   two workers on a 2-core machine (the load generator runs on the same machine).

    python bench/bench_api.py                       # defaults: 2 workers, 10 s of load
    python bench/bench_api.py --json bench/out/api.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

OPTIMIZE: dict[str, Any] = {
    "model": "Qwen/Qwen3-32B",
    "device": "ATLAS_800_A2_376T_64G",
    "num_devices": 8,
    "input_length": 3500,
    "output_length": 1500,
    "max_batched_tokens": 8192,
    "tpot_limit_ms": 50,
    "tp_sizes": [1, 2, 4, 8],
}
#: Informational: the same search with a 2048-token budget (two chunks: time simulation).
OPTIMIZE_CHUNKED: dict[str, Any] = {**OPTIMIZE, "max_batched_tokens": 2048}
SIMULATE: dict[str, Any] = {
    "model": "Qwen/Qwen3-32B",
    "device": "ATLAS_800_A2_376T_64G",
    "input_length": 3500,
    "output_length": 1500,
    "max_batched_tokens": 2048,  # two chunks: the time simulation, not the closed form
    "concurrency": 128,  # in total: 64 requests on each of the two replicas
    "tp_size": 4,
    "dp_size": 2,
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def request(
    conn: http.client.HTTPConnection, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[int, bytes]:
    payload = json.dumps(body).encode() if body is not None else None
    headers = {"content-type": "application/json"} if payload is not None else {}
    conn.request(method, path, body=payload, headers=headers)
    response = conn.getresponse()
    return response.status, response.read()


def redis_cmd(port: int, *args: str) -> bytes:
    """One RESP command over a raw socket (keeps the benchmark free of client libraries)."""
    parts = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(b"".join(parts))
        return sock.recv(1024)


@contextmanager
def redis_server(binary: str) -> Iterator[int]:
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="chunkwise-bench-redis-")
    proc = subprocess.Popen(
        [
            binary,
            *("--bind", "127.0.0.1", "--port", str(port)),
            *("--save", "", "--appendonly", "no", "--dir", workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: redis_cmd(port, "PING").startswith(b"+PONG"), 10, "redis-server")
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


@contextmanager
def api_server(workers: int, redis_port: int) -> Iterator[int]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("APP_")}
    env.update(
        APP_CACHE_BACKEND="redis",
        APP_REDIS_URL=f"redis://127.0.0.1:{redis_port}/0",
        APP_RESPONSE_CACHE="false",
        APP_LOG_LEVEL="warning",
        PYTHONPATH=str(ROOT),
    )
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app"),
            *("--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)),
            *("--log-level", "warning", "--no-access-log"),
        ],
        env=env,
        start_new_session=True,
    )

    def ready() -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            return request(conn, "GET", "/readyz")[0] == 200
        finally:
            conn.close()

    try:
        wait_for(ready, 60, "uvicorn")
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def timed_post(port: int, path: str, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        start = time.perf_counter()
        status, raw = request(conn, "POST", path, body)
        elapsed_ms = (time.perf_counter() - start) * 1e3
    finally:
        conn.close()
    if status != 200:
        raise SystemExit(f"{path} answered {status}: {raw[:300]!r}")
    return elapsed_ms, json.loads(raw)


def bench_optimize(
    port: int, redis_port: int, cold_runs: int, warm_runs: int, payload: dict[str, Any]
) -> dict[str, Any]:
    cold: list[float] = []
    evaluations = 0
    for _ in range(cold_runs):
        redis_cmd(redis_port, "FLUSHALL")
        elapsed, body = timed_post(port, "/v1/optimize", payload)
        cold.append(elapsed)
        evaluations = body["stats"]["forward_evaluations"]
    timed_post(port, "/v1/optimize", payload)  # make sure every forward is cached
    warm: list[float] = []
    hits = 0
    for _ in range(warm_runs):
        elapsed, body = timed_post(port, "/v1/optimize", payload)
        warm.append(elapsed)
        assert body["stats"]["forward_evaluations"] == 0, body["stats"]
        hits = body["stats"]["cache"]["hits"]
    return {
        "cold_ms": {"min": min(cold), "median": statistics.median(cold), "max": max(cold)},
        "cold_forward_evaluations": evaluations,
        "warm_ms": {
            "p50": percentile(warm, 50),
            "p90": percentile(warm, 90),
            "p99": percentile(warm, 99),
            "max": max(warm),
        },
        "warm_cache_hits_per_request": hits,
        "best": body["best"]["parallel"] if body["best"] else None,
    }


def bench_simulate(port: int, clients: int, duration_s: float) -> dict[str, Any]:
    timed_post(port, "/v1/simulate", SIMULATE)  # warm the latency cache
    latencies: list[float] = []
    errors: list[int] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + duration_s

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        payload = json.dumps(SIMULATE).encode()
        mine: list[float] = []
        bad: list[int] = []
        while time.perf_counter() < stop_at:
            start = time.perf_counter()
            conn.request(
                "POST", "/v1/simulate", body=payload, headers={"content-type": "application/json"}
            )
            response = conn.getresponse()
            response.read()
            mine.append((time.perf_counter() - start) * 1e3)
            if response.status != 200:
                bad.append(response.status)
        conn.close()
        with lock:
            latencies.extend(mine)
            errors.extend(bad)

    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    return {
        "requests": len(latencies),
        "errors": len(errors),
        "requests_per_s": len(latencies) / elapsed,
        "latency_ms": {
            "p50": percentile(latencies, 50),
            "p99": percentile(latencies, 99),
        },
        "clients": clients,
        "duration_s": elapsed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=8, help="closed-loop simulate clients")
    parser.add_argument("--duration", type=float, default=10.0, help="simulate load seconds")
    parser.add_argument("--cold-runs", type=int, default=5)
    parser.add_argument("--warm-runs", type=int, default=50)
    parser.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)

    with (
        redis_server(args.redis_server) as redis_port,
        api_server(args.workers, redis_port) as port,
    ):
        optimize = bench_optimize(port, redis_port, args.cold_runs, args.warm_runs, OPTIMIZE)
        chunked = bench_optimize(port, redis_port, args.cold_runs, args.warm_runs, OPTIMIZE_CHUNKED)
        simulate = bench_simulate(port, args.clients, args.duration)

    figures = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "workers": args.workers,
        "optimize": optimize,
        "optimize_chunked_2048": chunked,
        "simulate": simulate,
    }
    cold, warm = optimize["cold_ms"], optimize["warm_ms"]
    print(f"workers={args.workers} cpus={os.cpu_count()} cache=redis response_cache=off")
    print(
        f"optimize cold: median {cold['median']:.0f} ms (min {cold['min']:.0f}, max "
        f"{cold['max']:.0f}; {optimize['cold_forward_evaluations']} forwards computed)"
        f"  target < 1500 ms: {'OK' if cold['median'] < 1500 else 'MISSED'}"
    )
    print(
        f"optimize warm: p50 {warm['p50']:.1f} ms  p90 {warm['p90']:.1f}  p99 {warm['p99']:.1f}"
        f"  ({optimize['warm_cache_hits_per_request']} cache hits/request)"
        f"  target p50 < 50 ms: {'OK' if warm['p50'] < 50 else 'MISSED'}"
    )
    print(
        f"optimize with max_batched_tokens=2048 (informational): cold median "
        f"{chunked['cold_ms']['median']:.0f} ms ({chunked['cold_forward_evaluations']} forwards), "
        f"warm p50 {chunked['warm_ms']['p50']:.1f} ms"
    )
    print(
        f"simulate warm: {simulate['requests_per_s']:.0f} req/s with {simulate['clients']} "
        f"clients over {simulate['duration_s']:.1f} s, p50 {simulate['latency_ms']['p50']:.1f} ms"
        f" p99 {simulate['latency_ms']['p99']:.1f} ms, {simulate['errors']} errors"
        f"  target >= 200 req/s: {'OK' if simulate['requests_per_s'] >= 200 else 'MISSED'}"
    )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
