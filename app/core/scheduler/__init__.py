"""Step schedulers: the RFC's decode-first policy and the engines' policies.

- :mod:`~app.core.scheduler.base`: ``Scheduler``, ``SchedulerState``, ``StepDecision``;
- :mod:`~app.core.scheduler.decode_first`: the RFC's ``DecodeFirstWithSlack``;
- :mod:`~app.core.scheduler.engines`: vLLM, SGLang and SGLang mixed-chunk policies;
- :mod:`~app.core.scheduler.factory`: policies by name and the default policy.
"""

from app.core.scheduler.base import (
    DEFAULT_SLACK_RATIO,
    MAX_NUM_SEQS_LIMIT,
    MIXED_LATENCIES,
    PREFILL_ORDERS,
    MixedLatency,
    PrefillOrder,
    Scheduler,
    SchedulerState,
    StepDecision,
)
from app.core.scheduler.decode_first import DecodeFirstWithSlack
from app.core.scheduler.engines import (
    EnginePolicy,
    SglangMixedChunkScheduler,
    SglangScheduler,
    VllmScheduler,
)
from app.core.scheduler.factory import (
    DEFAULT_SCHEDULER,
    SCHEDULERS,
    default_scheduler,
    make_scheduler,
    scheduler_options,
)

__all__ = [
    "DEFAULT_SCHEDULER",
    "DEFAULT_SLACK_RATIO",
    "MAX_NUM_SEQS_LIMIT",
    "MIXED_LATENCIES",
    "PREFILL_ORDERS",
    "SCHEDULERS",
    "DecodeFirstWithSlack",
    "EnginePolicy",
    "MixedLatency",
    "PrefillOrder",
    "Scheduler",
    "SchedulerState",
    "SglangMixedChunkScheduler",
    "SglangScheduler",
    "StepDecision",
    "VllmScheduler",
    "default_scheduler",
    "make_scheduler",
    "scheduler_options",
]
