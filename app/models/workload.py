"""Request parts shared by optimize, simulate and forward: the model, the device, the workload."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    model_serializer,
)

from app.core import limits
from app.core.profiles import (
    DEFAULT_ENGINE,
    KV_CACHE_DTYPES,
    MXFP4_ACTIVATIONS,
    MXFP4_MOE_KERNELS,
    NPU_GRAPH_MODES,
    OVERRIDE_BOUNDS,
    PROFILES,
    RFC_ENGINE,
)
from app.core.scheduler import (
    DEFAULT_SCHEDULER,
    DEFAULT_SLACK_RATIO,
    MAX_NUM_SEQS_LIMIT,
    SCHEDULERS,
    MixedLatency,
    PrefillOrder,
)
from app.core.spec import STREAM_FIRST_TOKEN_RULES
from app.models import texts

Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
PositiveInt = Annotated[int, Field(strict=True, ge=1)]


class StrictModel(BaseModel):
    """Unknown fields are an error (a typo must not silently fall back to a default), and so is
    a value of another JSON type: ``false`` is not a number, ``0`` not a boolean, ``"0.1"`` not
    a number (strict mode; an integer is still a valid number)."""

    model_config = ConfigDict(extra="forbid", strict=True)


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

    name: Name = Field(description="the device's name in results")
    base: Name | None = Field(
        default=None,
        description="a built-in device (GET /v1/devices) whose numbers fill every field not "
        "given (omitted: give them all)",
    )


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
    EngineName = str
    KvCacheDtypeName = str
    Mxfp4ActivationName = str
    Mxfp4MoeKernelName = str
    NpuGraphModeName = str
    StreamFirstTokenName = str
else:  # the registries' names, in their order (the schema's enums)
    SchedulerName = Literal[tuple(SCHEDULERS)]
    EngineName = Literal[tuple(PROFILES)]
    KvCacheDtypeName = Literal[KV_CACHE_DTYPES]
    Mxfp4ActivationName = Literal[MXFP4_ACTIVATIONS]
    Mxfp4MoeKernelName = Literal[MXFP4_MOE_KERNELS]
    NpuGraphModeName = Literal[NPU_GRAPH_MODES]
    StreamFirstTokenName = Literal[STREAM_FIRST_TOKEN_RULES]


def _bounded(name: str, kind: type, description: str) -> Any:
    low, high = OVERRIDE_BOUNDS[name]
    if kind is int:
        return Field(default=None, strict=True, ge=int(low), le=int(high), description=description)
    return Field(default=None, ge=low, le=high, allow_inf_nan=False, description=description)


class EngineOptions(StrictModel):
    """Values of the engine profile to override (omitted: the profile's; see ``engine`` in the
    response for every value used and ``docs/engine_defaults.md`` for their sources)."""

    max_batched_tokens: int | None = _bounded(
        "max_batched_tokens",
        int,
        "the engine's token budget default (the request's own max_batched_tokens wins)",
    )
    max_num_seqs: int | None = _bounded(
        "max_num_seqs",
        int,
        "requests one replica runs at once (vLLM max_num_seqs, TensorRT-LLM max_batch_size)",
    )
    memory_fraction: float | None = _bounded(
        "memory_fraction",
        float,
        "a fraction of device memory: vllm: gpu_memory_utilization (of total memory); sglang: "
        "mem_fraction_static; trtllm: free_gpu_memory_fraction (of the memory left)",
    )
    runtime_memory_gb: float | None = _bounded(
        "runtime_memory_gb",
        float,
        "memory per device the engine process holds outside weights, activations and KV "
        f"blocks (CUDA context, workspaces, graphs), {texts.GB}",
    )
    cuda_graph_max_batch: int | None = _bounded(
        "cuda_graph_max_batch", int, "largest decode batch run as a captured graph (0: none)"
    )
    step_host_ms: float | None = _bounded(
        "step_host_ms",
        float,
        "host time of one engine iteration, ms (hidden behind the forward with overlap_scheduling)",
    )
    step_sync_ms: float | None = _bounded(
        "step_sync_ms", float, "host time per iteration the GPU always waits for, ms"
    )
    request_frontend_ms: float | None = _bounded(
        "request_frontend_ms", float, "time per request outside the engine, ms, added to TTFT"
    )
    frontend_us_per_token: float | None = _bounded(
        "frontend_us_per_token",
        float,
        "front-end time per prompt token (tokenizing the prompt), microseconds, added to TTFT",
    )
    resubmit_steps: int | None = _bounded(
        "resubmit_steps",
        int,
        "closed loops: steps between a request's finish and its successor reaching the "
        "scheduler (2: async or overlap scheduling, 1: a scheduler that forms each step at the "
        "end of the one before, 0: at once)",
    )
    arrival_spread: float | None = _bounded(
        "arrival_spread",
        float,
        "closed loops: share of the requests finishing at one step's end whose next requests "
        "reach the engine a step later (0: clients in lock step)",
    )
    client_turnaround: bool | None = Field(
        default=None,
        description="closed loops: a client's next request reaches the engine after the step "
        "that began when its last one finished, and an idle engine starts on the first request "
        "alone (false: every re-submission makes the next step, clients in lock step)",
    )
    scheduler_recv_interval: int | None = _bounded(
        "scheduler_recv_interval",
        int,
        "SGLang --scheduler-recv-interval: new requests are received once per that many decode "
        "iterations (at once after a prefill iteration or when idle; 1: every iteration)",
    )
    stream_interval: int | None = _bounded(
        "stream_interval",
        int,
        "--stream-interval: a streaming client receives tokens every that many tokens (1: each)",
    )
    eager_layer_host_ms: float | None = _bounded(
        "eager_layer_host_ms",
        float,
        "host time per model layer of a forward run without a captured graph (prefill and "
        "mixed steps, decode batches above the captured sizes), ms; the step takes the longer "
        "of it and the device time when the engine overlaps scheduling",
    )
    batch_wait_iters: int | None = _bounded(
        "batch_wait_iters",
        int,
        "TensorRT-LLM batch_wait_timeout_iters: new requests wait while decodes run, up to that "
        "many iterations (with batch_wait_max_tokens_ratio; either at 0: no wait)",
    )
    batch_wait_max_tokens_ratio: float | None = _bounded(
        "batch_wait_max_tokens_ratio",
        float,
        "TensorRT-LLM batch_wait_max_tokens_ratio: waiting requests are scheduled once their "
        "prompts and the running decodes reach this share of the token budget",
    )
    redundant_experts: int | None = _bounded(
        "redundant_experts",
        int,
        "SGLang --ep-num-redundant-experts: MoE expert slots beyond the routed experts, each a "
        "replica of one; every expert-parallel rank holds (experts + redundant_experts) / "
        "ep_size experts' weights (must divide evenly) and the routed tokens spread over every "
        "slot (0: none)",
    )
    stream_first_token: StreamFirstTokenName | None = Field(
        default=None,
        description="when the first streamed chunk leaves under stream_interval > 1: immediate "
        "(with the first token: SGLang 0.4.10 to 0.5.10, vLLM, TensorRT-LLM) or interval (with the "
        "stream_interval-th token: SGLang 0.4.6)",
    )
    kv_cache_dtype: KvCacheDtypeName | None = Field(
        default=None,
        description="auto: the model's 16-bit KV cache; fp8: FP8 KV for FP8/FP4 "
        "checkpoints (when quantize_attention_action is not given)",
    )
    overlap_scheduling: bool | None = Field(
        default=None, description="the host prepares the next iteration while the GPU runs"
    )
    mxfp4_activation: Mxfp4ActivationName | None = Field(
        default=None,
        description="activations of MXFP4 GEMMs: fp4 the device's FP4 path; fp8 MXFP8 on a "
        "block-scaled FP4 matrix unit (BF16 on a device without one); bf16 weights dequantized "
        "to BF16",
    )
    mxfp4_moe_kernel: Mxfp4MoeKernelName | None = Field(
        default=None,
        description="kernel of MXFP4 MoE experts: default the engine's choice for the device; "
        "marlin Marlin with BF16 activations (vLLM's VLLM_MXFP4_USE_MARLIN=1)",
    )
    npu_graph_mode: NpuGraphModeName | None = Field(
        default=None,
        description="vllm on an Ascend NPU: vLLM-Ascend's cudagraph_mode (full_and_piecewise, "
        "the default; piecewise, the default before v0.21; full_decode_only; eager, "
        "--enforce-eager: every operator dispatched from the host), which sets the host time "
        "per layer or per operator of every step; refused on other devices and engines",
    )


class SchedulerOptions(StrictModel):
    """The step scheduler: the RFC's decode-first policy (default) or an engine's policy.

    ``slack_ratio`` / ``prefill_order`` belong to ``decode_first_with_slack``;
    ``max_num_seqs`` / ``mixed_latency`` to ``vllm``, ``sglang`` and ``sglang_mixed_chunk``.
    Options of another policy are rejected (422).
    """

    name: SchedulerName = Field(
        default=DEFAULT_SCHEDULER,
        description=f"the step policy: {DEFAULT_SCHEDULER} (the RFC's) or an engine's "
        f"({', '.join(n for n in SCHEDULERS if n != DEFAULT_SCHEDULER)})",
    )
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
    max_num_seqs: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=MAX_NUM_SEQS_LIMIT,
        description="the engine policies: requests one replica runs at once (omitted: no cap "
        "of the policy's own)",
    )
    mixed_latency: MixedLatency | None = Field(
        default=None,
        description="mixed prefill+decode step: overlapped (max, default), serial (sum) or one "
        "forward over the combined tokens (fused)",
    )


class LengthsMixin(StrictModel):
    input_length: int = Field(
        strict=True,
        ge=1,
        le=limits.MAX_INPUT_LENGTH,
        description="prompt tokens per request",
        examples=[3500],
    )
    prefix_cache_hit_rate: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="fraction in [0, 1) of each prompt already in the prefix cache: "
        "floor(input_length x rate) tokens are not prefilled",
    )
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
    quantize_linear_action: Name | None = Field(
        default=None,
        description="linear-layer quantization, one of GET /v1/models' quantize_linear_actions "
        "(DISABLED: 16-bit weights and GEMMs); null or omitted: derived, the engine profile's "
        "(msmodeling: W8A8_DYNAMIC), else DISABLED (the answer's input shows the value used)",
        examples=["W8A8_DYNAMIC"],
    )
    quantize_attention_action: Name | None = Field(
        default=None,
        description="KV-cache / attention quantization, one of GET /v1/models' "
        "quantize_attention_actions (DISABLED: 16-bit); null or omitted: derived, the engine "
        "profile's kv_cache_dtype rule (the answer's input shows the value used)",
        examples=["INT8"],
    )
    reserved_memory_gb: float | None = Field(
        default=None,
        ge=0.0,
        le=limits.MAX_RESERVED_MEMORY_GB,
        description=f"memory held back per device (runtime, graphs, fragmentation), {texts.GB}; "
        "default: the engine profile's reserve",
    )


#: One parallel size (tp, dp, ep, pp of a layout): the bound every request shares.
ParallelSize = Annotated[int, Field(strict=True, ge=1, le=limits.MAX_PARALLEL_SIZE)]

#: The id of a stored calibration profile (``cal-`` and 32 random hex digits, 128 bits).
CalibrationId = Annotated[str, StringConstraints(pattern=r"^cal-[0-9a-f]{32}$")]


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
    output_length: int = Field(
        strict=True,
        ge=1,
        le=limits.MAX_OUTPUT_LENGTH,
        description="output tokens per request",
        examples=[1500],
    )
    length_range_ratio: float = Field(
        default=limits.DEFAULT_LENGTH_RANGE_RATIO,
        gt=limits.MIN_LENGTH_RANGE_RATIO_EXCLUSIVE,
        le=limits.MAX_LENGTH_RANGE_RATIO,
        allow_inf_nan=False,
        description="the benchmark client's length range (vLLM benchmark_serving "
        "--random-range-ratio r): each prompt and output drawn uniformly between r x and 1 x "
        "input_length / output_length; 1 (default): fixed lengths. Below 1: workload closed_loop "
        f"or poisson of mode agg, outputs simulated as {limits.LENGTH_CLASSES} length classes "
        "(closed-loop clients drift apart), every prompt prefilled at the range's mean",
    )
    num_mtp_tokens: int = Field(
        default=0,
        strict=True,
        ge=0,
        le=limits.MAX_MTP_TOKENS,
        description="MTP (speculative) draft tokens per decode step: each request verifies "
        "1 + n tokens a step (0: no MTP)",
    )
    mtp_acceptance_rates: list[Annotated[float, Field(ge=0.0, le=1.0)]] = Field(
        default_factory=list,
        max_length=limits.MAX_MTP_TOKENS,
        description="per draft position, the fraction in [0, 1] of drafts accepted: a decode "
        "step emits 1 + the sum of the first num_mtp_tokens on average (at least "
        "num_mtp_tokens values)",
    )
    engine: EngineName | None = Field(
        default=None,
        description=f"engine profile (default {DEFAULT_ENGINE}): the step policy, token budget, "
        "running cap, KV pool sizing and dtype, CUDA-graph decode, overlap scheduling and host "
        f"times of that engine; {RFC_ENGINE!r}: the RFC's semantics (burst, "
        "decode_first_with_slack, a 10 GB reserve). The response echoes every value used",
    )
    engine_options: EngineOptions | None = Field(
        default=None, description="override values of the engine profile"
    )
    calibration: CalibrationId | dict[str, Any] | None = Field(
        default=None,
        description="a calibration profile: the id POST /v1/calibrations returned, or the "
        "profile itself (as `chunkwise calibrate --out` writes it); its fitted parameters "
        "replace the device's efficiencies and the engine's host and front-end times, and its "
        "cross-validated residuals give the 80 % intervals",
    )
    scheduler: SchedulerOptions = Field(
        default_factory=SchedulerOptions,
        description="the step policy; omitted: the engine profile's (an answer's echo names "
        "the policy that ran, every option included, and leaves it out when the mode runs "
        "none: a disaggregated one)",
    )
    force_simulation: bool = Field(
        default=False,
        description="use the time simulation even when the prompt fits in one chunk",
    )

    def runs_step_scheduler(self) -> bool:
        """Whether the request's mode runs a step scheduler (mode agg); a request with modes
        tells by its own."""
        return getattr(self, "mode", "agg") == "agg"

    @model_serializer(mode="wrap")
    def _echo(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        # Unannotated return: the schema stays the model's. A mode that runs no step
        # scheduler echoes none.
        data = handler(self)
        if isinstance(data, dict) and not self.runs_step_scheduler():
            data.pop("scheduler", None)
        return data
