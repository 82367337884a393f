"""The scheduler interface (RFC §3.1.4): what a policy sees, decides and is asked.

A scheduler decides how many prefill and decode requests one engine step runs and how the
prefill and decode latencies of a mixed step combine. The simulation loop owns the clock and the
queues and contains no policy; the prefill queue order is a property of the policy too.

``decide`` must be a pure function of the state when ``stateless`` is true (the default): the loop
then fast-forwards runs of identical states with a single call. A scheduler with memory (a
scripted test double, an adaptive policy) sets ``stateless = False`` and is asked every step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Literal

PrefillOrder = Literal["continue_first", "fifo"]
PREFILL_ORDERS: tuple[PrefillOrder, ...] = ("continue_first", "fifo")
#: How a mixed step's latency follows from its prefill and decode parts: ``max`` (the RFC's
#: overlap), ``sum`` (the two forwards back to back) or ``fused`` (one forward over the
#: combined tokens, costed by the latency model as a ``MixedShape``).
MixedLatency = Literal["max", "sum", "fused"]
MIXED_LATENCIES: tuple[MixedLatency, ...] = ("max", "sum", "fused")

#: The RFC's default slack on the mixed-step token budget.
DEFAULT_SLACK_RATIO = 1.15
#: Largest accepted running-request cap.
MAX_NUM_SEQS_LIMIT = 1_000_000


@dataclass(frozen=True, slots=True)
class StepDecision:
    """Requests that run in one step: ``p_step`` prefill (one chunk each), ``d_step`` decode.

    ``prefill_tokens`` is the chunk each selected prefill request computes; ``None`` means the
    planned chunk (``chunk_query_len``). Engine policies that size chunks to the budget left
    after decode (vLLM, SGLang mixed chunk) set it, within ``[1, prefill_remaining]``.
    """

    p_step: int
    d_step: int
    prefill_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class SchedulerState:
    """What a scheduler sees before a step.

    ``chunk_query_len`` is the planned chunk of the front prefill requests
    (``min(max_batched_tokens, prefill_remaining)``; ``max_batched_tokens`` when none is
    pending) and ``prefill_remaining`` the tokens they still have to prefill (0 when none).
    """

    ready_decode: int
    pending_prefill: int
    chunk_query_len: int
    max_batched_tokens: int
    prefill_remaining: int = 0


class Scheduler(ABC):
    """Step policy: how many requests of each kind run, and how their latencies combine."""

    name: ClassVar[str] = "scheduler"
    #: ``True`` when ``decide`` depends on the state only (enables fast-forwarding).
    stateless: bool = True
    #: ``True`` when ``decide`` reads ``prefill_remaining`` (otherwise the loop may reuse a
    #: decision for states that differ only there).
    reads_prefill_remaining: bool = False
    #: Cap on requests running at once (prefill or decode), e.g. vLLM's ``max_num_seqs``.
    max_running: int | None = None
    #: Where a request that finished a non-final chunk goes: the front of the prefill queue
    #: (``continue_first``, vLLM-like) or the back (``fifo``, msmodeling parity).
    prefill_order: PrefillOrder = "continue_first"
    #: How mixed steps are costed. With ``fused`` the simulation asks the latency model for
    #: the mixed forward itself and ``step_latency`` only sees one-sided steps.
    mixed_latency: MixedLatency = "max"

    @abstractmethod
    def decide(self, state: SchedulerState) -> StepDecision: ...

    @abstractmethod
    def step_latency(self, prefill_latency: float, decode_latency: float) -> float: ...

    def describe(self) -> dict[str, object]:
        """Parameters echoed in results."""
        return {
            "name": self.name,
            "prefill_order": self.prefill_order,
            "mixed_latency": self.mixed_latency,
        }

    def stable_down_to(self, state: SchedulerState, decision: StepDecision) -> int | None:
        """The smallest ``prefill_remaining`` for which ``decide`` still returns ``decision``
        (every other field of ``state`` unchanged, and every value in between), or ``None``
        when unknown. Lets the loop take a request's equal chunks in one move when the
        decision reads ``prefill_remaining``; without it the loop asks at every chunk."""
        return None
