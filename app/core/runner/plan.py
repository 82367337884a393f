"""The static part of a runner: how one model is sharded and costed on one device.

Everything that does not depend on the batch shape is computed once here (local head counts,
byte sizes, effective rates, links, weights per device), so a forward costs a few dozen float
operations per distinct layer kind.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from app.core import limits
from app.core.catalog.architecture import (
    GDN_PARAMS_PER_VALUE_HEAD,
    KV_TENSORS,
    MTP_EH_INPUTS,
    SIXTEEN_BIT_ATTENTION,
    SIXTEEN_BIT_DENSE_MLP,
    SIXTEEN_BIT_SHARED_EXPERTS,
    AttentionKind,
    FfnKind,
    LayerAttention,
    ModelArchitecture,
)
from app.core.catalog.device_table import NPU_TRITON_GDN_CHUNK_EFFICIENCY, TRITON_GDN_DEVICES
from app.core.catalog.hardware import BYTES_PER_GB, Device, InterconnectTier
from app.core.catalog.quantization import (
    BYTES_8BIT,
    BYTES_16BIT,
    AttentionQuantAction,
    DType,
    LinearQuantAction,
    Quantization,
)
from app.core.chunking import require_int
from app.core.errors import InvalidParameterError
from app.core.parallel import ParallelLayout
from app.core.profiles import Mxfp4Activation, Mxfp4MoeKernel
from app.core.runner.kernel_fit import (
    GEMM_16BIT,
    FittedGemm,
    fitted_gemm,
    gemm_label,
    in_graph_floor_s,
)

if TYPE_CHECKING:  # the fitted tables' modules load only for a plan with a kernel engine
    from app.core.runner.kernel_fit_attention import FittedAttention
    from app.core.runner.kernel_fit_comm import FittedComm
    from app.core.runner.kernel_fit_dsa import FittedDsa
    from app.core.runner.kernel_fit_gdn import FittedGdn
    from app.core.runner.kernel_fit_moe import FittedMoe

FLOPS_PER_TFLOP = 1e12
S_PER_US = 1e-6
ACTIVATION_BYTES = BYTES_16BIT  # activations, residual stream and outputs stay 16-bit
GEMM_INPUT_BYTES: dict[DType, float] = {
    DType.BF16: BYTES_16BIT,
    DType.FP8: BYTES_8BIT,
    DType.INT8: BYTES_8BIT,
    DType.INT4: BYTES_8BIT,
    DType.FP4: BYTES_8BIT,  # fp4 activations plus scales: about one byte per element
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardPlan:
    """Sharding, byte sizes and effective rates of one (model, device, layout, quantization)."""

    model: ModelArchitecture
    device: Device
    parallel: ParallelLayout
    quantization: Quantization
    tp: int
    pp: int
    ep: int
    moe_tp: int
    moe_group_size: int  # devices whose tokens meet in one expert-parallel group
    heads_local: int
    kv_heads_local: int
    weight_bytes_per_param: float
    gemm_input_bytes: float
    kv_bytes_per_element: float
    gemm_flops_per_s: float  # the quantized GEMMs' matrix rate
    #: Each ramp's half-efficiency M: ``gemm_`` the quantized GEMMs', ``bf16_`` the 16-bit ones'.
    gemm_half_efficiency_tokens: float
    bf16_half_efficiency_tokens: float
    bf16_flops_per_s: float
    attention_flops_per_s: float
    indexer_flops_per_s: float  # the sparse indexer's FP8 score kernel (0 without an indexer)
    hbm_bytes_per_s: float
    eager_launch_s: float
    graph_launch_s: float
    forward_overhead_s: float
    tp_tier: InterconnectTier
    ep_tier: InterconnectTier
    pp_tier: InterconnectTier
    weights_bytes: float
    mtp_weights_bytes: float
    kv_bytes_per_token: float  # per device, full-attention layers on this device
    kv_bytes_per_token_sliding: float  # per device, sliding-window layers
    mtp_kv_bytes_per_token: float
    notes: tuple[str, ...]
    # Gated DeltaNet layers (0 without them): key / value heads per TP rank, and the recurrent
    # state (SSM + conv) one request holds on this device, whatever its context length.
    linear_key_heads_local: int = 0
    linear_value_heads_local: int = 0
    state_bytes_per_request: float = 0.0
    #: The checkpoint's parts that stay 16-bit beside its quantized GEMMs (run at its native
    #: quantization; :data:`~app.core.catalog.architecture.SIXTEEN_BIT_PARTS`).
    sixteen_bit_parts: frozenset[str] = frozenset()
    #: Measured-kernel GEMM curves of the engine that runs the model (``kernel_fit``), for the
    #: quantized and the 16-bit path; None: the physics-derived rates and ramps above.
    gemm_fit: FittedGemm | None = None
    bf16_gemm_fit: FittedGemm | None = None
    #: The engine's measured-kernel MoE terms and collectives (``kernel_fit_moe``,
    #: ``kernel_fit_comm``); None: the defaults.
    moe_fit: FittedMoe | None = None
    comm_fit: FittedComm | None = None
    #: Measured-kernel attention curves (``kernel_fit_attention``) of the prefill and decode
    #: attention kernels; None: the attention rate and HBM bandwidth above.
    prefill_attention_fit: FittedAttention | None = None
    decode_attention_fit: FittedAttention | None = None
    #: Measured-kernel Gated DeltaNet curves (``kernel_fit_gdn``); None: the defaults.
    gdn_fit: FittedGdn | None = None
    #: Share of its roofline the chunked delta-rule kernel reaches without a fitted curve (1: the
    #: attention rate and HBM bandwidth; the 910B / 910C's Triton kernels:
    #: :data:`~app.core.catalog.device_table.NPU_TRITON_GDN_CHUNK_EFFICIENCY`).
    gdn_chunk_efficiency: float = 1.0
    #: Physical expert slots of one MoE layer over the ``ep`` ranks: the routed experts plus
    #: the redundant slots the engine holds (SGLang's ``--ep-num-redundant-experts``); 0
    #: without experts. Each rank holds ``expert_slots / ep`` of them.
    expert_slots: int = 0
    #: Measured-kernel DSA curves (indexer scores and top-k, sparse MLA; ``kernel_fit_dsa``);
    #: None: the analytic pricing.
    dsa_fit: FittedDsa | None = None
    #: An expert-parallel MoE whose expert group is the attention-TP group (every rank holds
    #: every token) still dispatches and combines its tokens by all-to-all; False: it routes
    #: the tokens it holds and the MoE all-reduce sums the ranks' outputs (the runner's
    #: ``tp_group_all_to_all``).
    tp_group_all_to_all: bool = True

    @property
    def tokens_scale(self) -> float:
        """Replicas whose tokens meet in one expert group (1 without expert parallelism)."""
        return self.moe_group_size / self.tp


def _kv_heads_local(model: ModelArchitecture, tp: int, pp: int) -> int:
    """KV heads per TP rank (GQA: split or replicated; MLA: one latent); checks TP and PP."""
    if model.num_heads % tp:
        raise InvalidParameterError("tp", tp, f"a divisor of num_attention_heads={model.num_heads}")
    if model.attention is AttentionKind.GQA and model.num_kv_heads >= tp:
        if model.num_kv_heads % tp:
            raise InvalidParameterError(
                "tp", tp, f"a divisor of num_key_value_heads={model.num_kv_heads}"
            )
        kv_local = model.num_kv_heads // tp
    elif model.attention is AttentionKind.GQA:
        if tp % model.num_kv_heads:
            raise InvalidParameterError(
                "tp", tp, f"a multiple of num_key_value_heads={model.num_kv_heads}"
            )
        kv_local = 1  # KV heads replicated over the TP ranks that share them
    else:
        kv_local = 1  # MLA: one latent per token, replicated on every TP rank
    if pp > model.num_layers:
        raise InvalidParameterError("pp", pp, f"<= num_hidden_layers={model.num_layers}")
    return kv_local


def kv_copies(model: ModelArchitecture, tp: int) -> int:
    """The attention tensor-parallel ranks of one worker (or attention data-parallel rank) of
    ``tp`` ranks that hold the same KV of a request: every rank for MLA (one latent per token,
    replicated), ``tp / num_kv_heads`` for GQA with fewer KV heads than ranks (each head on
    that many ranks), else 1 (the heads split)."""
    if model.attention is AttentionKind.MLA:
        return tp
    return max(1, tp // model.num_kv_heads)


def kv_send_copies(model: ModelArchitecture, prefill_tp: int, decode_tp: int) -> int:
    """The copies of its share of a prompt's KV one prefill device sends: when the decode
    worker's attention ranks replicate the KV on more ranks than the prefill worker's
    (:func:`kv_copies`), every decode replica needs its own copy and the prefill replicas
    split the sending, so each sends ``decode copies / prefill copies``; otherwise one.

    That is the three engines' rule for MLA: TensorRT-LLM's ``MLACacheFormatter``
    (``needSendCache``: every context rank sends while its attention TP is at most the
    generation's, and ``formatOutput`` sends the whole cache once per connection, one per
    generation TP rank it serves; ``cpp/tensorrt_llm/batch_manager/mlaCacheFormatter.cpp``),
    SGLang's KV managers (a prefill rank serves ``decode tp / prefill tp`` decode ranks per
    attention DP group, each reading the full latent) and vLLM's ``NixlConnector`` (each decode
    rank reads the full MLA cache from prefill rank ``tp_rank // tp_ratio``). An attention
    data-parallel prefill rank (``tp`` 1) feeding a TEP8 decode worker therefore sends eight
    copies of the prompt's latent over its one NIC."""
    return max(1, kv_copies(model, decode_tp) // kv_copies(model, prefill_tp))


def _linear_heads_local(model: ModelArchitecture, tp: int) -> tuple[int, int]:
    """Gated DeltaNet key and value heads per TP rank: split over the ranks like the engines'
    column-parallel in_proj (vLLM divides both head counts by the TP size), never replicated."""
    dims = model.linear_attention
    if dims is None or not model.num_linear_attention_layers:
        return 0, 0
    for key, heads in (
        ("linear_num_key_heads", dims.num_key_heads),
        ("linear_num_value_heads", dims.num_value_heads),
    ):
        if heads % tp:
            raise InvalidParameterError("tp", tp, f"a divisor of {key}={heads}")
    return dims.num_key_heads // tp, dims.num_value_heads // tp


def _state_bytes_per_request(model: ModelArchitecture, tp: int, pp: int) -> float:
    """Recurrent state of one request on the busiest device: the SSM state (its own dtype) and
    the conv state (activation dtype) of the linear-attention layers on this stage, split
    over the TP ranks by heads / channels."""
    if not model.num_linear_attention_layers:
        return 0.0
    # The busiest stage holds ceil(L / pp) layers, linear ones in the model's proportion (the
    # same convention as the KV cache).
    stage_share = math.ceil(model.num_layers / pp) / model.num_layers
    return model.state_bytes(ACTIVATION_BYTES) / tp * stage_share


def _expert_sharding(
    model: ModelArchitecture, parallel: ParallelLayout, redundant_experts: int, notes: list[str]
) -> tuple[int, int, int, int]:
    """``(ep, moe_tp, group, slots)``: expert parallelism, the TP of each expert, the devices
    whose tokens meet in one expert group, the expert slots over the ``ep`` ranks (the routed
    experts plus ``redundant_experts`` replicas; 0 without experts)."""
    tp, ep = parallel.tp, parallel.ep
    moe = model.moe
    if moe is None:
        if ep > 1:
            notes.append(f"ep={ep} ignored: {model.name} has no experts")
        if parallel.moe_over_dp and parallel.dp > 1:
            notes.append(f"moe_over_dp ignored: {model.name} has no experts")
        if redundant_experts:
            notes.append(f"redundant_experts={redundant_experts} ignored: no experts")
        return 1, tp, tp, 0
    slots = moe.num_experts + redundant_experts
    if ep == 1 and parallel.moe_over_dp:
        # every expert tensor-parallel over all replicas' ranks, their tokens gathered
        return ep, tp * parallel.dp, tp * parallel.dp, slots
    if ep == 1:
        return ep, tp, tp, slots
    replicas = tp * parallel.dp
    if replicas % ep:
        raise InvalidParameterError("ep", ep, f"a divisor of tp * dp = {replicas}")
    if slots % ep:
        held = f"num_experts={moe.num_experts}"
        if redundant_experts:
            held += f" + redundant_experts={redundant_experts} = {slots} expert slots"
        raise InvalidParameterError("ep", ep, f"a divisor of {held}")
    return ep, replicas // ep, replicas, slots


def _gemm_rate(device: Device, dtype: DType) -> float:
    """A GEMM dtype's matrix rate (flops/s): its peak at the device's efficiency for it."""
    peak = device.peak_tflops(dtype) or device.peak_bf16_tflops
    return peak * FLOPS_PER_TFLOP * device.gemm_efficiency(dtype)


def _mxfp4_matrix_dtype(device: Device, activation: Mxfp4Activation) -> DType | None:
    """The matrix dtype of MXFP4 GEMMs run with ``activation`` (None: the stored format's own
    path, ``fp4``)."""
    if activation == "fp4":
        return None
    block_scaled = (
        device.peak_tflops(DType.FP4) is not None and device.peak_tflops(DType.FP8) is not None
    )
    return DType.FP8 if activation == "fp8" and block_scaled else DType.BF16


def _compute_paths(
    device: Device, quantization: Quantization, mxfp4_activation: Mxfp4Activation, notes: list[str]
) -> tuple[DType, float, float, float]:
    """The quantized GEMMs' matrix dtype, their rate (flops/s) and ramp half-efficiency M, and
    the attention peak TFLOPS.

    The rate is the matrix dtype's (for MXFP4, the one the engine's activations run in). The
    ramp's fixed cost, a small-M GEMM's time, is its weight tiles': the stored weights loaded
    (and, in a weight-only format, dequantized) whatever the matrix dtype. So it stays the cost
    on the stored dtype's own path, and the half-efficiency M scales with the ratio of the matrix
    rate to that path's rate (1 when weights and matrix share a dtype).
    """
    fmt = quantization.linear_format
    matrix = device.compute_path(fmt.compute_dtype)
    chosen = None
    if quantization.linear is LinearQuantAction.MXFP4:
        chosen = _mxfp4_matrix_dtype(device, mxfp4_activation)
    if chosen is not None and chosen is not matrix:
        notes.append(
            f"MXFP4 GEMMs run with {mxfp4_activation} activations: {chosen.value} matrix rate "
            "on " + device.name
        )
        matrix = chosen
    elif matrix is not fmt.compute_dtype:
        notes.append(
            f"{device.name} has no {fmt.compute_dtype.value} peak: "
            f"{quantization.linear.value} GEMMs compute in {matrix.value} "
            f"(weights stay {fmt.weight_dtype.value})"
        )
    rate = _gemm_rate(device, matrix)
    stored = device.compute_path(fmt.weight_dtype)
    half = device.gemm_half_efficiency_tokens
    if stored is not matrix:
        half = half * rate / _gemm_rate(device, stored)
    attention_compute = DType.BF16
    if quantization.attention is AttentionQuantAction.FP8:
        attention_compute = device.compute_path(DType.FP8)
        if attention_compute is not DType.FP8:
            notes.append(f"{device.name} has no fp8 peak: attention computes in bf16")
            attention_compute = DType.BF16
    attn_peak = device.peak_tflops(attention_compute) or device.peak_bf16_tflops
    return matrix, rate, half, attn_peak


def _indexer_flops_per_s(device: Device, model: ModelArchitecture, notes: list[str]) -> float:
    """Rate of the sparse indexer's score kernel: FP8 (DeepSeek-V3.2-Exp's ``fp8_index``,
    DeepGEMM's ``fp8_mqa_logits`` in the engines) at the attention efficiency; 0 without one."""
    if model.sparse_indexer is None:
        return 0.0
    compute = device.compute_path(DType.FP8)
    if compute is not DType.FP8:
        notes.append(f"{device.name} has no fp8 peak: the sparse indexer scores in bf16")
        compute = DType.BF16
    peak = device.peak_tflops(compute) or device.peak_bf16_tflops
    return peak * FLOPS_PER_TFLOP * device.attention_efficiency


def _kv_bytes_per_token(
    model: ModelArchitecture, kv_local: int, pp: int, kv_el: float
) -> tuple[float, float, float]:
    """KV bytes per token on one device: per layer, full-attention layers, sliding layers.

    A sparse indexer's key cache (its own FP8 dtype, replicated on every TP rank like the MLA
    latent) adds to every layer's bytes.
    """
    per_layer_kv = (
        model.mla.cache_elements_per_token
        if model.mla is not None
        else KV_TENSORS * kv_local * model.head_dim
    ) * kv_el
    if model.sparse_indexer is not None:
        per_layer_kv += model.indexer_cache_bytes_per_token_per_layer
    layers_on_stage = math.ceil(model.num_layers / pp)
    sliding_layers = sum(g.count for g in model.layer_groups if g.sliding_window is not None)
    sliding_share = sliding_layers / model.num_layers
    # Linear-attention layers keep no KV cache (their state is per request, not per token).
    linear_share = model.num_linear_attention_layers / model.num_layers
    kv_full = per_layer_kv * layers_on_stage * (1 - sliding_share - linear_share)
    kv_sliding = per_layer_kv * layers_on_stage * sliding_share
    return per_layer_kv, kv_full, kv_sliding


#: EAGLE-3 draft heads (the draft a model without MTP layers runs in vLLM and SGLang): one
#: decoder layer (``num_hidden_layers: 1``) fed by ``fc``, which fuses three of the target's
#: hidden states (3h -> h), and an LM head over a reduced vocabulary
#: (``draft_vocab_size: 32000`` in the released EAGLE-3 configs, e.g. for Llama-3 and Qwen3).
EAGLE3_LAYERS = 1
EAGLE3_FC_INPUTS = 3
EAGLE3_DRAFT_VOCAB = 32000


def _sixteen_bit_parts(
    model: ModelArchitecture, quantization: Quantization, notes: list[str]
) -> frozenset[str]:
    """The parts the checkpoint keeps in 16 bits, when the run uses its own quantization (another
    action is another checkpoint, quantized throughout)."""
    if quantization.linear.value != model.native_linear:
        return frozenset()
    if model.unmodelled_sixteen_bit:
        notes.append(
            "the checkpoint keeps "
            + ", ".join(model.unmodelled_sixteen_bit)
            + f" in 16 bits: modelled at {quantization.linear.value}"
        )
    if model.sixteen_bit_parts:
        notes.append(
            f"{quantization.linear.value} checkpoint: "
            + ", ".join(sorted(model.sixteen_bit_parts))
            + " stay 16-bit (its quantization_config)"
        )
    return model.sixteen_bit_parts


#: MXFP4 experts' activations -> the matrix dtype their measured kernels run in.
_MXFP4_MOE_MATRIX: dict[str, DType] = {"bf16": DType.BF16, "fp8": DType.FP8}


def _moe_fit_label(
    model: ModelArchitecture,
    quantization: Quantization,
    mxfp4_activation: Mxfp4Activation,
    compute: DType,
    mxfp4_moe_kernel: Mxfp4MoeKernel = "default",
) -> str | None:
    """The measured MoE table of the run's routed experts, if they run its matrix path (MXFP4
    experts on Marlin: its own table, BF16 activations). MXFP8 activations on a device without
    a block-scaled FP4 matrix unit run BF16 (:func:`_mxfp4_matrix_dtype`): the experts are
    priced from the BF16-activation table there (TensorRT-LLM's TRITON MoE backend on Hopper)."""
    if quantization.linear is LinearQuantAction.MXFP4:
        if mxfp4_activation == "fp8" and compute is DType.BF16:
            mxfp4_activation = "bf16"  # the fallback's kernels: BF16 x MXFP4
        if _MXFP4_MOE_MATRIX.get(mxfp4_activation) is not compute:
            return None
        if mxfp4_moe_kernel == "marlin":
            from app.core.runner.kernel_fit_moe import MXFP4_MARLIN_MOE_LABEL

            return MXFP4_MARLIN_MOE_LABEL if compute is DType.BF16 else None
    elif compute is not quantization.linear_format.compute_dtype:
        return None
    from app.core.runner.kernel_fit_moe import moe_label

    return moe_label(quantization, model.native_linear, mxfp4_activation)


class _Sharding(TypedDict):
    """A plan's sharding (:class:`ShardPlan`'s fields of the same names)."""

    tp: int
    pp: int
    ep: int
    moe_tp: int
    moe_group_size: int
    heads_local: int
    kv_heads_local: int
    linear_key_heads_local: int
    linear_value_heads_local: int
    expert_slots: int


def _sharding(
    model: ModelArchitecture, parallel: ParallelLayout, redundant_experts: int, notes: list[str]
) -> _Sharding:
    """How the layout splits the model's heads and experts over the devices (checks that it
    divides them)."""
    tp, pp = parallel.tp, parallel.pp
    kv_local = _kv_heads_local(model, tp, pp)
    linear_k_local, linear_v_local = _linear_heads_local(model, tp)
    require_int("redundant_experts", redundant_experts, 0, limits.MAX_REDUNDANT_EXPERTS)
    ep, moe_tp, group, slots = _expert_sharding(model, parallel, redundant_experts, notes)
    return {
        "tp": tp,
        "pp": pp,
        "ep": ep,
        "moe_tp": moe_tp,
        "moe_group_size": group,
        "heads_local": model.num_heads // tp,
        "kv_heads_local": kv_local,
        "linear_key_heads_local": linear_k_local,
        "linear_value_heads_local": linear_v_local,
        "expert_slots": slots,
    }


class _MemoryTerms(TypedDict):
    """What one device of a plan holds (:class:`ShardPlan`'s fields of the same names)."""

    kv_bytes_per_element: float
    weights_bytes: float
    mtp_weights_bytes: float
    kv_bytes_per_token: float
    kv_bytes_per_token_sliding: float
    mtp_kv_bytes_per_token: float
    state_bytes_per_request: float


def _memory_terms(
    model: ModelArchitecture,
    quantization: Quantization,
    shard: _Sharding,
    sixteen_bit: frozenset[str],
) -> _MemoryTerms:
    """The weights (and the MTP or draft weights) on the busiest device, its KV bytes per token
    and the recurrent state of one request."""
    tp, pp, kv_local = shard["tp"], shard["pp"], shard["kv_heads_local"]
    weights, mtp_weights = _weights_bytes(
        model,
        tp=tp,
        pp=pp,
        ep=shard["ep"],
        moe_tp=shard["moe_tp"],
        kv_local=kv_local,
        wbytes=quantization.linear_format.weight_bytes_per_param,
        sixteen_bit=sixteen_bit,
        expert_slots=shard["expert_slots"],
    )
    kv_el = quantization.kv_bytes_per_element
    per_layer_kv, kv_full, kv_sliding = _kv_bytes_per_token(model, kv_local, pp, kv_el)
    return {
        "kv_bytes_per_element": kv_el,
        "weights_bytes": weights,
        "mtp_weights_bytes": mtp_weights,
        "kv_bytes_per_token": kv_full,
        "kv_bytes_per_token_sliding": kv_sliding,
        "mtp_kv_bytes_per_token": per_layer_kv * (model.num_mtp_layers or EAGLE3_LAYERS),
        "state_bytes_per_request": _state_bytes_per_request(model, tp, pp),
    }


class _KernelFits(TypedDict):
    """A plan's measured-kernel curves (:class:`ShardPlan`'s ``*_fit`` fields)."""

    gemm_fit: FittedGemm | None
    bf16_gemm_fit: FittedGemm | None
    moe_fit: FittedMoe | None
    comm_fit: FittedComm | None
    prefill_attention_fit: FittedAttention | None
    decode_attention_fit: FittedAttention | None
    gdn_fit: FittedGdn | None
    dsa_fit: FittedDsa | None


def _kernel_fits(
    model: ModelArchitecture,
    device: Device,
    quantization: Quantization,
    mxfp4: tuple[Mxfp4Activation, Mxfp4MoeKernel],
    compute: DType,
    kernel_engine: str | None,
    hbm_peak: float,
    floors_s: tuple[float, float | None],
    *,
    served: bool,
) -> _KernelFits:
    """The curves ``kernel_engine``'s measured kernels price the GEMMs, routed experts,
    collectives, attention, Gated DeltaNet and DSA kernels with (each None: the defaults;
    ``floors_s`` as for :func:`_moe_and_comm_fits`; ``served`` as for
    :func:`build_plan`)."""
    gemm_fit, bf16_fit = _gemm_fits(
        model, device, quantization, compute, kernel_engine, hbm_peak, floors_s, served=served
    )
    moe_fit, comm_fit = _moe_and_comm_fits(
        model, device, quantization, mxfp4, compute, kernel_engine, hbm_peak, floors_s
    )
    prefill_attention, decode_attention = _attention_fits(
        model, device, quantization, kernel_engine, hbm_peak, floors_s
    )
    return {
        "gemm_fit": gemm_fit,
        "bf16_gemm_fit": bf16_fit,
        "moe_fit": moe_fit,
        "comm_fit": comm_fit,
        "prefill_attention_fit": prefill_attention,
        "decode_attention_fit": decode_attention,
        "gdn_fit": _gdn_fit(model, device, kernel_engine, hbm_peak, floors_s),
        "dsa_fit": _dsa_fit(model, device, kernel_engine, hbm_peak, floors_s),
    }


def build_plan(
    model: ModelArchitecture,
    device: Device,
    parallel: ParallelLayout,
    quantization: Quantization,
    mxfp4_activation: Mxfp4Activation = "fp4",
    kernel_engine: str | None = None,
    *,
    served: bool = False,
    mxfp4_moe_kernel: Mxfp4MoeKernel = "default",
    redundant_experts: int = 0,
    tp_group_all_to_all: bool = True,
) -> ShardPlan:
    """``kernel_engine``: the engine whose measured-kernel curves price the GEMMs, the routed
    experts and the collectives on ``device`` (:mod:`app.core.runner.kernel_fit`,
    ``kernel_fit_moe``, ``kernel_fit_comm``; None, or no curve: the defaults).

    ``redundant_experts``: expert slots beyond the routed experts, each holding a replica of
    one (SGLang's ``--ep-num-redundant-experts``): every rank holds ``(experts + redundant) /
    ep`` experts' weights, and a routed token goes to one replica of its expert, so the
    routed pairs spread over all the slots (docs/engine.md, "Redundant expert slots").

    ``served``: the curves price kernels inside the engine's served forward, not one op as the
    collectors timed it: a fitted kernel's floor inside a captured graph is the engine's
    in-graph floor (``kernel_fit.IN_GRAPH_FLOOR_US``), and a quantized GEMM's floor is capped at
    the 16-bit GEMM's (the engines fuse the activation quantization into the op before it;
    docs/kernels.md, "In-graph floors").

    ``mxfp4_moe_kernel``: the kernel MXFP4 routed experts run on (``marlin``: Marlin's measured
    curve, BF16 activations; docs/kernels.md, "vLLM on Hopper").

    ``tp_group_all_to_all``: False where the engine exchanges no tokens when the expert group
    is the attention tensor-parallel group (:attr:`ShardPlan.tp_group_all_to_all`)."""
    notes: list[str] = []
    sixteen_bit = _sixteen_bit_parts(model, quantization, notes)
    shard = _sharding(model, parallel, redundant_experts, notes)
    tp, pp = shard["tp"], shard["pp"]
    compute, gemm_rate, gemm_half, attn_peak = _compute_paths(
        device, quantization, mxfp4_activation, notes
    )
    indexer_rate = _indexer_flops_per_s(device, model, notes)
    memory = _memory_terms(model, quantization, shard, sixteen_bit)
    hbm_peak = device.hbm_bandwidth_gb_s * BYTES_PER_GB
    graph_launch_s = device.graph_kernel_launch_us * S_PER_US
    floors = (graph_launch_s, in_graph_floor_s(kernel_engine, device.vendor) if served else None)
    mxfp4 = (mxfp4_activation, mxfp4_moe_kernel)
    fits = _kernel_fits(
        model, device, quantization, mxfp4, compute, kernel_engine, hbm_peak, floors, served=served
    )
    return ShardPlan(
        model=model,
        device=device,
        parallel=parallel,
        quantization=quantization,
        **shard,
        weight_bytes_per_param=quantization.linear_format.weight_bytes_per_param,
        gemm_input_bytes=GEMM_INPUT_BYTES[compute],
        gemm_flops_per_s=gemm_rate,
        gemm_half_efficiency_tokens=gemm_half,
        bf16_half_efficiency_tokens=device.gemm_half_efficiency_tokens,
        bf16_flops_per_s=device.peak_bf16_tflops * FLOPS_PER_TFLOP * device.gemm_efficiency_16bit,
        attention_flops_per_s=attn_peak * FLOPS_PER_TFLOP * device.attention_efficiency,
        indexer_flops_per_s=indexer_rate,
        hbm_bytes_per_s=hbm_peak * device.memory_efficiency,
        eager_launch_s=device.kernel_launch_us * S_PER_US,
        graph_launch_s=graph_launch_s,
        forward_overhead_s=device.forward_overhead_us * S_PER_US,
        tp_tier=device.tier_for(tp),
        ep_tier=device.tier_for(max(tp, shard["moe_group_size"])),
        pp_tier=device.tier_for(tp * pp),
        **memory,
        notes=tuple(notes),
        sixteen_bit_parts=sixteen_bit,
        **fits,
        gdn_chunk_efficiency=_gdn_chunk_efficiency(device),
        tp_group_all_to_all=tp_group_all_to_all,
    )


def _gemm_fits(
    model: ModelArchitecture,
    device: Device,
    quantization: Quantization,
    compute: DType,
    kernel_engine: str | None,
    hbm_peak: float,
    floors: tuple[float, float | None],
    *,
    served: bool,
) -> tuple[FittedGemm | None, FittedGemm | None]:
    """The fitted GEMM curve of the linear layers' matrix path and the 16-bit one (None: the
    defaults); ``floors``: the graph launch and the in-graph floor, s. Served, the quantized
    GEMM's floor is capped at the 16-bit one's (:func:`build_plan`)."""
    fmt = quantization.linear_format
    label = gemm_label(quantization, model.native_linear)
    if quantization.linear is LinearQuantAction.MXFP4 or compute is not fmt.compute_dtype:
        label = None  # another matrix path than the measured kernels'
    graph_launch_s, in_graph_s = floors
    bf16_fit = fitted_gemm(
        device=device.name,
        engine=kernel_engine,
        label=GEMM_16BIT,
        peak_flops_per_s=device.peak_bf16_tflops * FLOPS_PER_TFLOP,
        peak_hbm_bytes_per_s=hbm_peak,
        graph_launch_s=graph_launch_s,
        in_graph_s=in_graph_s,
    )
    gemm_fit = fitted_gemm(
        device=device.name,
        engine=kernel_engine,
        label=label,
        peak_flops_per_s=(device.peak_tflops(compute) or device.peak_bf16_tflops) * FLOPS_PER_TFLOP,
        peak_hbm_bytes_per_s=hbm_peak,
        graph_launch_s=graph_launch_s,
        in_graph_s=in_graph_s,
        fixed_cap_s=bf16_fit.fixed_s if served and bf16_fit is not None else None,
    )
    return gemm_fit, bf16_fit


def _moe_and_comm_fits(
    model: ModelArchitecture,
    device: Device,
    quantization: Quantization,
    mxfp4: tuple[Mxfp4Activation, Mxfp4MoeKernel],
    compute: DType,
    kernel_engine: str | None,
    hbm_peak: float,
    floors_s: tuple[float, float | None],
) -> tuple[FittedMoe | None, FittedComm | None]:
    """The fitted routed experts and collectives of ``kernel_engine`` (None: defaults);
    ``floors_s``: the captured-graph launch cost and the in-graph floor (None: none)."""
    if kernel_engine is None:
        return None, None
    from app.core.runner.kernel_fit_comm import fitted_comm
    from app.core.runner.kernel_fit_moe import fitted_moe

    moe_fit = None
    if model.moe is not None:
        moe_fit = fitted_moe(
            device=device.name,
            engine=kernel_engine,
            label=_moe_fit_label(model, quantization, mxfp4[0], compute, mxfp4[1]),
            peak_flops_per_s=(device.peak_tflops(compute) or device.peak_bf16_tflops)
            * FLOPS_PER_TFLOP,
            peak_hbm_bytes_per_s=hbm_peak,
            graph_launch_s=floors_s[0],
            in_graph_s=floors_s[1],
        )
    return moe_fit, fitted_comm(device.name, kernel_engine)


def _attention_fits(
    model: ModelArchitecture,
    device: Device,
    quantization: Quantization,
    kernel_engine: str | None,
    hbm_peak: float,
    floors_s: tuple[float, float | None],
) -> tuple[FittedAttention | None, FittedAttention | None]:
    """The fitted prefill and decode attention kernels of ``kernel_engine`` (None: defaults;
    ``floors_s`` as for :func:`_moe_and_comm_fits`). A sparse-indexer model's top-k attention
    is another kernel than the measured dense ones."""
    if kernel_engine is None or model.sparse_indexer is not None:
        return None, None
    from app.core.runner.kernel_fit_attention import (
        CONTEXT_ATTENTION,
        CONTEXT_MLA,
        GENERATION_ATTENTION,
        GENERATION_MLA,
        attention_labels,
        fitted_attention,
    )

    families = (
        (CONTEXT_MLA, GENERATION_MLA)
        if model.mla is not None
        else (CONTEXT_ATTENTION, GENERATION_ATTENTION)
    )
    bf16 = device.peak_bf16_tflops * FLOPS_PER_TFLOP
    fp8 = device.peak_tflops(device.compute_path(DType.FP8)) or device.peak_bf16_tflops
    peaks = {False: bf16, True: fp8 * FLOPS_PER_TFLOP}
    labels = attention_labels(quantization.attention)
    prefill, decode = (
        fitted_attention(
            device=device.name,
            engine=kernel_engine,
            family=family,
            labels=labels,
            peak_flops_per_s=peaks,
            peak_hbm_bytes_per_s=hbm_peak,
            graph_launch_s=floors_s[0],
            in_graph_s=floors_s[1],
        )
        for family in families
    )
    return prefill, decode


def _gdn_fit(
    model: ModelArchitecture,
    device: Device,
    kernel_engine: str | None,
    hbm_peak: float,
    floors_s: tuple[float, float | None],
) -> FittedGdn | None:
    """The fitted Gated DeltaNet kernels of ``kernel_engine`` for a model with linear-attention
    layers (None: defaults; ``floors_s`` as for :func:`_moe_and_comm_fits`)."""
    if kernel_engine is None or model.linear_attention is None:
        return None
    from app.core.runner.kernel_fit_gdn import fitted_gdn

    return fitted_gdn(
        device=device.name,
        engine=kernel_engine,
        peak_flops_per_s=device.peak_bf16_tflops * FLOPS_PER_TFLOP,
        peak_hbm_bytes_per_s=hbm_peak,
        graph_launch_s=floors_s[0],
        in_graph_s=floors_s[1],
    )


def _gdn_chunk_efficiency(device: Device) -> float:
    """The share of its roofline Gated DeltaNet's chunked prefill kernel reaches on ``device``
    without a fitted curve: the 910B / 910C's Triton kernels run far below it
    (:data:`~app.core.catalog.device_table.TRITON_GDN_DEVICES`), other devices at 1."""
    return NPU_TRITON_GDN_CHUNK_EFFICIENCY if device.name in TRITON_GDN_DEVICES else 1.0


def _dsa_fit(
    model: ModelArchitecture,
    device: Device,
    kernel_engine: str | None,
    hbm_peak: float,
    floors_s: tuple[float, float | None],
) -> FittedDsa | None:
    """The fitted DSA kernels of ``kernel_engine`` for a model with a sparse indexer (None:
    the analytic pricing; ``floors_s`` as for :func:`_moe_and_comm_fits`). The indexer's
    scores are an FP8 kernel, the top-k and the sparse MLA run at the 16-bit peak."""
    if kernel_engine is None or model.sparse_indexer is None:
        return None
    from app.core.runner.kernel_fit_dsa import (
        DSA_LOGITS,
        DSA_LOGITS_DECODE,
        DSA_SPARSE_MLA,
        DSA_TOPK,
        fitted_dsa,
    )

    bf16 = device.peak_bf16_tflops * FLOPS_PER_TFLOP
    fp8 = (device.peak_tflops(device.compute_path(DType.FP8)) or device.peak_bf16_tflops) * (
        FLOPS_PER_TFLOP
    )
    return fitted_dsa(
        device=device.name,
        engine=kernel_engine,
        peak_flops_per_s={
            DSA_LOGITS: fp8,
            DSA_LOGITS_DECODE: fp8,
            DSA_TOPK: bf16,
            DSA_SPARSE_MLA: bf16,
        },
        peak_hbm_bytes_per_s=hbm_peak,
        graph_launch_s=floors_s[0],
        in_graph_s=floors_s[1],
    )


def _weights_bytes(
    model: ModelArchitecture,
    *,
    tp: int,
    pp: int,
    ep: int,
    moe_tp: int,
    kv_local: int,
    wbytes: float,
    sixteen_bit: frozenset[str] = frozenset(),
    expert_slots: int = 0,
) -> tuple[float, float]:
    """Weight bytes on the busiest device, and of the MTP modules (if used); ``sixteen_bit``:
    the parts held in 16 bits whatever ``wbytes``; ``expert_slots``: the routed experts'
    slots over the ``ep`` ranks (0: one per expert)."""
    h = model.hidden_size
    half = BYTES_16BIT

    def part_bytes(part: str) -> float:
        return half if part in sixteen_bit else wbytes

    attn_bytes = part_bytes(SIXTEEN_BIT_ATTENTION)  # with a sparse indexer's projections
    if model.mla is not None:
        m = model.mla
        heads = model.num_heads // tp
        replicated = h * (m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim)
        split = (
            (m.q_lora_rank if m.q_lora_rank else h) * heads * m.qk_head_dim
            + m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim)
            + heads * m.v_head_dim * h
        )
        attn = (replicated + split) * attn_bytes
        if model.sparse_indexer is not None:
            # Replicated on every TP rank (the engines' ReplicatedLinear): wq_b and wk follow
            # the checkpoint's quantization, weights_proj and k_norm stay 16-bit.
            ix = model.sparse_indexer
            ix_quantized = m.q_lora_rank * ix.n_heads * ix.head_dim + h * ix.head_dim
            ix_16bit = ix.params(h, m.q_lora_rank) - ix_quantized
            attn += ix_quantized * attn_bytes + ix_16bit * half
    else:
        q_out = model.num_heads * model.head_dim // tp
        kv_out = KV_TENSORS * kv_local * model.head_dim
        gate_out = q_out if model.attn_output_gate else 0
        attn = (h * (q_out + gate_out + kv_out) + q_out * h) * attn_bytes
    linear_attn = _linear_attention_weights_bytes(model, tp, wbytes)
    norms = model.norm_params_per_layer * half
    dense = model.dense_mlp_params_per_layer / tp * part_bytes(SIXTEEN_BIT_DENSE_MLP)
    moe_layer = 0.0
    if model.moe is not None:
        mo = model.moe
        per_expert = model.mlp_matrices * h * mo.expert_intermediate_size
        moe_layer = (
            (expert_slots or mo.num_experts) / ep * per_expert / moe_tp * wbytes
            + model.mlp_matrices
            * h
            * mo.shared_intermediate_size
            / tp
            * part_bytes(SIXTEEN_BIT_SHARED_EXPERTS)
            + h * mo.num_experts * half
        )
    layers = 0.0
    for group in model.layer_groups:
        ffn = moe_layer if group.ffn is FfnKind.MOE else dense
        mixer = linear_attn if group.attention is LayerAttention.LINEAR else attn
        layers += group.count * (mixer + norms + ffn)
    layers *= math.ceil(model.num_layers / pp) / model.num_layers
    vocab = (model.embedding_params + model.lm_head_params) / tp * half
    mtp = 0.0
    if model.num_mtp_layers:
        ffn = moe_layer if model.moe is not None else dense
        mtp = model.num_mtp_layers * (MTP_EH_INPUTS * h * h / tp * wbytes + attn + norms + ffn)
    else:
        mtp = _eagle3_weights_bytes(model, tp, attn / attn_bytes * half)
    return layers + vocab + h * half, mtp


def eagle3_qkv_outputs(model: ModelArchitecture) -> int:
    """Outputs of an EAGLE-3 draft layer's QKV projection (the target's query and KV heads)."""
    return (model.num_heads + KV_TENSORS * model.num_kv_heads) * model.head_dim


def _eagle3_weights_bytes(model: ModelArchitecture, tp: int, attention_bytes: float) -> float:
    """The one-layer EAGLE-3 draft head a model without MTP layers drafts with, on one TP rank
    in 16 bits (the released heads are BF16): ``fc`` (3h -> h), one decoder layer with the
    target's attention (its QKV reads ``[embedding ; hidden]``, 2h) and a dense MLP of the
    target's ``intermediate_size``, and an LM head over the draft vocabulary."""
    h = model.hidden_size
    params = (
        EAGLE3_FC_INPUTS * h * h
        + h * eagle3_qkv_outputs(model)  # the second h of the QKV input
        + model.dense_mlp_params_per_layer
        + h * EAGLE3_DRAFT_VOCAB
    ) / tp + model.norm_params_per_layer
    return attention_bytes + params * BYTES_16BIT


def _linear_attention_weights_bytes(model: ModelArchitecture, tp: int, wbytes: float) -> float:
    """One Gated DeltaNet layer on one TP rank: the in_proj and out_proj GEMM weights at the
    linear format, split over heads; conv1d (split over channels), A_log and dt_bias (over
    heads) and the replicated gated-norm weight in 16 bits."""
    dims = model.linear_attention
    if dims is None:
        return 0.0
    h = model.hidden_size
    gemms = (h * dims.in_proj_outputs + dims.value_dim * h) / tp * wbytes
    split = dims.conv_dim * dims.conv_kernel_size + GDN_PARAMS_PER_VALUE_HEAD * dims.num_value_heads
    return gemms + (split / tp + dims.value_head_dim) * BYTES_16BIT
