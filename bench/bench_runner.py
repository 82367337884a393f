"""Forward-latency model benchmark (issue 3). Run: ``python -m bench.bench_runner``.

Prints the wall-clock cost of one ``ModelRunner.run_inference`` (best of several repeats of a
batch of calls) for a 64-layer dense model and DeepSeek-V3, prefill and decode, at concurrency 1
and 4096: identical layers are costed once and multiplied, so the cost does not depend on the
layer count loop or on the number of requests.
"""

from __future__ import annotations

import argparse
import time

from app.core.catalog import get_device, get_model, parse_quantization
from app.core.cost import ForwardShape
from app.core.parallel import ParallelLayout
from app.core.runner import ModelRunner

US_PER_S = 1e6


def _cases() -> list[tuple[str, ModelRunner, ForwardShape]]:
    device = get_device("NVIDIA_H200_SXM_141G")
    fp8 = parse_quantization("FP8")
    dense = ModelRunner(get_model("Qwen/Qwen3-32B"), device, ParallelLayout(tp=4), fp8)
    mla = ModelRunner(
        get_model("deepseek-ai/DeepSeek-V3"),
        device,
        ParallelLayout(tp=8, dp=4, ep=32),
        fp8,
        num_mtp_tokens=1,
    )
    out: list[tuple[str, ModelRunner, ForwardShape]] = []
    for label, runner in (("Qwen3-32B (64 layers) TP4", dense), ("DeepSeek-V3 TP8 DP4 EP32", mla)):
        for concurrency in (1, 4096):
            out.append(
                (
                    f"{label} prefill c={concurrency} q=2048",
                    runner,
                    ForwardShape(
                        is_decode=False, concurrency=concurrency, query_len=2048, seq_len=4096
                    ),
                )
            )
            out.append(
                (
                    f"{label} decode  c={concurrency} q=2 (MTP 1)",
                    runner,
                    ForwardShape(
                        is_decode=True,
                        concurrency=concurrency,
                        query_len=2,
                        seq_len=8192,
                    ),
                )
            )
    return out


def bench(calls: int, repeats: int) -> None:
    print(f"{'case':58s} {'us/call':>8s} {'ops':>4s} {'latency_ms':>11s}")
    for label, runner, request in _cases():
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(calls):
                result = runner.run_inference(request)
            best = min(best, (time.perf_counter() - start) / calls)
        print(
            f"{label:58s} {best * US_PER_S:8.1f} {len(result.breakdown.ops):4d} "
            f"{result.latency_ms:11.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    bench(args.calls, args.repeats)


if __name__ == "__main__":
    main()
