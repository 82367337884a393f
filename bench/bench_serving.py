"""Serving-workload benchmarks with the real latency model (issue: steady-state serving).

Run: ``python -m bench.bench_serving``. Prints the cost of one closed-loop evaluation
(C = 256 clients, ISL 4096, OSL 1024, 10 requests per client) of a 64-layer model
(Qwen3-32B, FP8, TP8 on 8 H100, so all 256 requests fit the KV cache at once), the same run
under the ``vllm`` policy with each mixed-step rule (``max``, ``sum``, ``fused``: wall time,
forward shapes, TTFT, TPOT), a full closed-loop concurrency search over 4 layouts
(TP1/2/4/8 on 8 H100), and Poisson runs of 2,000 requests on the same deployment at rates
below, near and above its capacity: in the core, and through ``services.simulate`` (what
``POST /v1/simulate`` runs; memory cache, cold). Each run starts from a fresh runner (and
cache), so every forward shape is computed (nothing cached between repeats); best of
``--repeats``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

from app.core.cost import ServingModel
from app.core.optimizer import Deployment, enumerate_layouts, optimize_agg
from app.core.parallel import ParallelLayout
from app.core.runner import RunnerServingModel, build_runner
from app.core.scheduler import MIXED_LATENCIES, Scheduler, make_scheduler
from app.core.spec import WorkloadSpec
from app.core.workload import simulate_poisson_serving, simulate_serving
from app.models.simulate import SimulateRequest, SimulateResponse
from app.services.context import create_context
from app.services.simulate import simulate as simulate_service
from app.settings import Settings

MODEL = "Qwen/Qwen3-32B"
DEVICE = "NVIDIA_H100_SXM_80G"


def serving_model(layout: ParallelLayout) -> RunnerServingModel:
    runner = build_runner(MODEL, DEVICE, parallel=layout, quantize_linear_action="FP8")
    return RunnerServingModel(runner)


def best_of(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    data = WorkloadSpec(input_length=4096, output_length=1024, max_batched_tokens=8192)

    tp8 = ParallelLayout(tp=8)

    def one_evaluation() -> object:
        return simulate_serving(data, 256, serving_model(tp8))

    seconds = best_of(one_evaluation, args.repeats)
    result = simulate_serving(data, 256, serving_model(tp8))
    print(
        f"closed loop C=256 ISL 4096 OSL 1024, {MODEL} FP8 TP8 on 8 x {DEVICE}: "
        f"{seconds * 1000:.1f} ms (target < 300 ms); {result.steps} engine steps, "
        f"{result.forward_evaluations} forward shapes, TTFT {result.ttft_ms:.0f} ms, "
        f"TPOT {result.tpot_ms:.2f} ms, KV admits {result.max_running} at once"
    )

    for rule in MIXED_LATENCIES:
        vllm = make_scheduler("vllm", mixed_latency=rule)

        def vllm_evaluation(vllm: Scheduler = vllm) -> object:
            return simulate_serving(data, 256, serving_model(tp8), vllm)

        seconds = best_of(vllm_evaluation, args.repeats)
        result = simulate_serving(data, 256, serving_model(tp8), vllm)
        print(
            f"  vllm, mixed_latency={rule:<5}: {seconds * 1000:.1f} ms (target < 300 ms); "
            f"{result.steps} engine steps, {result.forward_evaluations} forward shapes, "
            f"TTFT {result.ttft_ms:.0f} ms, TPOT {result.tpot_ms:.2f} ms, "
            f"{result.throughput_tokens_s:.0f} output tok/s"
        )

    limits = WorkloadSpec(
        input_length=4096,
        output_length=1024,
        max_batched_tokens=8192,
        ttft_limit_ms=10_000.0,
        tpot_limit_ms=50.0,
    )
    layouts = enumerate_layouts(8)

    def factory(layout: ParallelLayout) -> ServingModel:
        return serving_model(layout)

    deployment = Deployment(model=MODEL, device=DEVICE, quantization="FP8")

    def search() -> object:
        return optimize_agg(limits, layouts, factory, deployment, workload="closed_loop")

    seconds = best_of(search, args.repeats)
    found = optimize_agg(limits, layouts, factory, deployment, workload="closed_loop")
    best = found.best
    summary = (
        f"best {best.parallel} C={best.concurrency} {best.throughput_tokens_s:.0f} tok/s"
        if best
        else "no feasible row"
    )
    print(
        f"closed-loop search over {len(layouts)} layouts (TTFT <= 10 s, TPOT <= 50 ms): "
        f"{seconds:.2f} s (target < 3 s); {len(found.probes)} probes, "
        f"{found.forward_evaluations} forward shapes; {summary}"
    )

    poisson(data, args.repeats)
    poisson_at_the_bound(args.repeats)


POISSON_RATES = (2.0, 6.0, 12.0)  # req/s: ~1/3, ~0.9x and ~2x the C=256 closed loop's rate
POISSON_REQUESTS = 2000


def simulate_cold(request: SimulateRequest) -> SimulateResponse:
    """``services.simulate`` (the ``POST /v1/simulate`` path) with a cold memory cache."""
    settings = Settings(cache_backend="memory", response_cache=False, log_level="warning")
    context = create_context(settings)
    try:
        response = simulate_service(context, request)
    finally:
        context.close()
    assert isinstance(response, SimulateResponse)  # an aggregated request's answer
    return response


def poisson(data: WorkloadSpec, repeats: int) -> None:
    tp8 = ParallelLayout(tp=8)
    for rate in POISSON_RATES:

        def core(rate: float = rate) -> object:
            return simulate_poisson_serving(
                data, rate, serving_model(tp8), num_requests=POISSON_REQUESTS
            )

        seconds = best_of(core, repeats)
        result = simulate_poisson_serving(
            data, rate, serving_model(tp8), num_requests=POISSON_REQUESTS
        )
        request = SimulateRequest.model_validate(
            {
                "model": MODEL,
                "device": DEVICE,
                "quantize_linear_action": "FP8",
                "tp_size": 8,
                "input_length": data.input_length,
                "output_length": data.output_length,
                "max_batched_tokens": data.max_batched_tokens,
                "workload": "poisson",
                "request_rate": rate,
                "num_requests": POISSON_REQUESTS,
            }
        )
        service_seconds = best_of(partial(simulate_cold, request), repeats)
        cache = simulate_cold(request).stats.cache
        print(
            f"poisson {rate:g} req/s x {POISSON_REQUESTS} requests, ISL {data.input_length} "
            f"OSL {data.output_length}, {MODEL} FP8 TP8: core {seconds * 1000:.1f} ms, "
            f"POST /v1/simulate path {service_seconds * 1000:.1f} ms (target < 1 s); "
            f"{result.steps} engine steps, {result.forward_evaluations} forward shapes, "
            f"{cache.round_trips} cache round trips; TTFT {result.ttft_ms:.0f} ms, "
            f"TPOT {result.tpot_ms:.2f} ms, {result.request_throughput:.2f} req/s served, "
            f"mean running batch {result.mean_running_batch:.0f}"
        )


def poisson_at_the_bound(repeats: int) -> None:
    """The slowest poisson case found at the service's bounds: 10,000 requests x 8 chunks
    (requests x chunks near 131,072), the vllm policy cutting chunks (a cache read each)."""
    request = SimulateRequest.model_validate(
        {
            "model": MODEL,
            "device": DEVICE,
            "quantize_linear_action": "FP8",
            "tp_size": 8,
            "input_length": 4096,
            "output_length": 1024,
            "max_batched_tokens": 512,
            "scheduler": {"name": "vllm"},
            "workload": "poisson",
            "request_rate": 6.0,
            "num_requests": 10_000,
        }
    )
    seconds = best_of(partial(simulate_cold, request), repeats)
    response = simulate_cold(request)
    print(
        f"poisson at the bound: 10,000 requests x 8 chunks (ISL 4096, B=512), vllm policy, "
        f"6 req/s, {MODEL} FP8 TP8, POST /v1/simulate path: {seconds * 1000:.0f} ms; "
        f"{response.steps} engine steps, {response.stats.shapes} forward shapes, "
        f"{response.stats.cache.round_trips} cache round trips"
    )


if __name__ == "__main__":
    main()
