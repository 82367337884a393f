"""Request parts shared by optimize, simulate and forward: the model, the device, the workload."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.core import limits
from app.core.scheduler import (
    DEFAULT_SCHEDULER,
    DEFAULT_SLACK_RATIO,
    MAX_NUM_SEQS_LIMIT,
    SCHEDULERS,
    MixedLatency,
    PrefillOrder,
)

Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
PositiveInt = Annotated[int, Field(strict=True, ge=1)]


class StrictModel(BaseModel):
    """Unknown fields are an error (a typo must not silently fall back to a default)."""

    model_config = ConfigDict(extra="forbid")


class InlineModel(StrictModel):
    """A model given by its Hugging Face ``config.json`` instead of a catalog name."""

    name: Name | None = Field(default=None, description="label used in results")
    config: dict[str, Any] = Field(description="the model's Hugging Face config.json content")


class CustomDevice(BaseModel):
    """A device given by its numbers; ``base`` names a built-in device that fills the rest.

    Field names are those of ``GET /v1/devices`` (for example ``hbm_capacity_gb``).
    """

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [{"base": "NVIDIA_H100_SXM_80G", "name": "H100_96G", "hbm_capacity_gb": 96}]
        },
    )

    name: Name
    base: Name | None = None


ModelRef = Annotated[
    Name | InlineModel,
    Field(
        description="catalog name / Hugging Face id (see GET /v1/models) or an inline config",
        examples=["Qwen/Qwen3-32B"],
    ),
]
DeviceRef = Annotated[
    Name | CustomDevice,
    Field(
        description="catalog device name (see GET /v1/devices) or a custom device",
        examples=["ATLAS_800_A2_376T_64G"],
    ),
]


if TYPE_CHECKING:
    SchedulerName = str
else:  # the registry's names, in its order (the schema's enum)
    SchedulerName = Literal[tuple(SCHEDULERS)]


class SchedulerOptions(StrictModel):
    """The step scheduler: the RFC's decode-first policy (default) or an engine's policy.

    ``slack_ratio`` / ``prefill_order`` belong to ``decode_first_with_slack``;
    ``max_num_seqs`` / ``mixed_latency`` to ``vllm``, ``sglang`` and ``sglang_mixed_chunk``.
    Options of another policy are rejected (422).
    """

    name: SchedulerName = DEFAULT_SCHEDULER
    slack_ratio: float | None = Field(
        default=None,
        ge=limits.MIN_SLACK_RATIO,
        le=limits.MAX_SLACK_RATIO,
        description=f"default {DEFAULT_SLACK_RATIO}",
    )
    prefill_order: PrefillOrder | None = Field(
        default=None,
        description="continue_first (default): a started prompt keeps prefilling (vLLM); "
        "fifo: chunk-major (msmodeling parity)",
    )
    max_num_seqs: int | None = Field(default=None, strict=True, ge=1, le=MAX_NUM_SEQS_LIMIT)
    mixed_latency: MixedLatency | None = Field(
        default=None,
        description="mixed prefill+decode step: overlapped (max, default), serial (sum) or one "
        "forward over the combined tokens (fused)",
    )


class LengthsMixin(StrictModel):
    input_length: int = Field(strict=True, ge=1, le=limits.MAX_INPUT_LENGTH, examples=[3500])
    prefix_cache_hit_rate: float = Field(default=0.0, ge=0.0, lt=1.0)
    max_batched_tokens: int = Field(
        strict=True,
        ge=1,
        le=limits.MAX_BATCHED_TOKENS,
        description="token budget of one engine step and the largest prefill chunk",
        examples=[8192],
    )


class DeploymentMixin(StrictModel):
    model: ModelRef
    device: DeviceRef
    quantize_linear_action: Name = Field(default="DISABLED", examples=["W8A8_DYNAMIC"])
    quantize_attention_action: Name = Field(default="DISABLED", examples=["INT8"])
    reserved_memory_gb: float | None = Field(
        default=None, ge=0.0, le=limits.MAX_RESERVED_MEMORY_GB, description="default: runner's"
    )


class WorkloadMixin(LengthsMixin):
    max_batched_tokens: int | None = Field(  # type: ignore[assignment]
        default=None,
        strict=True,
        ge=1,
        le=limits.MAX_BATCHED_TOKENS,
        description="token budget of one engine step and the largest prefill chunk; omitted: "
        "the engine default for the device (vLLM's 8192 on devices with >= 70 GiB other than "
        "the A100, 2048 elsewhere)",
        examples=[8192],
    )
    output_length: int = Field(strict=True, ge=1, le=limits.MAX_OUTPUT_LENGTH, examples=[1500])
    num_mtp_tokens: int = Field(default=0, strict=True, ge=0, le=limits.MAX_MTP_TOKENS)
    mtp_acceptance_rates: list[Annotated[float, Field(ge=0.0, le=1.0)]] = Field(
        default_factory=list, max_length=limits.MAX_MTP_TOKENS
    )
    scheduler: SchedulerOptions = Field(default_factory=SchedulerOptions)
    force_simulation: bool = Field(
        default=False,
        description="use the time simulation even when the prompt fits in one chunk",
    )
