"""Service-level cost figures (prints them; not a pass/fail test), in-process, memory cache.

1. simulation cost vs concurrency: ``services.simulate`` at 64 vs 4096 requests per replica,
   cold (every forward computed) and warm (every forward a cache hit);
2. simulation cost vs chunk count: the same request with ``max_batched_tokens`` shrinking so the
   prefill takes 1 .. 1024 chunks (the service's bound);
3. forward evaluations per optimize vs unique shapes: a cold search computes each distinct
   forward shape exactly once (``forward_evaluations == shapes``; with ``mixed_latency:
   fused`` a mixed step is one shape of its own), a warm one none.

Qwen3-32B on ATLAS_800_A2_376T_64G (TP4 for simulations), best of ``--repeat`` runs, under the
RFC's semantics (``engine: msmodeling``: burst unless a case says closed loop), so the figures
compare with the earlier ones; ``bench.bench_closed_loop`` times the default (vLLM, closed loop).

    python -m bench.bench_costs [--repeat 3] [--json bench/out/costs.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from app.models.optimize import OptimizeRequest
from app.models.simulate import SimulateRequest, SimulateResponse
from app.services.context import ServiceContext, create_context
from app.services.optimize import optimize as optimize_service
from app.services.simulate import simulate
from app.settings import Settings

MODEL: dict[str, Any] = {
    "model": "Qwen/Qwen3-32B",
    "device": "ATLAS_800_A2_376T_64G",
    "engine": "msmodeling",
}
SIMULATE: dict[str, Any] = {
    **MODEL,
    "input_length": 8192,
    "output_length": 1024,
    "max_batched_tokens": 2048,
    "tp_size": 4,
}
OPTIMIZE: dict[str, Any] = {
    **MODEL,
    "num_devices": 8,
    "input_length": 3500,
    "output_length": 1500,
    "tpot_limit_ms": 50,
}


def fresh_context() -> ServiceContext:
    return create_context(
        Settings(cache_backend="memory", response_cache=False, log_level="warning")
    )


def time_simulate(body: dict[str, Any], repeat: int) -> dict[str, Any]:
    """Best cold and warm wall clock of one simulation (a fresh cache per cold run)."""
    request = SimulateRequest.model_validate(body)
    cold: list[float] = []
    warm: list[float] = []
    response = None
    for _ in range(repeat):
        context = fresh_context()
        try:
            started = time.perf_counter()
            response = simulate(context, request)
            cold.append((time.perf_counter() - started) * 1e3)
            started = time.perf_counter()
            simulate(context, request)
            warm.append((time.perf_counter() - started) * 1e3)
        finally:
            context.close()
    assert isinstance(response, SimulateResponse)  # an aggregated request's answer
    return {
        "cold_ms": round(min(cold), 1),
        "warm_ms": round(min(warm), 1),
        "forwards": response.stats.forward_evaluations,
        "chunks": response.prefill_num_chunks,
        "method": response.method,
        "feasible": response.feasible,
    }


def optimize_evaluations(body: dict[str, Any]) -> dict[str, Any]:
    request = OptimizeRequest.model_validate(body)
    context = fresh_context()
    try:
        started = time.perf_counter()
        cold = optimize_service(context, request)
        cold_ms = (time.perf_counter() - started) * 1e3
        started = time.perf_counter()
        warm = optimize_service(context, request)
        warm_ms = (time.perf_counter() - started) * 1e3
    finally:
        context.close()
    return {
        "layouts": cold.stats.layouts,
        "probes": cold.stats.probes,
        "unique_shapes": cold.stats.shapes,
        "cold_forward_evaluations": cold.stats.forward_evaluations,
        "warm_forward_evaluations": warm.stats.forward_evaluations,
        "cold_ms": round(cold_ms, 1),
        "warm_ms": round(warm_ms, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    figures: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    }
    print("simulation cost vs concurrency (8192/1024 tokens, B=2048: 4 chunks, TP4)")
    figures["concurrency"] = {}
    for concurrency in (64, 4096):
        row = time_simulate({**SIMULATE, "concurrency": concurrency}, args.repeat)
        figures["concurrency"][concurrency] = row
        print(f"  C={concurrency:<5} {row}")

    print("simulation cost vs chunk count (C=64, input 8192 tokens, TP4)")
    figures["chunks"] = {}
    for budget in (8192, 2048, 512, 128, 32, 8):
        row = time_simulate(
            {**SIMULATE, "concurrency": 64, "max_batched_tokens": budget}, args.repeat
        )
        figures["chunks"][budget] = row
        print(f"  B={budget:<5} {row}")

    print("forward evaluations per optimize vs unique shapes (8 devices, 3500/1500, TPOT 50 ms)")
    figures["optimize"] = {}
    cases = {
        "TP1/2/4/8, B=8192": {**OPTIMIZE, "max_batched_tokens": 8192, "tp_sizes": [1, 2, 4, 8]},
        "TP1/2/4/8, B=2048": {**OPTIMIZE, "max_batched_tokens": 2048, "tp_sizes": [1, 2, 4, 8]},
        "TP4/8, B=512": {**OPTIMIZE, "max_batched_tokens": 512, "tp_sizes": [4, 8]},
        "TP8, B=2048, closed loop": {
            **OPTIMIZE,
            "max_batched_tokens": 2048,
            "tp_sizes": [8],
            "workload": "closed_loop",
        },
        "TP4/8, B=2048, vllm fused": {
            **OPTIMIZE,
            "max_batched_tokens": 2048,
            "tp_sizes": [4, 8],
            "scheduler": {"name": "vllm", "mixed_latency": "fused"},
        },
    }
    for name, body in cases.items():
        row = optimize_evaluations(body)
        figures["optimize"][name] = row
        print(f"  {name:<26} {row}")

    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(figures, out, indent=2)
            out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
