"""Adapter from :class:`ModelRunner` to the engine's ``ServingModel`` protocol."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from app.core.catalog.architecture import ModelArchitecture
from app.core.catalog.hardware import BYTES_PER_GB, Device
from app.core.catalog.quantization import (
    AttentionQuantAction,
    LinearQuantAction,
    Quantization,
)
from app.core.cost import ForwardShape, MixedShape
from app.core.errors import InvalidParameterError
from app.core.parallel import ParallelLayout
from app.core.profiles import EngineProfile
from app.core.runner.runner import MemoryBreakdown, ModelRunner

#: Device time (ms) of forwards already costed, keyed by (runner identity, the forward's parts,
#: draft passes): shared by serving models whose runners may be equal (a calibration fit's
#: evaluations, which move host times without touching the device). The owner bounds its life.
ForwardMemo = dict[tuple[str, tuple[ForwardShape, ...], int], float]

#: Forward shapes whose operator count a serving model remembers before it forgets them all:
#: it lives as long as the process's runner memo, and an eager NPU simulation meets a new
#: shape per distinct batch, so the bound keeps a long-lived process's memory flat.
OPERATOR_MEMO_LIMIT = 4096

#: Linear formats an engine reads as an "FP8/FP4 checkpoint" for its KV-cache dtype rule.
_LOW_PRECISION_LINEAR = frozenset(
    {LinearQuantAction.FP8, LinearQuantAction.NVFP4, LinearQuantAction.MXFP4}
)


def engine_quantization(profile: EngineProfile, quantization: Quantization) -> Quantization:
    """The quantization an engine runs: an engine whose KV-cache rule is ``fp8`` (TensorRT-LLM's
    quantized recipes) keeps an FP8 KV cache for an FP8/FP4 checkpoint whose attention action
    was not given; ``auto`` (vLLM, SGLang) keeps the model's 16-bit cache."""
    if (
        profile.kv_cache_dtype == "fp8"
        and quantization.linear in _LOW_PRECISION_LINEAR
        and quantization.attention == AttentionQuantAction.DISABLED
    ):
        return Quantization(linear=quantization.linear, attention=AttentionQuantAction.FP8)
    return quantization


#: Engine profile -> the engine whose fitted kernel curves (``app.core.runner.kernel_fit``,
#: ``kernel_fit_moe``, ``kernel_fit_attention``, ``kernel_fit_comm``) price its serving forwards,
#: with the in-graph floors (``kernel_fit.IN_GRAPH_FLOOR_US``: a fitted kernel of a captured
#: decode step costs the graph node, not the floor the collectors timed for the op alone; a
#: quantized GEMM's floor is capped at the 16-bit one's). On for TensorRT-LLM and SGLang: the
#: measured agg file goes TTFT / TPOT 37.1 / 11.3 % -> 36.5 / 10.1 % (TensorRT-LLM 35.0 / 11.0
#: -> 34.6 / 9.7, SGLang 50.7 / 15.4 -> 49.4 / 15.0), the disagg file 52.7 / 28.6 -> 50.0 /
#: 28.0 %. vLLM: on the devices of :data:`SERVING_KERNEL_DEVICES` only (SM100 and Hopper).
SERVING_KERNEL_ENGINES: Mapping[str, str] = {"trtllm": "trtllm", "sglang": "sglang", "vllm": "vllm"}

#: vLLM's SM100 family (``current_platform.is_device_capability_family(100)``: SM100 B200 /
#: GB200, SM103 B300 / GB300) and Hopper (SM90: H100, H200), where the kernels the served
#: recipes run are the ones the wheel's vLLM tables measured. SM100: MXFP4 experts on
#: FlashInfer's TensorRT-LLM MoE (``trtllm_fp4_block_scale_moe``, the gpt-oss scripts' MXFP8
#: variant, ``vllm_mxfp4moe_flashinfer_trtllm_mxfp4_mxfp8`` rows); the B200 attention table is
#: FlashInfer's TensorRT-LLM kernels. Hopper: the gpt-oss scripts (vLLM 0.18) export
#: ``VLLM_MXFP4_USE_MARLIN=1`` (the profile's ``mxfp4_moe_kernel`` ``marlin``), priced from
#: Marlin's own MXFP4 curve (fitted apart from the OAI Triton rows it was pooled with); the
#: INT4 Kimi-K2.5 experts run Marlin too (``int4_wo``); and Marlin's activation, alignment
#: and sum kernels pay their in-graph floors in a captured decode step
#: (``kernel_fit_moe.SERVED_MOE_KERNELS``). Measured agg file, vLLM TTFT / TPOT 51.3 / 7.1 ->
#: 38.8 / 7.4 %, overall 48.1 / 9.7 -> 42.4 / 9.8 % (docs/kernels.md, "vLLM on Hopper"). The
#: INT4 Marlin call's captured floor is its measured small-call floor (``graph_call_floor_us``):
#: vLLM TPOT 7.4 -> 6.0 %, overall 9.5 -> 9.0 % (docs/kernels.md, "vLLM's INT4 Marlin experts").
SERVING_KERNEL_DEVICES: Mapping[str, frozenset[str]] = {
    "vllm": frozenset(
        {
            "NVIDIA_B200_SXM_180G",
            "NVIDIA_B300_SXM_288G",
            "NVIDIA_GB200_186G",
            "NVIDIA_GB300_288G",
            "NVIDIA_H100_SXM_80G",
            "NVIDIA_H200_SXM_141G",
        }
    ),
}


#: Engines (on these vendors' devices) whose expert-parallel MoE exchanges tokens by all-to-all
#: only under attention data parallelism: with the expert group the attention tensor-parallel
#: group every rank holds every token after the attention all-reduce, routes them all,
#: computes the pairs of its own experts, and the MoE all-reduce sums the ranks' outputs
#: (``tp_group_all_to_all`` False). vLLM: ``FusedMoEParallelConfig.use_all2all_kernels`` is
#: ``dp_size > 1 and use_ep`` (``vllm/model_executor/layers/fused_moe/config.py``), so
#: ``--enable-expert-parallel`` without ``--data-parallel-size`` runs none; vLLM-Ascend's MoE
#: picks its own communication (MC2 dispatch / combine) and is not in it. SGLang
#: (``moe_a2a_backend`` default ``"none"``) and TensorRT-LLM (all-to-all only with
#: ``enable_attention_dp``; TRITON: none) route the same way but are not listed yet: applied to
#: them the rule moves the agg file's TTFT past its bound (their prefill is priced fast, and
#: the all-to-all stood in for it; docs/kernels.md, "TPOT of the agg file after the layouts").
TP_GROUP_ROUTING_ENGINES: Mapping[str, frozenset[str]] = {"vllm": frozenset({"nvidia", "amd"})}


def serving_kernel_engine(profile: EngineProfile, device: Device) -> str | None:
    """The engine whose fitted curves price ``profile``'s serving forwards on ``device`` (None:
    the defaults)."""
    engine = SERVING_KERNEL_ENGINES.get(profile.name)
    devices = SERVING_KERNEL_DEVICES.get(profile.name)
    if engine is None or (devices is not None and device.name not in devices):
        return None
    return engine


def engine_runner(
    profile: EngineProfile,
    model: ModelArchitecture,
    device: Device,
    layout: ParallelLayout,
    quantization: Quantization,
    *,
    reserved_memory_gb: float | None = None,
    num_mtp_tokens: int = 0,
) -> ModelRunner:
    """The runner of a deployment as ``profile``'s engine runs it: its reserve per device, its
    MXFP4 kernels' activations, its redundant expert slots, its CUDA-graph decode limit and
    whether its expert-parallel MoE exchanges tokens inside the attention-TP group
    (:data:`TP_GROUP_ROUTING_ENGINES`; ``reserved_memory_gb`` given: the user's reserve wins).
    Its measured-kernel curves (``kernel_engine``) apply where :func:`serving_kernel_engine`
    names one for the profile and device."""
    vendor = device.vendor
    reserved = reserved_memory_gb
    if reserved is None:
        reserved = profile.reserved_memory_gb(
            device.hbm_capacity_gb, vendor, layout.tp * layout.pp, layout.dp
        )
    return ModelRunner(
        model,
        device,
        layout,
        quantization,
        reserved_memory_gb=reserved,
        num_mtp_tokens=num_mtp_tokens,
        decode_graph_max_batch=profile.graph_max_batch(
            device.hbm_capacity_gb, vendor, layout.tp * layout.pp
        ),
        mxfp4_activation=profile.mxfp4_activation,
        kernel_engine=serving_kernel_engine(profile, device),
        mxfp4_moe_kernel=profile.mxfp4_moe_kernel,
        redundant_experts=profile.redundant_experts,
        tp_group_all_to_all=vendor not in TP_GROUP_ROUTING_ENGINES.get(profile.name, ()),
    )


class RunnerServingModel:
    """``prefill_ms`` / ``decode_ms`` / ``mixed_ms`` / ``memory_left_gb`` over a
    :class:`ModelRunner`.

    MTP folding: a decode step verifies ``1 + num_mtp_tokens`` tokens per request (the query
    length is raised to that if the caller passed less) and costs the main forward plus the
    draft passes; it emits ``1 + sum(mtp_acceptance_rates[:num_mtp_tokens])`` tokens on average,
    so ``decode_ms`` returns the step time divided by that: the time per emitted token.
    ``mixed_ms`` folds the same way, the decode part only: the prefill forward plus the fused
    forward's extra time over it, divided by the tokens per decode step (so a fused step with
    no decodes is ``prefill_ms``, with no prefill ``decode_ms``, and it lies between
    ``max(prefill_ms, decode_ms)`` and ``prefill_ms + decode_ms`` whenever the unfolded forward
    does).
    """

    __slots__ = (
        "_forwards",
        "_operators",
        "_tokens_per_step",
        "mtp_acceptance_rates",
        "num_mtp_tokens",
        "profile",
        "runner",
    )

    def __init__(
        self,
        runner: ModelRunner,
        num_mtp_tokens: int = 0,
        mtp_acceptance_rates: Sequence[float] = (),
        *,
        profile: EngineProfile | None = None,
        forwards: ForwardMemo | None = None,
    ) -> None:
        if isinstance(num_mtp_tokens, bool) or not isinstance(num_mtp_tokens, int):
            raise InvalidParameterError("num_mtp_tokens", num_mtp_tokens, "an integer >= 0")
        if num_mtp_tokens < 0:
            raise InvalidParameterError("num_mtp_tokens", num_mtp_tokens, "an integer >= 0")
        rates = tuple(float(r) for r in mtp_acceptance_rates)
        if len(rates) < num_mtp_tokens:
            raise InvalidParameterError(
                "mtp_acceptance_rates", rates, f"at least num_mtp_tokens={num_mtp_tokens} values"
            )
        if any(not 0.0 <= r <= 1.0 for r in rates):
            raise InvalidParameterError("mtp_acceptance_rates", rates, "values in [0, 1]")
        self.runner = runner
        self.profile = profile
        self.num_mtp_tokens = num_mtp_tokens
        self.mtp_acceptance_rates = rates
        self._tokens_per_step = 1.0 + math.fsum(rates[:num_mtp_tokens])
        self._forwards = forwards
        self._operators: dict[tuple[tuple[ForwardShape, ...], int], int] = {}

    def _device_ms(self, parts: tuple[ForwardShape, ...], drafts: int) -> float:
        """One forward's device time (through the shared memo when there is one)."""
        memo = self._forwards
        if memo is None:
            return self._forward_ms(parts, drafts)
        key = (self.runner.identity(), parts, drafts)
        found = memo.get(key)
        if found is None:
            found = memo[key] = self._forward_ms(parts, drafts)
        return found

    def _launches(self, parts: tuple[ForwardShape, ...], drafts: int) -> int:
        """Operators one forward launches (what an eager host dispatches), memoised."""
        key = (parts, drafts)
        found = self._operators.get(key)
        if found is None:
            if len(self._operators) >= OPERATOR_MEMO_LIMIT:
                self._operators.clear()
            if len(parts) == 1:
                found = self.runner.operators(parts[0], mtp_draft_tokens=drafts)
            else:
                mixed = MixedShape(prefill=parts[0], decode=parts[1])
                found = self.runner.mixed_operators(mixed, mtp_draft_tokens=drafts)
            self._operators[key] = found
        return found

    def _forward_ms(self, parts: tuple[ForwardShape, ...], drafts: int) -> float:
        if len(parts) == 1:
            return self.runner.forward_ms(parts[0], mtp_draft_tokens=drafts)
        mixed = MixedShape(prefill=parts[0], decode=parts[1])
        return self.runner.mixed_ms(mixed, mtp_draft_tokens=drafts)

    @property
    def tokens_per_decode_step(self) -> float:
        return self._tokens_per_step

    def identity(self) -> str:
        rates = ",".join(f"{r:.6g}" for r in self.mtp_acceptance_rates[: self.num_mtp_tokens])
        engine = ""
        if (p := self.profile) is not None:
            if p.step_sync_ms or p.step_host_ms:
                engine = (
                    f"|host={p.step_sync_ms:.6g}:{p.step_host_ms:.6g}:{int(p.overlap_scheduling)}"
                )
            if p.eager_layer_host_ms:
                engine += f"|eager_layer={p.eager_layer_host_ms:.6g}"
            if p.npu_graph_mode is not None:
                engine += f"|npu_graph={p.npu_graph_mode}"
        return f"{self.runner.identity()}|mtp={self.num_mtp_tokens}:{rates}{engine}"

    def _step_ms(
        self, parts: tuple[ForwardShape, ...], drafts: int, *, decode_only: bool = False
    ) -> float:
        """One engine iteration around the forward of ``parts``: the host sync the GPU always
        waits for, and the host's own iteration work (per step, and per layer of an eager
        prefill or an NPU build's graphs: :meth:`EngineProfile.layer_host_ms`), hidden behind
        the forward when the engine overlaps scheduling with execution (then only what exceeds
        it shows). An eager NPU build dispatches every operator from the host while the device
        runs (:meth:`EngineProfile.eager_step_ms`)."""
        device_ms = self._device_ms(parts, drafts)
        profile = self.profile
        if profile is None:
            return device_ms
        model, pp = self.runner.model, self.runner.parallel.pp
        layers = math.ceil(model.num_layers / pp)
        prefill_host_ms = 0.0
        if any(not part.is_decode for part in parts):
            gdn_layers = math.ceil(model.num_linear_attention_layers / pp)
            prefill_host_ms = profile.gdn_prefill_host_ms(gdn_layers)
        if profile.eager:
            operators = self._launches(parts, drafts)
            return profile.eager_step_ms(
                device_ms, operators, layers=layers, prefill_host_ms=prefill_host_ms
            )
        device_ms = max(device_ms, prefill_host_ms)
        host_ms = profile.step_host_ms + layers * profile.layer_host_ms(decode_only=decode_only)
        if profile.overlap_scheduling:
            host_ms = max(0.0, host_ms - device_ms)
        return device_ms + profile.step_sync_ms + host_ms

    @staticmethod
    def _prefill_shape(concurrency: int, query_len: int, seq_len: int) -> ForwardShape:
        return ForwardShape(
            is_decode=False, concurrency=concurrency, query_len=query_len, seq_len=seq_len
        )

    def prefill_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        shape = self._prefill_shape(concurrency, query_len, seq_len)
        return self._step_ms((shape,), 0)

    def _decode_shape(self, concurrency: int, query_len: int, seq_len: int) -> ForwardShape:
        """The verify step: at least ``1 + num_mtp_tokens`` tokens per request."""
        query = max(query_len, 1 + self.num_mtp_tokens)
        return ForwardShape(
            is_decode=True, concurrency=concurrency, query_len=query, seq_len=max(seq_len, query)
        )

    def decode_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        shape = self._decode_shape(concurrency, query_len, seq_len)
        step_ms = self._step_ms((shape,), self.num_mtp_tokens, decode_only=True)
        return step_ms / self._tokens_per_step

    def _mixed_shape(self, shape: MixedShape) -> MixedShape:
        p, d = shape.prefill, shape.decode
        return MixedShape(
            prefill=self._prefill_shape(p.concurrency, p.query_len, p.seq_len),
            decode=self._decode_shape(d.concurrency, d.query_len, d.seq_len),
        )

    def mixed_ms(self, shape: MixedShape) -> float:
        """A fused mixed step: one forward over the prefill chunk and the decodes."""
        mixed = self._mixed_shape(shape)
        fused_ms = self._step_ms((mixed.prefill, mixed.decode), self.num_mtp_tokens)
        if self._tokens_per_step == 1.0:
            return fused_ms
        prefill_ms = self._step_ms((mixed.prefill,), 0)
        return prefill_ms + (fused_ms - prefill_ms) / self._tokens_per_step

    def mixed_memory(self, shape: MixedShape) -> MemoryBreakdown:
        """Device memory while the fused mixed step runs (both parts' KV and activations)."""
        return self.runner.memory(self._mixed_shape(shape))

    def memory_left_gb(
        self, is_decode: bool, concurrency: int, query_len: int, seq_len: int
    ) -> float:
        if is_decode:
            shape = self._decode_shape(concurrency, query_len, seq_len)
        else:
            shape = self._prefill_shape(concurrency, query_len, seq_len)
        return self.runner.memory(shape).available_gb

    def kv_capacity_requests(
        self, context_len: int, max_batched_tokens: int, *, kv_memory_fraction: float | None = None
    ) -> int:
        """Requests whose KV cache of ``context_len`` tokens (in blocks) fits on the device,
        each with its linear-attention state (SSM + conv, one per running request, see
        :meth:`ModelRunner.state_bytes_per_request`) when the model has such layers.

        What is left after the weights, the reserve and the activations of the largest
        forward (a prefill of ``max_batched_tokens`` tokens) holds the KV cache, or the
        fraction ``kv_memory_fraction`` of it that an engine gives its KV pool (default: the
        engine profile's, else all of it); an engine whose reserve holds the activations
        (SGLang's static fraction) does not take them out again. 0 when even one request does
        not fit.
        """
        runner = self.runner
        profile = self.profile
        if kv_memory_fraction is None:
            kv_memory_fraction = 1.0 if profile is None else profile.kv_pool_fraction()
        peak = ForwardShape(
            is_decode=False,
            concurrency=1,
            query_len=max_batched_tokens,
            seq_len=max(max_batched_tokens, context_len),
        )
        memory = runner.memory(peak)
        left_gb = memory.available_gb + memory.kv_cache_gb
        if profile is not None and profile.activations_in_reserve():
            left_gb += memory.activation_gb
        free_gb = left_gb * kv_memory_fraction
        per_request_gb = runner.kv_cache_bytes(1, context_len) / BYTES_PER_GB
        if free_gb <= 0 or per_request_gb <= 0:
            return 0
        return math.floor(free_gb / per_request_gb)
