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


#: The options each kind of policy takes (:func:`make_scheduler` rejects the others).
_DECODE_FIRST_OPTIONS = ("slack_ratio", "prefill_order")
_ENGINE_OPTIONS = ("max_num_seqs", "mixed_latency")


def _own_options(name: str) -> tuple[str, ...]:
    return _DECODE_FIRST_OPTIONS if name == DecodeFirstWithSlack.name else _ENGINE_OPTIONS


def scheduler_options(scheduler: Scheduler) -> dict[str, object]:
    """The name and the options that rebuild ``scheduler`` with :func:`make_scheduler`, each
    with the value it runs with (defaults applied): what an answer echoes as its scheduler."""
    described = scheduler.describe()
    return {"name": scheduler.name} | {
        option: described[option] for option in _own_options(scheduler.name)
    }


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
    own = _own_options(name)
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
