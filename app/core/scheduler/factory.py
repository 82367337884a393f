"""Schedulers by name (the wire's and the CLI's names) and the default policy."""

from __future__ import annotations

from app.core.errors import InvalidParameterError, UnknownSchedulerError
from app.core.scheduler.base import DEFAULT_SLACK_RATIO, MixedLatency, PrefillOrder, Scheduler
from app.core.scheduler.decode_first import DecodeFirstWithSlack
from app.core.scheduler.engines import (
    EnginePolicy,
    SglangMixedChunkScheduler,
    SglangScheduler,
    VllmScheduler,
)

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
    assert issubclass(engine, EnginePolicy)
    return engine(max_num_seqs=max_num_seqs, mixed_latency=mixed_latency or "max")
