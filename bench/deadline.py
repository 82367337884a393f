"""The deadline and the lanes under load (issue 15): ``chunkwise serve --workers 2`` with Redis
and ``APP_REQUEST_DEADLINE_S`` (default 2), 16 concurrent heavy requests (cold optimizes, each
a new input length), and meanwhile a loop of cheap ones (a chunk plan and a warm simulate).
Prints each heavy request's status and wall time, and the cheap requests' p50 / p99.

    python -m bench.deadline [--heavy 16] [--deadline 2] [--redis-server PATH]

Targets: every heavy request answers (200 or 504) within deadline + 1 s; cheap p99 < 100 ms.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import threading
import time
from typing import Any

from bench.bench_api import redis_server
from bench.load import chunkwise_serve

HEAVY: dict[str, Any] = {
    "model": "Qwen/Qwen3-32B",
    "device": "ATLAS_800_A2_376T_64G",
    "num_devices": 8,
    "output_length": 2048,
    "max_batched_tokens": 512,
    "tpot_limit_ms": 200,
    "tp_sizes": [1, 2, 4, 8],
    "quantize_linear_action": "W8A8_DYNAMIC",
    "requests_per_client": 20,
}
CHEAP: list[tuple[str, dict[str, Any]]] = [
    ("/v1/chunk-plan", {"input_length": 3500, "max_batched_tokens": 2048}),
    (
        "/v1/simulate",
        {
            "model": "Qwen/Qwen3-0.6B",
            "device": "TEST_DEVICE",
            "input_length": 512,
            "output_length": 64,
            "concurrency": 4,
            "engine": "msmodeling",
        },
    ),
]


def serve(
    redis_port: int, deadline_s: float, slots: int | None, processes: int | None = None
) -> Any:
    """Two workers, Redis, the deadline, no response cache (every heavy request computes);
    ``processes``: APP_HEAVY_PROCESSES (None: the default, one child per worker)."""
    settings = {"APP_REQUEST_DEADLINE_S": str(deadline_s), "APP_RESPONSE_CACHE": "false"}
    if processes is not None:
        settings["APP_HEAVY_PROCESSES"] = str(processes)
    if slots is not None:
        settings["APP_MAX_CONCURRENT_COMPUTATIONS"] = str(slots)
    return chunkwise_serve(2, redis_port, settings)


def post(port: int, path: str, body: dict[str, Any], timeout_s: float = 120) -> tuple[int, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    started = time.perf_counter()
    try:
        conn.request("POST", path, json.dumps(body), {"content-type": "application/json"})
        response = conn.getresponse()
        response.read()
        return response.status, time.perf_counter() - started
    finally:
        conn.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heavy", type=int, default=16)
    parser.add_argument("--deadline", type=float, default=2.0)
    parser.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    parser.add_argument(
        "--slots", type=int, default=None, help="APP_MAX_CONCURRENT_COMPUTATIONS (heavy lane)"
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=None,
        help="APP_HEAVY_PROCESSES (0: the heavy lane in threads; default: one child per worker)",
    )
    args = parser.parse_args(argv)
    with (
        redis_server(args.redis_server) as redis_port,
        serve(redis_port, args.deadline, args.slots, args.processes) as port,
    ):
        for path, body in CHEAP:  # warm the cheap ones
            post(port, path, body)
        heavy: list[tuple[int, float]] = []
        cheap_ms: list[float] = []
        cheap_errors = 0
        done = threading.Event()

        def heavy_call(i: int) -> None:
            heavy.append(post(port, "/v1/optimize", {**HEAVY, "input_length": 30_000 + i}))

        def cheap_loop() -> None:
            nonlocal cheap_errors
            i = 0
            while not done.is_set():
                path, body = CHEAP[i % len(CHEAP)]
                status, seconds = post(port, path, body, timeout_s=30)
                cheap_ms.append(seconds * 1e3)
                cheap_errors += status != 200
                i += 1

        cheap = threading.Thread(target=cheap_loop)
        threads = [threading.Thread(target=heavy_call, args=(i,)) for i in range(args.heavy)]
        started = time.perf_counter()
        cheap.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - started
        done.set()
        cheap.join()
    statuses: dict[int, int] = {}
    for status, _ in heavy:
        statuses[status] = statuses.get(status, 0) + 1
    slowest = max(s for _, s in heavy)
    print(
        f"{args.heavy} heavy optimizes, deadline {args.deadline:g} s: statuses {statuses}, "
        f"slowest {slowest:.2f} s, all done after {wall:.2f} s"
    )
    print(
        f"cheap requests while they ran: n={len(cheap_ms)} errors={cheap_errors} "
        f"p50 {percentile(cheap_ms, 50):.1f} ms p99 {percentile(cheap_ms, 99):.1f} ms "
        f"max {max(cheap_ms, default=0):.1f} ms"
    )
    ok = slowest <= args.deadline + 1 and percentile(cheap_ms, 99) < 100
    print(f"targets (slowest <= deadline + 1 s, cheap p99 < 100 ms): {'OK' if ok else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
