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

from app.core.chunking import require_int
from app.core.errors import InvalidParameterError, UnknownSchedulerError

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


class _EnginePolicy(Scheduler):
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


class VllmScheduler(_EnginePolicy):
    """vLLM (V1) chunked prefill: running decodes first, one token each; the budget left
    (``max_batched_tokens - decodes``) goes to prefill, the running request's chunk first
    (``continue_first``), each chunk cut to what is left. ``max_num_seqs`` caps running
    requests. Requests that would need a slice of a chunk beside full ones wait a step."""

    name: ClassVar[str] = "vllm"

    def decide(self, state: SchedulerState) -> StepDecision:
        d_step = min(state.ready_decode, state.max_batched_tokens)
        return _fill(state, state.max_batched_tokens - d_step, d_step)


class SglangScheduler(_EnginePolicy):
    """SGLang's default: prefill first. While requests wait to prefill, a prefill batch of up
    to ``max_batched_tokens`` (its ``chunked_prefill_size``) runs and decode pauses; then
    every running request decodes."""

    name: ClassVar[str] = "sglang"

    def decide(self, state: SchedulerState) -> StepDecision:
        if state.pending_prefill:
            return _fill(state, state.max_batched_tokens, 0)
        return StepDecision(0, state.ready_decode)


class SglangMixedChunkScheduler(_EnginePolicy):
    """SGLang with ``--enable-mixed-chunk``: prefill first, with the running decodes folded
    into the prefill batch and subtracted from its token budget."""

    name: ClassVar[str] = "sglang_mixed_chunk"

    def decide(self, state: SchedulerState) -> StepDecision:
        d_step = state.ready_decode
        return _fill(state, state.max_batched_tokens - d_step, d_step)


SCHEDULERS: dict[str, type[Scheduler]] = {
    DecodeFirstWithSlack.name: DecodeFirstWithSlack,
    VllmScheduler.name: VllmScheduler,
    SglangScheduler.name: SglangScheduler,
    SglangMixedChunkScheduler.name: SglangMixedChunkScheduler,
}
DEFAULT_SCHEDULER = DecodeFirstWithSlack.name


def default_scheduler() -> Scheduler:
    """The policy a simulation or search uses when none is given: the RFC's decode-first."""
    return DecodeFirstWithSlack()


def make_scheduler(
    name: str = DEFAULT_SCHEDULER,
    *,
    max_num_seqs: int | None = None,
    mixed_latency: MixedLatency | None = None,
    slack_ratio: float | None = None,
    prefill_order: PrefillOrder | None = None,
) -> Scheduler:
    """A scheduler by name with its options; options a policy does not have are rejected."""
    if name not in SCHEDULERS:
        raise UnknownSchedulerError(name, SCHEDULERS)
    given: dict[str, object] = {
        "max_num_seqs": max_num_seqs,
        "mixed_latency": mixed_latency,
        "slack_ratio": slack_ratio,
        "prefill_order": prefill_order,
    }
    own = (
        ("slack_ratio", "prefill_order")
        if name == DecodeFirstWithSlack.name
        else (
            "max_num_seqs",
            "mixed_latency",
        )
    )
    for option, value in given.items():
        if value is not None and option not in own:
            raise InvalidParameterError(option, value, f"omitted for scheduler {name!r}")
    if name == DecodeFirstWithSlack.name:
        return DecodeFirstWithSlack(
            DEFAULT_SLACK_RATIO if slack_ratio is None else slack_ratio,
            "continue_first" if prefill_order is None else prefill_order,
        )
    engine = SCHEDULERS[name]
    assert issubclass(engine, _EnginePolicy)
    return engine(max_num_seqs=max_num_seqs, mixed_latency=mixed_latency or "max")


#: vLLM's OpenAI-server default token budget (``max_num_batched_tokens``): 8192 on devices with
#: at least 70 GiB of memory other than the A100 (where a larger budget lowers throughput),
#: 2048 elsewhere (``EngineArgs.get_batch_defaults`` in vllm/engine/arg_utils.py).
LARGE_DEVICE_MEMORY_BYTES = 70 * 2**30
LARGE_DEVICE_BATCHED_TOKENS = 8192
SMALL_DEVICE_BATCHED_TOKENS = 2048
BYTES_PER_GB = 1e9


def default_max_batched_tokens(hbm_capacity_gb: float, device_name: str) -> int:
    """The engine default budget when a request leaves ``max_batched_tokens`` out."""
    large = hbm_capacity_gb * BYTES_PER_GB >= LARGE_DEVICE_MEMORY_BYTES
    if large and "a100" not in device_name.lower():
        return LARGE_DEVICE_BATCHED_TOKENS
    return SMALL_DEVICE_BATCHED_TOKENS
