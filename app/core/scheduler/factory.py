"""Schedulers by name (the wire's and the CLI's names), the default, and the default budget."""

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
