"""Step schedulers: the RFC's decode-first policy and the engines' policies."""

from app.core.scheduler.policies import (
    MIXED_LATENCIES,
    SCHEDULERS,
    SMALL_DEVICE_BATCHED_TOKENS,
    DecodeFirstWithSlack,
    MixedLatency,
    Scheduler,
    SchedulerState,
    StepDecision,
    default_max_batched_tokens,
    default_scheduler,
    make_scheduler,
)

__all__ = [
    "MIXED_LATENCIES",
    "SCHEDULERS",
    "SMALL_DEVICE_BATCHED_TOKENS",
    "DecodeFirstWithSlack",
    "MixedLatency",
    "Scheduler",
    "SchedulerState",
    "StepDecision",
    "default_max_batched_tokens",
    "default_scheduler",
    "make_scheduler",
]
