"""Aggregated deployment: prefill and decode share every engine instance (RFC §3.1.4-3.1.5)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from app.core.chunking import require_int
from app.core.cost import ForwardShape
from app.core.engine import SimulationResult, simulate
from app.core.errors import InvalidParameterError
from app.core.optimizer.common import (
    DEFAULT_MAX_BATCH_SIZE,
    Deployment,
    MemoLatency,
    OptimizeResult,
    Probe,
    ServingFactory,
    out_of_memory_probe,
    refused_probe,
    run_layout_searches,
)
from app.core.parallel import ParallelLayout
from app.core.scheduler import Scheduler, default_scheduler
from app.core.spec import WorkloadSpec
from app.core.workload import (
    DEFAULT_REQUESTS_PER_CLIENT,
    WORKLOADS,
    PlanMemo,
    ServingResult,
    Window,
    Workload,
    kv_capacity,
    simulate_closed_loop,
    simulate_serving,
)

#: Workloads the concurrency search runs (a request rate is not a concurrency).
SEARCHED_WORKLOADS: tuple[Workload, ...] = ("burst", "closed_loop")


def largest_prefill_shape(data: WorkloadSpec, batch_size: int) -> ForwardShape:
    """The last chunk (longest context) with as many requests as one step's budget admits."""
    last = data.get_prefill_chunk_plan()[-1]
    per_step = max(1, data.max_batched_tokens // last.query_len)
    return ForwardShape(
        is_decode=False,
        concurrency=min(batch_size, per_step),
        query_len=last.query_len,
        seq_len=last.seq_len,
    )


def memory_left_gb(memo: MemoLatency, shapes: Sequence[ForwardShape]) -> float:
    return min(memo.memory_left_gb(shape) for shape in shapes)


def limit_reason(data: WorkloadSpec, ttft_ms: float | None, tpot_ms: float | None) -> str | None:
    if data.ttft_limit_ms is not None and ttft_ms is not None and ttft_ms > data.ttft_limit_ms:
        return f"ttft_limit: {ttft_ms:.2f} ms > {data.ttft_limit_ms:g} ms"
    if data.tpot_limit_ms is not None and tpot_ms is not None and tpot_ms > data.tpot_limit_ms:
        return f"tpot_limit: {tpot_ms:.3f} ms > {data.tpot_limit_ms:g} ms"
    return None


#: What a probe reads of one replica's simulation (a burst or a closed loop): TTFT, TPOT,
#: ``throughput_tokens_s``, ``request_throughput`` and ``method``. A result, not a cost model:
#: it stays beside the search, not in :mod:`app.core.cost`.
SimulatedMetrics = SimulationResult | ServingResult


def simulated_probe(
    data: WorkloadSpec,
    layout: ParallelLayout,
    batch_size: int,
    left_gb: float,
    result: SimulatedMetrics,
    *,
    replicas: int | None = None,
) -> Probe:
    """A probe from simulated metrics (TTFT with the spec's per-request overhead), checked
    against the limits; throughputs are the result's times ``replicas`` (default: one
    replica's result times the layout's ``dp``; 1 for a result over every replica)."""
    scale = layout.dp if replicas is None else replicas
    ttft_ms = data.reported_ttft_ms(result.ttft_ms)
    reason = limit_reason(data, ttft_ms, result.tpot_ms)
    return Probe(
        layout=layout,
        batch_size=batch_size,
        concurrency=batch_size * layout.dp,
        feasible=reason is None,
        reason=reason,
        ttft_ms=ttft_ms,
        tpot_ms=result.tpot_ms,
        throughput_tokens_s=result.throughput_tokens_s * scale,
        request_throughput=result.request_throughput * scale,
        memory_left_gb=left_gb,
        method=result.method,
    )


def optimize_agg(
    data: WorkloadSpec,
    layouts: Sequence[ParallelLayout],
    serving_for: ServingFactory,
    deployment: Deployment,
    *,
    scheduler: Scheduler | None = None,
    force_simulation: bool = False,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    workload: Workload = "burst",
    window: Window = "benchmark",
    requests_per_client: int = DEFAULT_REQUESTS_PER_CLIENT,
    coupled: Callable[[ParallelLayout], bool] | None = None,
    plans: PlanMemo | None = None,
) -> OptimizeResult:
    """Best concurrency per layout under memory, TTFT and TPOT limits, ranked by throughput.

    Each data-parallel replica is simulated with its own ``batch_size`` requests and its own
    budget; totals multiply by ``dp`` (``concurrency = batch_size * dp``).

    ``workload="burst"`` (the RFC): ``batch_size`` requests arrive at once per replica and a
    probe is infeasible when their forwards do not fit in memory. ``"closed_loop"``:
    ``batch_size`` clients per replica keep sending requests (``requests_per_client`` each);
    requests beyond the KV cache queue (their wait counts in TTFT), so memory limits a probe
    only when not even one request fits. ``coupled(layout)``: the layout's replicas step
    together (:mod:`app.core.workload.coupled`), so a closed-loop probe simulates all of them
    as one engine. ``plans``: where closed-loop plans are memoised across searches (they need
    no latency or limit: a search repeated with other limits or cached forwards replays them).
    """
    policy = scheduler or default_scheduler()
    check_searched_workload(workload)
    if workload == "closed_loop":
        return _optimize_closed_loop(
            data,
            layouts,
            serving_for,
            deployment,
            policy,
            max_batch_size,
            window,
            requests_per_client,
            coupled or _independent,
            plans,
        )
    return _optimize_burst(
        data, layouts, serving_for, deployment, policy, max_batch_size, force_simulation
    )


def check_searched_workload(workload: object) -> None:
    if workload not in WORKLOADS:
        raise InvalidParameterError("workload", workload, f"one of {', '.join(WORKLOADS)}")
    if workload not in SEARCHED_WORKLOADS:
        raise InvalidParameterError(
            "workload",
            workload,
            f"one of {', '.join(SEARCHED_WORKLOADS)}: the search varies concurrency, not a "
            "request rate (simulate a poisson workload one rate at a time)",
        )


def _optimize_burst(
    data: WorkloadSpec,
    layouts: Sequence[ParallelLayout],
    serving_for: ServingFactory,
    deployment: Deployment,
    policy: Scheduler,
    max_batch_size: int,
    force_simulation: bool,
) -> OptimizeResult:
    """The aggregated search with each probe a burst of ``batch_size`` requests (the RFC)."""

    def evaluate_for(
        layout: ParallelLayout, memo: MemoLatency
    ) -> tuple[Callable[[int], Probe], ForwardShape]:
        def evaluate(batch_size: int) -> Probe:
            left_gb = memory_left_gb(
                memo, (data.decode_shape(batch_size), largest_prefill_shape(data, batch_size))
            )
            if left_gb < 0:
                return out_of_memory_probe(layout, batch_size, left_gb)
            result = simulate(data, batch_size, memo, policy, force_simulation=force_simulation)
            return simulated_probe(data, layout, batch_size, left_gb, result)

        return evaluate, data.decode_shape(1)

    return run_layout_searches(
        "agg", data, deployment, layouts, serving_for, evaluate_for, "output", max_batch_size
    )


def _independent(layout: ParallelLayout) -> bool:
    return False


def _optimize_closed_loop(
    data: WorkloadSpec,
    layouts: Sequence[ParallelLayout],
    serving_for: ServingFactory,
    deployment: Deployment,
    policy: Scheduler,
    max_batch_size: int,
    window: Window,
    requests_per_client: int,
    coupled: Callable[[ParallelLayout], bool],
    plans: PlanMemo | None,
) -> OptimizeResult:
    """The aggregated search with each probe a closed loop of ``batch_size`` clients per
    replica (coupled replicas: one engine of ``batch_size x dp`` clients)."""
    require_int("requests_per_client", requests_per_client, 1, 1000)

    def evaluate_for(
        layout: ParallelLayout, memo: MemoLatency
    ) -> tuple[Callable[[int], Probe], ForwardShape]:
        kv_cap = kv_capacity(data, memo.model)
        caps = [c for c in (kv_cap, policy.max_running) if c is not None]
        max_running = min(caps) if caps else None

        def evaluate(batch_size: int) -> Probe:
            if max_running is not None and 0 < max_running < batch_size:
                # More clients than the engine runs at once only queue: the throughput stays
                # the cap's and TTFT grows, so the search stops at the cap.
                return refused_probe(
                    layout,
                    batch_size,
                    f"running cap: at most {max_running} requests run at once per replica (KV "
                    "pool and max_num_seqs); more clients only queue",
                )
            running = batch_size if max_running is None else min(batch_size, max_running)
            left_gb = memory_left_gb(
                memo, (data.decode_shape(max(running, 1)), largest_prefill_shape(data, 1))
            )
            if max_running == 0 or left_gb < 0:
                return out_of_memory_probe(layout, batch_size, left_gb)
            if coupled(layout):
                clients = batch_size * layout.dp
                together = simulate_serving(
                    data,
                    clients,
                    memo,
                    policy,
                    dp=layout.dp,
                    num_requests=clients * requests_per_client,
                    window=window,
                    max_num_seqs=max_running,
                    coupled=True,
                    plans=plans,
                )
                return simulated_probe(data, layout, batch_size, left_gb, together, replicas=1)
            result = simulate_closed_loop(
                data,
                batch_size,
                memo,
                policy,
                num_requests=batch_size * requests_per_client,
                window=window,
                max_running=max_running,
                plans=plans,
            )
            return simulated_probe(data, layout, batch_size, left_gb, result)

        return evaluate, data.decode_shape(1)

    return run_layout_searches(
        "agg", data, deployment, layouts, serving_for, evaluate_for, "output", max_batch_size
    )
