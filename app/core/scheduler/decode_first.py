"""The RFC's default policy: decode first, prefill fills the slack of the token budget."""

from __future__ import annotations

import math
from typing import ClassVar

from app.core import limits
from app.core.errors import InvalidParameterError
from app.core.scheduler.base import (
    DEFAULT_SLACK_RATIO,
    PREFILL_ORDERS,
    PrefillOrder,
    Scheduler,
    SchedulerState,
    StepDecision,
)


class DecodeFirstWithSlack(Scheduler):
    """The RFC default: decode first, prefill fills ``floor(B * slack) - decode`` tokens.

    ``step_latency`` is ``max(prefill, decode)``: the two overlap within a mixed step.
    """

    name: ClassVar[str] = "decode_first_with_slack"

    def __init__(
        self,
        slack_ratio: float = DEFAULT_SLACK_RATIO,
        prefill_order: PrefillOrder = "continue_first",
    ) -> None:
        if (
            not isinstance(slack_ratio, int | float)
            or isinstance(slack_ratio, bool)
            or not math.isfinite(slack_ratio)
            or not limits.MIN_SLACK_RATIO <= slack_ratio <= limits.MAX_SLACK_RATIO
        ):
            raise InvalidParameterError(
                "slack_ratio",
                slack_ratio,
                f"a number in [{limits.MIN_SLACK_RATIO:g}, {limits.MAX_SLACK_RATIO:g}]",
            )
        if prefill_order not in PREFILL_ORDERS:
            raise InvalidParameterError(
                "prefill_order", prefill_order, f"one of {', '.join(PREFILL_ORDERS)}"
            )
        self.slack_ratio = float(slack_ratio)
        self.prefill_order = prefill_order

    def decide(self, state: SchedulerState) -> StepDecision:
        limit = math.floor(state.max_batched_tokens * self.slack_ratio)
        d_step = min(state.ready_decode, state.max_batched_tokens)
        p_step = max(0, min(state.pending_prefill, (limit - d_step) // state.chunk_query_len))
        return StepDecision(p_step=p_step, d_step=d_step)

    def step_latency(self, prefill_latency: float, decode_latency: float) -> float:
        return max(prefill_latency, decode_latency)

    def describe(self) -> dict[str, object]:
        return {**Scheduler.describe(self), "slack_ratio": self.slack_ratio}

    def __repr__(self) -> str:
        return (
            f"DecodeFirstWithSlack(slack_ratio={self.slack_ratio}, "
            f"prefill_order={self.prefill_order!r})"
        )
