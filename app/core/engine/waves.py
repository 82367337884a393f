"""Closed-form prefill waves (RFC §3.1.4 compatibility, DIGEST "Single chunk").

A chunk of ``q`` tokens goes over ``C`` requests in waves of ``max(floor(B / q), 1)``
requests: ``full`` full waves then a remainder wave. The aggregated closed form (a one-chunk
prompt, then ``O`` decode steps of the whole batch) and the disaggregated prefill instance
(:func:`~app.core.optimizer.prefill_chunk_waves`, chunk after chunk) share the wave arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from app.core.cost import AnyShape, ForwardShape
from app.core.engine.plan import CLOSED_FORM_WAVES, SimulationResult, per_s, prefill_shape
from app.core.errors import InvalidParameterError
from app.core.spec import WorkloadSpec


def wave_split(
    chunk_query_len: int, concurrency: int, max_batched_tokens: int
) -> tuple[int, int, int]:
    """``(requests per wave, full waves, requests in the remainder wave)``."""
    per_wave = max(max_batched_tokens // chunk_query_len, 1)
    return per_wave, concurrency // per_wave, concurrency % per_wave


def wave_completion_sum_ms(
    start_sum_ms: float, per_wave: int, full: int, rest: int, lp_ms: float, lr_ms: float
) -> float:
    """Sum over requests of when their wave ends: full wave ``j`` (1..full) ends at
    ``j * lp``, the remainder wave at ``full * lp + lr`` (after ``start_sum_ms``, the sum of
    the requests' start times)."""
    completion_sum = start_sum_ms + per_wave * lp_ms * full * (full + 1) / 2
    completion_sum += rest * (full * lp_ms + lr_ms)
    return completion_sum


@dataclass(frozen=True, slots=True, kw_only=True)
class WavesPlan:
    """Shapes of the closed-form path: full prefill waves, the remainder wave, one decode."""

    spec: WorkloadSpec
    concurrency: int
    per_wave: int
    full_waves: int
    remainder: int

    @property
    def decode(self) -> ForwardShape:
        return self.spec.decode_shape(self.concurrency)

    def wave_shape(self, requests: int) -> ForwardShape:
        e = self.spec.effective_input_length
        return prefill_shape(requests, e, e)

    @property
    def shapes(self) -> tuple[ForwardShape, ...]:
        shapes = [self.decode]
        if self.full_waves:
            shapes.append(self.wave_shape(self.per_wave))
        if self.remainder:
            shapes.append(self.wave_shape(self.remainder))
        return tuple(sorted(set(shapes)))


def plan_waves(spec: WorkloadSpec, concurrency: int) -> WavesPlan:
    """The closed-form plan of ``concurrency`` requests; the prompt must fit in one chunk."""
    if spec.prefill_num_chunks != 1:
        raise InvalidParameterError(
            "effective_input_length",
            spec.effective_input_length,
            f"<= max_batched_tokens={spec.max_batched_tokens} for the closed-form waves (K == 1)",
        )
    per_wave, full, rest = wave_split(
        spec.effective_input_length, concurrency, spec.max_batched_tokens
    )
    return WavesPlan(
        spec=spec, concurrency=concurrency, per_wave=per_wave, full_waves=full, remainder=rest
    )


def replay_waves(plan: WavesPlan, latencies: Mapping[AnyShape, float]) -> SimulationResult:
    """The RFC's compatibility formulas (DIGEST "Single chunk").

    TTFT is the mean wave completion; every request then decodes ``O`` steps of the whole
    batch (the closed form charges a decode step for the first token too, which the time
    simulation does not: its first token comes with the last prefill chunk).
    """
    c, n, r = plan.concurrency, plan.full_waves, plan.remainder
    lp = latencies[plan.wave_shape(plan.per_wave)] if n else 0.0
    lr = latencies[plan.wave_shape(r)] if r else 0.0
    ld = latencies[plan.decode]
    output_length = plan.spec.output_length
    ttft_ms = wave_completion_sum_ms(0.0, plan.per_wave, n, r, lp, lr) / c
    e2e_ms = ttft_ms + ld * output_length
    return SimulationResult(
        method=CLOSED_FORM_WAVES,
        concurrency=c,
        ttft_ms=ttft_ms,
        tpot_ms=e2e_ms / output_length,
        makespan_ms=e2e_ms,
        throughput_tokens_s=per_s(output_length * c, e2e_ms),
        request_throughput=per_s(c, e2e_ms),
        prefill_num_chunks=1,
        steps=n + (1 if r else 0) + output_length,
        forward_evaluations=len(latencies),
    )
