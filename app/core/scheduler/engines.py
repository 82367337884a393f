"""The engines' policies: vLLM (V1) chunked prefill, SGLang's default and its mixed chunk."""

from __future__ import annotations

from typing import ClassVar

from app.core.chunking import require_int
from app.core.errors import InvalidParameterError
from app.core.scheduler.base import (
    MAX_NUM_SEQS_LIMIT,
    MIXED_LATENCIES,
    MixedLatency,
    Scheduler,
    SchedulerState,
    StepDecision,
)


class EnginePolicy(Scheduler):
    """Shared parameters of the engine policies: a running cap and the mixed-step cost.

    ``mixed_latency``: ``max`` (the RFC's overlap of the prefill and decode forwards), ``sum``
    (they run one after the other) or ``fused`` (one forward over the combined tokens, as the
    engines run it; the simulation costs that step with the latency model's ``mixed_ms``).
    """

    reads_prefill_remaining = True

    def __init__(
        self,
        *,
        max_num_seqs: int | None = None,
        mixed_latency: MixedLatency = "max",
    ) -> None:
        if max_num_seqs is not None:
            require_int("max_num_seqs", max_num_seqs, 1, MAX_NUM_SEQS_LIMIT)
        if mixed_latency not in MIXED_LATENCIES:
            raise InvalidParameterError(
                "mixed_latency", mixed_latency, f"one of {', '.join(MIXED_LATENCIES)}"
            )
        self.max_running = max_num_seqs
        self.mixed_latency = mixed_latency

    def step_latency(self, prefill_latency: float, decode_latency: float) -> float:
        if self.mixed_latency == "sum":
            return prefill_latency + decode_latency
        # ``max``, and ``fused`` for one-sided steps (one of the two latencies is 0).
        return max(prefill_latency, decode_latency)

    def describe(self) -> dict[str, object]:
        return {**Scheduler.describe(self), "max_num_seqs": self.max_running}

    def stable_down_to(self, state: SchedulerState, decision: StepDecision) -> int | None:
        # A chunk cut by the budget (not by what is left) stays the same size, and so does
        # everything else ``_fill`` decides, while at least one such chunk is left.
        tokens = decision.prefill_tokens
        if decision.p_step and tokens is not None and tokens < state.prefill_remaining:
            return tokens
        return None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(max_num_seqs={self.max_running}, "
            f"mixed_latency={self.mixed_latency!r})"
        )


def _fill(state: SchedulerState, budget: int, d_step: int) -> StepDecision:
    """Prefill as many front requests as fit in ``budget`` tokens, each chunk cut to fit."""
    if not state.pending_prefill or budget <= 0:
        return StepDecision(0, d_step)
    tokens = min(state.prefill_remaining, budget, state.max_batched_tokens)
    return StepDecision(min(state.pending_prefill, budget // tokens), d_step, tokens)


class VllmScheduler(EnginePolicy):
    """vLLM (V1) chunked prefill: running decodes first, one token each; the budget left
    (``max_batched_tokens - decodes``) goes to prefill, the running request's chunk first
    (``continue_first``), each chunk cut to what is left. ``max_num_seqs`` caps running
    requests. Requests that would need a slice of a chunk beside full ones wait a step."""

    name: ClassVar[str] = "vllm"

    def decide(self, state: SchedulerState) -> StepDecision:
        d_step = min(state.ready_decode, state.max_batched_tokens)
        return _fill(state, state.max_batched_tokens - d_step, d_step)


class SglangScheduler(EnginePolicy):
    """SGLang's default: prefill first. While requests wait to prefill, a prefill batch of up
    to ``max_batched_tokens`` (its ``chunked_prefill_size``) runs and decode pauses; then
    every running request decodes."""

    name: ClassVar[str] = "sglang"

    def decide(self, state: SchedulerState) -> StepDecision:
        if state.pending_prefill:
            return _fill(state, state.max_batched_tokens, 0)
        return StepDecision(0, state.ready_decode)


class SglangMixedChunkScheduler(EnginePolicy):
    """SGLang with ``--enable-mixed-chunk``: prefill first, with the running decodes folded
    into the prefill batch and subtracted from its token budget."""

    name: ClassVar[str] = "sglang_mixed_chunk"

    def decide(self, state: SchedulerState) -> StepDecision:
        d_step = state.ready_decode
        return _fill(state, state.max_batched_tokens - d_step, d_step)
