"""Engine benchmarks (issue: chunked-prefill engine). Run: ``python -m bench.bench_engine``.

Prints the cost of the group simulation for the cases the issue names, with a constant-cost
fake latency (so only the engine is measured), and of one aggregated optimize over 4 layouts.
Figures are the best of several repeats (wall clock, this machine).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from app.core.cost import ServingModel
from app.core.engine import simulate
from app.core.optimizer import Deployment, enumerate_layouts, optimize_agg
from app.core.parallel import ParallelLayout
from app.core.spec import WorkloadSpec


class ConstantCost:
    """Every forward costs the same: measures the engine, not a latency model."""

    def prefill_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        return 30.0

    def decode_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        return 20.0

    def memory_left_gb(
        self, is_decode: bool, concurrency: int, query_len: int, seq_len: int
    ) -> float:
        return 64.0 - 1e-5 * concurrency * seq_len


class ScaledCost(ConstantCost):
    """Latency that grows with the work, split by TP (for the optimizer benchmark)."""

    def __init__(self, tp: int) -> None:
        self.tp = tp

    def prefill_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        return 5.0 + concurrency * query_len * 4e-3 / self.tp

    def decode_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        return 8.0 + concurrency * seq_len * 2e-6 / self.tp


def best_of(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def sim_case(effective: int, budget: int, concurrency: int, output: int, repeats: int) -> float:
    data = WorkloadSpec(input_length=effective, output_length=output, max_batched_tokens=budget)
    return best_of(
        lambda: simulate(data, concurrency, ConstantCost(), force_simulation=True), repeats
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    r = args.repeats

    print("simulate, time simulation (constant-cost fake latency), best of", r)
    cases = [
        ("E=32768 B=8192 C=256  O=256 ", 32768, 8192, 256, 256),
        ("E=32768 B=8192 C=256  O=4096", 32768, 8192, 256, 4096),
        ("E=32768 B=8192 C=1024 O=1024", 32768, 8192, 1024, 1024),
        ("E=131072 B=1024 C=64  O=4096", 131072, 1024, 64, 4096),
        ("E=32768 B=8192 C=64   O=1024", 32768, 8192, 64, 1024),
        ("E=32768 B=8192 C=4096 O=1024", 32768, 8192, 4096, 1024),
        ("E=4096  B=512  C=2048 O=1024", 4096, 512, 2048, 1024),
        ("E=16    B=256  C=4096 O=1024", 16, 256, 4096, 1024),
        ("E=1     B=100  C=65536 O=100000", 1, 100, 65536, 100_000),
    ]
    timings = {}
    for label, e, b, c, o in cases:
        timings[label] = sim_case(e, b, c, o, r)
        print(f"  {label}: {timings[label] * 1000:8.2f} ms")
    ratio = timings["E=32768 B=8192 C=256  O=4096"] / timings["E=32768 B=8192 C=256  O=256 "]
    print(f"  output 4096 vs 256 at C=256 (target <= 1.5x): {ratio:.2f}x")

    data = WorkloadSpec(
        input_length=32768, output_length=1024, max_batched_tokens=8192, tpot_limit_ms=50.0
    )
    layouts = enumerate_layouts(8)[:4]

    def serving_for(layout: ParallelLayout) -> ServingModel:
        return ScaledCost(layout.tp)

    deployment = Deployment(model="fake", device="fake")
    seconds = best_of(lambda: optimize_agg(data, layouts, serving_for, deployment), r)
    result = optimize_agg(data, layouts, serving_for, deployment)
    print(
        f"optimize_agg over {len(layouts)} layouts (fake latency): {seconds * 1000:.1f} ms, "
        f"{len(result.probes)} probes, {result.forward_evaluations} forward evaluations"
    )


if __name__ == "__main__":
    main()
