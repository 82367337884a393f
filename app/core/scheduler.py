"""Pluggable step schedulers (RFC §3.1.4).

A scheduler decides how many prefill and decode requests one engine step runs and how the
prefill and decode latencies of a mixed step combine. The simulation loop owns the clock and the
queues and contains no policy; the prefill queue order is a property of the policy too.

``decide`` must be a pure function of the state when ``stateless`` is true (the default): the loop
then fast-forwards runs of identical states with a single call. A scheduler with memory (a
scripted test double, an adaptive policy) sets ``stateless = False`` and is asked every step.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Literal

from app.core.errors import InvalidParameterError

PrefillOrder = Literal["continue_first", "fifo"]
PREFILL_ORDERS: tuple[PrefillOrder, ...] = ("continue_first", "fifo")

#: The RFC's default slack on the mixed-step token budget.
DEFAULT_SLACK_RATIO = 1.15


@dataclass(frozen=True, slots=True)
class StepDecision:
    """Requests that run in one step: ``p_step`` prefill (one chunk each), ``d_step`` decode."""

    p_step: int
    d_step: int


@dataclass(frozen=True, slots=True)
class SchedulerState:
    """What a scheduler sees before a step."""

    ready_decode: int
    pending_prefill: int
    chunk_query_len: int
    max_batched_tokens: int


class Scheduler(ABC):
    """Step policy: how many requests of each kind run, and how their latencies combine."""

    name: ClassVar[str] = "scheduler"
    #: ``True`` when ``decide`` depends on the state only (enables fast-forwarding).
    stateless: bool = True
    #: Where a request that finished a non-final chunk goes: the front of the prefill queue
    #: (``continue_first``, vLLM-like) or the back (``fifo``, msmodeling parity).
    prefill_order: PrefillOrder = "continue_first"

    @abstractmethod
    def decide(self, state: SchedulerState) -> StepDecision: ...

    @abstractmethod
    def step_latency(self, prefill_latency: float, decode_latency: float) -> float: ...

    def describe(self) -> dict[str, object]:
        """Parameters echoed in results."""
        return {"name": self.name, "prefill_order": self.prefill_order}


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
            or not 1.0 <= slack_ratio <= 4.0
        ):
            raise InvalidParameterError("slack_ratio", slack_ratio, "a number in [1, 4]")
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
