"""Disaggregated (PD-separated) deployments: prefill-only and decode-only instances (RFC §3.1.6).

Prefill instances use the same chunk plan; for each chunk in order, waves of
``max(floor(B / chunk_query_len), 1)`` requests go over the instance's requests, and TTFT is the
mean completion time of each request's last chunk. Decode instances are unaffected by chunking:
TPOT is the decode step latency at the batch and throughput ``1000 * C / TPOT`` tokens/s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.core.chunking import require_int
from app.core.cost import ForwardShape, LatencyModel
from app.core.engine import (
    MS_PER_S,
    evaluate_shapes,
    prefill_shape,
    wave_completion_sum_ms,
    wave_split,
)
from app.core.errors import InvalidParameterError
from app.core.optimizer.agg import largest_prefill_shape, limit_reason, memory_left_gb
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
from app.core.spec import WorkloadSpec

CHUNK_WAVES = "chunk_waves"
DECODE_STEP = "decode_step"


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefillWavesResult:
    ttft_ms: float
    makespan_ms: float
    waves: int
    forward_evaluations: int


def prefill_chunk_waves(
    spec: WorkloadSpec,
    concurrency: int,
    latency: LatencyModel,
    *,
    serving_overhead_ms: float = 0.0,
) -> PrefillWavesResult:
    """Chunk-major prefill waves of one prefill instance over the spec's chunk plan (derived
    once, with the spec); TTFT from the last chunk's waves."""
    plan = spec.get_prefill_chunk_plan()
    max_batched_tokens = spec.max_batched_tokens
    require_int("concurrency", concurrency, 1, None)
    if not serving_overhead_ms >= 0:
        raise InvalidParameterError("serving_overhead_ms", serving_overhead_ms, "a number >= 0")
    shapes: list[ForwardShape] = []
    waves = []
    for chunk in plan:
        per_wave, full, rest = wave_split(chunk.query_len, concurrency, max_batched_tokens)
        full_shape = prefill_shape(per_wave, chunk.query_len, chunk.seq_len)
        rest_shape = prefill_shape(rest, chunk.query_len, chunk.seq_len)
        waves.append((per_wave, full, rest, full_shape, rest_shape))
        if full:
            shapes.append(full_shape)
        if rest:
            shapes.append(rest_shape)
    latencies = evaluate_shapes(shapes, latency)
    t_ms = 0.0
    for _, full, rest, full_shape, rest_shape in waves[:-1]:
        t_ms += full * (latencies[full_shape] if full else 0.0)
        t_ms += latencies[rest_shape] if rest else 0.0
    per_wave, full, rest, full_shape, rest_shape = waves[-1]
    lp = latencies[full_shape] if full else 0.0
    lr = latencies[rest_shape] if rest else 0.0
    # Full wave j (1..full) ends at t + j * lp; the remainder wave at t + full * lp + lr.
    completion_sum = wave_completion_sum_ms(t_ms * concurrency, per_wave, full, rest, lp, lr)
    makespan_ms = t_ms + full * lp + lr
    return PrefillWavesResult(
        ttft_ms=spec.reported_ttft_ms(completion_sum / concurrency + serving_overhead_ms),
        makespan_ms=makespan_ms,
        waves=sum(full + (1 if rest else 0) for _, full, rest, _, _ in waves),
        forward_evaluations=len(latencies),
    )


def optimize_disagg_prefill(
    data: WorkloadSpec,
    layouts: Sequence[ParallelLayout],
    serving_for: ServingFactory,
    deployment: Deployment,
    *,
    serving_overhead_ms: float = 0.0,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
) -> OptimizeResult:
    """Prefill instances: the most input tokens/s with TTFT within its limit."""

    def evaluate_for(
        layout: ParallelLayout, memo: MemoLatency
    ) -> tuple[Callable[[int], Probe], ForwardShape]:
        def evaluate(batch_size: int) -> Probe:
            left_gb = memory_left_gb(memo, (largest_prefill_shape(data, batch_size),))
            if left_gb < 0:
                return out_of_memory_probe(layout, batch_size, left_gb)
            waves = prefill_chunk_waves(
                data, batch_size, memo, serving_overhead_ms=serving_overhead_ms
            )
            reason = limit_reason(data, waves.ttft_ms, None)
            return Probe(
                layout=layout,
                batch_size=batch_size,
                concurrency=batch_size * layout.dp,
                feasible=reason is None,
                reason=reason,
                ttft_ms=waves.ttft_ms,
                tpot_ms=None,
                throughput_tokens_s=layout.dp
                * MS_PER_S
                * batch_size
                * data.input_length
                / waves.makespan_ms,
                request_throughput=layout.dp * MS_PER_S * batch_size / waves.makespan_ms,
                memory_left_gb=left_gb,
                method=CHUNK_WAVES,
            )

        return evaluate, largest_prefill_shape(data, 1)

    return run_layout_searches(
        "disagg_prefill",
        data,
        deployment,
        layouts,
        serving_for,
        evaluate_for,
        "input",
        max_batch_size,
    )


def optimize_disagg_decode(
    data: WorkloadSpec,
    layouts: Sequence[ParallelLayout],
    serving_for: ServingFactory,
    deployment: Deployment,
    *,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
) -> OptimizeResult:
    """Decode instances: the most output tokens/s with TPOT within its limit."""

    def evaluate_for(
        layout: ParallelLayout, memo: MemoLatency
    ) -> tuple[Callable[[int], Probe], ForwardShape]:
        def evaluate(batch_size: int) -> Probe:
            shape = data.decode_shape(batch_size)
            left_gb = memory_left_gb(memo, (shape,))
            if left_gb < 0:
                return out_of_memory_probe(layout, batch_size, left_gb)
            tpot_ms = memo.decode_ms(shape.concurrency, shape.query_len, shape.seq_len)
            reason = limit_reason(data, None, tpot_ms)
            per_s = MS_PER_S * batch_size / tpot_ms if tpot_ms > 0 else 0.0
            return Probe(
                layout=layout,
                batch_size=batch_size,
                concurrency=batch_size * layout.dp,
                feasible=reason is None,
                reason=reason,
                ttft_ms=None,
                tpot_ms=tpot_ms,
                throughput_tokens_s=layout.dp * per_s,
                request_throughput=layout.dp * per_s / data.output_length,
                memory_left_gb=left_gb,
                method=DECODE_STEP,
            )

        return evaluate, data.decode_shape(1)

    return run_layout_searches(
        "disagg_decode",
        data,
        deployment,
        layouts,
        serving_for,
        evaluate_for,
        "output",
        max_batch_size,
    )
