"""Aggregated deployment: prefill and decode share every engine instance (RFC §3.1.4-3.1.5)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from app.core.chunking import OptimizerData
from app.core.latency import ForwardShape
from app.core.optimizer.common import (
    DEFAULT_MAX_BATCH_SIZE,
    Deployment,
    MemoLatency,
    OptimizeResult,
    Probe,
    ServingFactory,
    out_of_memory_probe,
    run_layout_searches,
)
from app.core.parallel import ParallelLayout
from app.core.scheduler import DecodeFirstWithSlack, Scheduler
from app.core.simulation import simulate


def decode_shape(data: OptimizerData, batch_size: int) -> ForwardShape:
    return ForwardShape(
        is_decode=True,
        concurrency=batch_size,
        query_len=data.decode_query_len,
        seq_len=data.decode_seq_len,
    )


def largest_prefill_shape(data: OptimizerData, batch_size: int) -> ForwardShape:
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


def limit_reason(data: OptimizerData, ttft_ms: float | None, tpot_ms: float | None) -> str | None:
    if data.ttft_limit_ms is not None and ttft_ms is not None and ttft_ms > data.ttft_limit_ms:
        return f"ttft_limit: {ttft_ms:.2f} ms > {data.ttft_limit_ms:g} ms"
    if data.tpot_limit_ms is not None and tpot_ms is not None and tpot_ms > data.tpot_limit_ms:
        return f"tpot_limit: {tpot_ms:.3f} ms > {data.tpot_limit_ms:g} ms"
    return None


def optimize_agg(
    data: OptimizerData,
    layouts: Sequence[ParallelLayout],
    serving_for: ServingFactory,
    deployment: Deployment,
    *,
    scheduler: Scheduler | None = None,
    force_simulation: bool = False,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
) -> OptimizeResult:
    """Best concurrency per layout under memory, TTFT and TPOT limits, ranked by throughput.

    Each data-parallel replica is simulated with its own ``batch_size`` requests and its own
    budget; totals multiply by ``dp`` (``concurrency = batch_size * dp``).
    """
    policy = scheduler if scheduler is not None else DecodeFirstWithSlack()
    plan = data.get_prefill_chunk_plan()

    def evaluate_for(
        layout: ParallelLayout, memo: MemoLatency
    ) -> tuple[Callable[[int], Probe], ForwardShape]:
        def evaluate(batch_size: int) -> Probe:
            left_gb = memory_left_gb(
                memo, (decode_shape(data, batch_size), largest_prefill_shape(data, batch_size))
            )
            if left_gb < 0:
                return out_of_memory_probe(layout, batch_size, left_gb)
            result = simulate(
                plan,
                batch_size,
                data.output_length,
                data.max_batched_tokens,
                memo,
                policy,
                input_length=data.input_length,
                num_mtp_tokens=data.num_mtp_tokens,
                force_simulation=force_simulation,
            )
            reason = limit_reason(data, result.ttft_ms, result.tpot_ms)
            return Probe(
                layout=layout,
                batch_size=batch_size,
                concurrency=batch_size * layout.dp,
                feasible=reason is None,
                reason=reason,
                ttft_ms=result.ttft_ms,
                tpot_ms=result.tpot_ms,
                throughput_tokens_s=result.output_throughput * layout.dp,
                request_throughput=result.request_throughput * layout.dp,
                memory_left_gb=left_gb,
                method=result.method,
            )

        return evaluate, decode_shape(data, 1)

    return run_layout_searches(
        "agg", data, deployment, layouts, serving_for, evaluate_for, "output", max_batch_size
    )
