"""A disaggregated ``simulate`` at 1,024 clients, in-process with the memory cache (prints
its cost; not a pass/fail test): cold (every forward computed) and warm (forwards cached),
best of ``--repeat`` runs. Issue 14's target: under 0.2 s.

Cases: Qwen3-32B FP8 on H100, 4 x TP2 prefill + 1 x TP8 decode (16 GPUs), and DeepSeek-R1
FP8 on B200, 1 x TP8 prefill + 1 x TP8 decode, 1024/1024 tokens, TensorRT-LLM's profile.

    python -m bench.bench_disagg [--repeat 5] [--concurrency 1024]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from app.models.simulate import DisaggSimulateResponse, SimulateRequest
from app.services.context import create_context
from app.services.simulate import simulate as simulate_service
from app.settings import Settings

COMMON: dict[str, Any] = {
    "mode": "disagg",
    "engine": "trtllm",
    "input_length": 1024,
    "output_length": 1024,
    "quantize_linear_action": "FP8",
}
CASES: dict[str, dict[str, Any]] = {
    "Qwen3-32B H100 4xTP2 : 1xTP8": {
        "model": "Qwen/Qwen3-32B",
        "device": "NVIDIA_H100_SXM_80G",
        "prefill_workers": 4,
        "prefill_tp_size": 2,
        "decode_workers": 1,
        "decode_tp_size": 8,
    },
    "DeepSeek-R1 B200 1xTP8 : 1xTP8 EP8": {
        "model": "deepseek-ai/DeepSeek-R1",
        "device": "NVIDIA_B200_SXM_180G",
        "prefill_workers": 1,
        "prefill_tp_size": 8,
        "decode_workers": 1,
        "decode_tp_size": 8,
        "decode_ep_size": 8,
    },
}


def time_case(body: dict[str, Any], repeat: int) -> dict[str, Any]:
    request = SimulateRequest.model_validate(body)
    cold, warm = [], []
    response: Any = None
    for _ in range(repeat):
        context = create_context(Settings(cache_backend="memory", log_level="warning"))
        started = time.perf_counter()
        response = simulate_service(context, request)
        cold.append(time.perf_counter() - started)
        started = time.perf_counter()
        simulate_service(context, request)
        warm.append(time.perf_counter() - started)
        context.close()
    assert isinstance(response, DisaggSimulateResponse)
    return {
        "cold_ms": round(min(cold) * 1e3, 1),
        "warm_ms": round(min(warm) * 1e3, 1),
        "forwards": response.stats.forward_evaluations,
        "prefill_jobs": response.prefill_jobs,
        "decode_runs": response.decode_runs,
        "binding": response.binding_pool,
        "ttft_ms": round(response.ttft_ms, 1),
        "tpot_ms": round(response.tpot_ms, 2),
        "feasible": response.feasible,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=1024)
    args = parser.parse_args(argv)
    for name, case in CASES.items():
        body = {**COMMON, **case, "concurrency": args.concurrency}
        print(f"{name}, {args.concurrency} clients: {time_case(body, args.repeat)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
