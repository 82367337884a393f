"""Load test: ``chunkwise serve --workers 2`` with Redis on loopback, mixed warm/cold traffic.

Starts a ``redis-server`` on a free loopback port and ``chunkwise serve --workers 2`` against it
(``APP_CACHE_BACKEND=redis``; the whole-response cache stays ON, as deployed), warms the fixed
requests, then runs ``--clients`` closed-loop clients (one keep-alive ``http.client`` connection
each) for ``--duration`` seconds, each sending a weighted mix of:

* warm ``/v1/simulate``, ``/v1/optimize``, ``/v1/forward``: the same bodies every time (every
  forward a cache hit; an identical optimize is a response-cache hit);
* cold ones: a body no one sent before (``input_length`` / ``query_length`` from a global
  counter), so new forward shapes are computed and written back.

Every loop is bounded by time and by count (``--max-requests`` per client, 30 s per request).
Only loopback is used. Prints requests/s, p50/p99 per kind, errors and 5xx; ``--json`` saves the
figures. Targets (issue 7): 0 errors, 0 5xx, warm simulate p99 < 250 ms at 32 clients.

    python -m bench.load                                  # 32 clients, 20 s, 2 workers
    python -m bench.load --clients 64 --duration 30 --json bench/out/load.json
    python -m bench.load --url http://127.0.0.1:8000      # an already running service
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from bench.bench_api import free_port, redis_server, wait_for

MODEL: dict[str, Any] = {"model": "Qwen/Qwen3-32B", "device": "ATLAS_800_A2_376T_64G"}
WARM: dict[str, tuple[str, dict[str, Any]]] = {
    "simulate": (
        "/v1/simulate",
        {
            **MODEL,
            "input_length": 3500,
            "output_length": 1500,
            "max_batched_tokens": 2048,  # two chunks: the time simulation
            "concurrency": 128,  # in total: 64 on each of the two replicas
            "tp_size": 4,
            "dp_size": 2,
        },
    ),
    "optimize": (
        "/v1/optimize",
        {
            **MODEL,
            "num_devices": 8,
            "input_length": 3500,
            "output_length": 1500,
            "max_batched_tokens": 8192,
            "tpot_limit_ms": 50,
            "tp_sizes": [1, 2, 4, 8],
        },
    ),
    "forward": (
        "/v1/forward",
        {**MODEL, "num_queries": 8, "query_length": 2048, "context_length": 1024, "tp_size": 4},
    ),
}

#: Share of each kind in the mix (warm traffic dominates, as in a capacity-planning UI).
DEFAULT_MIX: dict[str, float] = {
    "simulate_warm": 0.35,
    "forward_warm": 0.15,
    "optimize_warm": 0.15,
    "simulate_cold": 0.15,
    "forward_cold": 0.10,
    "optimize_cold": 0.10,
}

_unique = itertools.count(1)
_unique_lock = threading.Lock()


def _next_unique() -> int:
    with _unique_lock:
        return next(_unique)


def request_for(kind: str) -> tuple[str, dict[str, Any]]:
    """The path and body of one request of ``kind`` (``<endpoint>_<warm|cold>``)."""
    endpoint, temperature = kind.rsplit("_", 1)
    path, body = WARM[endpoint]
    if temperature == "warm":
        return path, body
    n = _next_unique()
    if endpoint == "forward":
        return path, {**body, "query_length": 1 + n % 65_000, "context_length": 0}
    # A new input length: new prefill shapes (and a new optimize search, no response-cache hit).
    return path, {**body, "input_length": 3500 + n}


@dataclass
class LoadResult:
    """Latencies and outcomes per kind; ``errors`` are non-200 answers and transport errors."""

    clients: int
    duration_s: float = 0.0
    latencies_ms: dict[str, list[float]] = field(default_factory=dict)
    statuses: dict[int, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    bodies: dict[str, set[bytes]] = field(default_factory=dict)

    @property
    def requests(self) -> int:
        return sum(len(v) for v in self.latencies_ms.values())

    @property
    def server_errors(self) -> int:
        return sum(count for status, count in self.statuses.items() if status >= 500)

    def summary(self) -> dict[str, Any]:
        kinds = {
            kind: {
                "requests": len(values),
                "p50_ms": round(percentile(values, 50), 1),
                "p99_ms": round(percentile(values, 99), 1),
                "max_ms": round(max(values), 1),
            }
            for kind, values in sorted(self.latencies_ms.items())
            if values
        }
        return {
            "clients": self.clients,
            "duration_s": round(self.duration_s, 2),
            "requests": self.requests,
            "requests_per_s": round(self.requests / self.duration_s, 1) if self.duration_s else 0,
            "errors": len(self.errors),
            "server_errors_5xx": self.server_errors,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "kinds": kinds,
            "first_errors": self.errors[:5],
        }


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def run_load(
    host: str,
    port: int,
    *,
    clients: int = 32,
    duration_s: float = 20.0,
    max_requests_per_client: int = 10_000,
    mix: Mapping[str, float] = DEFAULT_MIX,
    request_timeout_s: float = 30.0,
    stop: threading.Event | None = None,
    keep_bodies: Callable[[bytes], bytes] | None = None,
    seed: int = 7,
) -> LoadResult:
    """``clients`` closed-loop clients for at most ``duration_s`` (or until ``stop`` is set).

    ``keep_bodies`` (a canonicalising function) records the distinct bodies of the warm kinds,
    so a caller can check that every answer was the same (and the right one).
    """
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError("the load test only targets loopback")
    result = LoadResult(clients=clients)
    lock = threading.Lock()
    kinds, weights = list(mix), list(mix.values())
    stop = stop or threading.Event()
    started = time.perf_counter()
    stop_at = started + duration_s

    def client(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        latencies: dict[str, list[float]] = {}
        statuses: dict[int, int] = {}
        errors: list[str] = []
        bodies: dict[str, set[bytes]] = {}
        conn = http.client.HTTPConnection(host, port, timeout=request_timeout_s)
        try:
            for _ in range(max_requests_per_client):
                if stop.is_set() or time.perf_counter() >= stop_at:
                    break
                kind = rng.choices(kinds, weights)[0]
                path, body = request_for(kind)
                payload = json.dumps(body).encode()
                begin = time.perf_counter()
                try:
                    conn.request(
                        "POST", path, body=payload, headers={"content-type": "application/json"}
                    )
                    response = conn.getresponse()
                    raw = response.read()
                except (OSError, http.client.HTTPException) as exc:
                    errors.append(f"{kind}: {type(exc).__name__}: {exc}")
                    conn.close()
                    conn = http.client.HTTPConnection(host, port, timeout=request_timeout_s)
                    continue
                latencies.setdefault(kind, []).append((time.perf_counter() - begin) * 1e3)
                statuses[response.status] = statuses.get(response.status, 0) + 1
                if response.status != 200:
                    errors.append(f"{kind}: {response.status} {raw[:200]!r}")
                elif keep_bodies is not None and kind.endswith("_warm"):
                    bodies.setdefault(kind, set()).add(keep_bodies(raw))
        finally:
            conn.close()
            with lock:
                for kind, values in latencies.items():
                    result.latencies_ms.setdefault(kind, []).extend(values)
                for status, count in statuses.items():
                    result.statuses[status] = result.statuses.get(status, 0) + count
                result.errors.extend(errors)
                for kind, found in bodies.items():
                    result.bodies.setdefault(kind, set()).update(found)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=duration_s + request_timeout_s + 5)
    result.duration_s = time.perf_counter() - started
    return result


def warm_up(host: str, port: int) -> None:
    """Send each warm request once, so the load measures the warm path for them."""
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        for path, body in WARM.values():
            conn.request(
                "POST", path, body=json.dumps(body), headers={"content-type": "application/json"}
            )
            response = conn.getresponse()
            raw = response.read()
            if response.status != 200:
                raise SystemExit(f"warm-up {path} answered {response.status}: {raw[:300]!r}")
    finally:
        conn.close()


@contextmanager
def chunkwise_serve(
    workers: int, redis_port: int, settings: Mapping[str, str] | None = None
) -> Iterator[int]:
    """``chunkwise serve --workers N`` on a free loopback port, Redis-backed (``settings``:
    more ``APP_*`` variables)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("APP_")}
    env.update(
        APP_CACHE_BACKEND="redis",
        APP_REDIS_URL=f"redis://127.0.0.1:{redis_port}/0",
        APP_LOG_LEVEL="warning",
    )
    env.update(settings or {})
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "app.cli", "serve"),
            *("--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)),
        ],
        env=env,
        start_new_session=True,
    )

    def ready() -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            conn.request("GET", "/readyz")
            return conn.getresponse().status == 200
        finally:
            conn.close()

    try:
        wait_for(ready, 60, "chunkwise serve")
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def report(summary: Mapping[str, Any], workers: int | None) -> None:
    print(
        f"clients={summary['clients']} workers={workers or '?'} cpus={os.cpu_count()} "
        f"duration={summary['duration_s']} s"
    )
    print(
        f"requests={summary['requests']}  {summary['requests_per_s']} req/s  "
        f"errors={summary['errors']}  5xx={summary['server_errors_5xx']}  "
        f"statuses={summary['statuses']}"
    )
    for kind, figures in summary["kinds"].items():
        print(
            f"  {kind:<15} n={figures['requests']:<6} p50 {figures['p50_ms']:>7.1f} ms  "
            f"p99 {figures['p99_ms']:>7.1f} ms  max {figures['max_ms']:>7.1f} ms"
        )
    warm = summary["kinds"].get("simulate_warm", {}).get("p99_ms", float("inf"))
    ok = summary["errors"] == 0 and summary["server_errors_5xx"] == 0 and warm < 250
    verdict = ("OK" if ok else "MISSED") if summary["clients"] == 32 else "n/a at this load"
    print(f"target 0 errors, 0 5xx, warm simulate p99 < 250 ms at 32 clients: {verdict}")
    for line in summary["first_errors"]:
        print(f"  error: {line}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of load")
    parser.add_argument("--max-requests", type=int, default=10_000, help="per client")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--url", default=None, help="a running service on loopback instead")
    parser.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args(argv)

    def measure(host: str, port: int) -> dict[str, Any]:
        warm_up(host, port)
        result = run_load(
            host,
            port,
            clients=args.clients,
            duration_s=args.duration,
            max_requests_per_client=args.max_requests,
        )
        return result.summary()

    if args.url:
        parts = urlsplit(args.url)
        summary = measure(parts.hostname or "127.0.0.1", parts.port or 80)
    else:
        with (
            redis_server(args.redis_server) as redis_port,
            chunkwise_serve(args.workers, redis_port) as port,
        ):
            summary = measure("127.0.0.1", port)
    summary["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    summary["workers"] = None if args.url else args.workers
    summary["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    report(summary, summary["workers"])
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(summary, out, indent=2)
            out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
