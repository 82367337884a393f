"""A disaggregated ``optimize`` (``mode: disagg``) over 8 prefill x 8 decode worker layouts
and worker counts up to 16 per pool, in-process with the memory cache (prints its cost; not a
pass/fail test): cold (a new context: every forward computed) and warm (forwards cached, the
search run again), best of ``--repeat`` runs. Issue 14's target: under 3 s cold.

Cases: Qwen3-30B-A3B FP8 on H100 under TensorRT-LLM's profile, 8-GPU workers in both pools
(``prefill_devices_per_instance`` = ``decode_devices_per_instance`` = 8) with TP 1, 2, 4, 8 x
EP 1, 8 (8 layouts each), at most 16 workers per pool within 256 GPUs (16,384 configurations),
2048/512 tokens with TTFT <= 1000 ms and TPOT <= 40 ms (the client bound binds first), and
4096/1024 tokens with TTFT <= 600 ms and TPOT <= 25 ms (the TTFT limit binds).

    python -m bench.bench_disagg_optimize [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from app.models.optimize import DisaggOptimizeResponse, OptimizeRequest
from app.services.context import create_context
from app.services.optimize import optimize as optimize_service
from app.settings import Settings

COMMON: dict[str, Any] = {
    "mode": "disagg",
    "engine": "trtllm",
    "model": "Qwen/Qwen3-30B-A3B",
    "device": "NVIDIA_H100_SXM_80G",
    "quantize_linear_action": "FP8",
    "num_devices": 256,
    "prefill_devices_per_instance": 8,
    "decode_devices_per_instance": 8,
    "tp_sizes": [1, 2, 4, 8],
    "ep_sizes": [1, 8],
    "max_workers": 16,
}
CASES: dict[str, dict[str, Any]] = {
    "2048/512, TTFT 1000 ms, TPOT 40 ms": {
        "input_length": 2048,
        "output_length": 512,
        "ttft_limit_ms": 1000.0,
        "tpot_limit_ms": 40.0,
    },
    "4096/1024, TTFT 600 ms, TPOT 25 ms": {
        "input_length": 4096,
        "output_length": 1024,
        "ttft_limit_ms": 600.0,
        "tpot_limit_ms": 25.0,
    },
}


def time_case(body: dict[str, Any], repeat: int) -> dict[str, Any]:
    request = OptimizeRequest.model_validate(body)
    cold, warm = [], []
    response: Any = None
    for _ in range(repeat):
        settings = Settings(cache_backend="memory", log_level="warning", response_cache=False)
        context = create_context(settings)
        started = time.perf_counter()
        response = optimize_service(context, request)
        cold.append(time.perf_counter() - started)
        started = time.perf_counter()
        optimize_service(context, request)
        warm.append(time.perf_counter() - started)
        context.close()
    assert isinstance(response, DisaggOptimizeResponse)
    best = response.best
    search = response.search
    return {
        "cold_s": round(min(cold), 2),
        "warm_s": round(min(warm), 2),
        "layouts": f"{search.prefill_layouts} x {search.decode_layouts}",
        "configurations": search.configurations,
        "evaluated": search.evaluated,
        "simulations": search.simulations,
        "forwards": response.stats.forward_evaluations,
        "best": None
        if best is None
        else f"{best.pd_split} {best.prefill.parallel} : {best.decode.parallel}, "
        f"{best.concurrency} clients, {best.throughput_per_device:.1f} tokens/s/device, "
        f"TTFT {best.ttft_ms:.0f} ms, TPOT {best.tpot_ms:.1f} ms, binding {best.binding_pool}",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    for name, case in CASES.items():
        figures = time_case({**COMMON, **case}, args.repeat)
        print(f"8 x 8 layouts, <= 16 workers per pool, {name}: {figures}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
