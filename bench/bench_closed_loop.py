"""The default search's cost (prints it; not a pass/fail test): a closed-loop ``optimize`` under
an engine profile, cold (every forward computed), warm (forwards and plans cached, response
cache off: the same context again) and warm without plans (forwards cached, every plan made
again: a fresh plan cache), in-process with the memory cache, best of ``--repeat`` runs.

Issue 12's case: Qwen3-32B FP8 on 8 x H200, 4096/1024 tokens, TTFT <= 2 s, TPOT <= 50 ms, TP
1/2/4/8 (four layouts).

    python -m bench.bench_closed_loop [--repeat 3] [--engine vllm trtllm]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

from app.core.profiles import PROFILES
from app.core.workload import PlanCache
from app.models.optimize import OptimizeRequest, OptimizeResponse
from app.services.context import create_context
from app.services.optimize import optimize as optimize_service
from app.settings import Settings

CASE: dict[str, Any] = {
    "model": "Qwen/Qwen3-32B",
    "device": "NVIDIA_H200_SXM_141G",
    "quantize_linear_action": "FP8",
    "num_devices": 8,
    "input_length": 4096,
    "output_length": 1024,
    "ttft_limit_ms": 2000,
    "tpot_limit_ms": 50,
    "tp_sizes": [1, 2, 4, 8],
}


def time_search(engine: str, repeat: int) -> dict[str, Any]:
    request = OptimizeRequest.model_validate({**CASE, "engine": engine})
    cold, warm, unplanned, probes, best = [], [], [], 0, ""
    for _ in range(repeat):
        context = create_context(
            Settings(cache_backend="memory", response_cache=False, log_level="warning")
        )
        started = time.perf_counter()
        response = optimize_service(context, request)
        cold.append(time.perf_counter() - started)
        started = time.perf_counter()
        optimize_service(context, request)
        warm.append(time.perf_counter() - started)
        started = time.perf_counter()
        fresh = PlanCache(context.settings.plan_cache_items)
        optimize_service(dataclasses.replace(context, plans=fresh), request)
        unplanned.append(time.perf_counter() - started)
        probes = response.stats.probes
        assert isinstance(response, OptimizeResponse)  # an aggregated search
        if response.best is not None:
            best = f"{response.best.parallel} x {response.best.concurrency}"
    return {
        "cold_s": round(min(cold), 3),
        "warm_s": round(min(warm), 3),
        "warm_unplanned_s": round(min(unplanned), 3),
        "probes": probes,
        "best": best,
        "workload": request.workload or PROFILES[engine].workload,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--engine", nargs="+", choices=tuple(PROFILES), default=["vllm", "trtllm"])
    args = parser.parse_args(argv)
    for engine in args.engine:
        print(f"{engine:<10} {time_search(engine, args.repeat)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
