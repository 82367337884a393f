"""Measured kernel latencies priced with the runner's own op costs (``validate --kernels``).

The measurements are NVIDIA AIConfigurator's per-kernel tables (``aiconfigurator-core`` 0.12.0,
Apache-2.0; see ``NOTICE`` and ``docs/kernels.md``): one table per ``<system>/<op>/<engine>/
<version>/<table>.parquet``. This module knows nothing of parquet: a reader hands it each row's
*key* (the values of :data:`KEY_COLUMNS` for the row's table, in that order) and it answers with
a :class:`KernelPrediction`: the runner's latency of that op shape on the system's catalog device,
or the reason the runner cannot represent it. Nothing here copies AIConfigurator's models; only
the column meanings are read.

Every prediction is one :class:`~app.core.runner.layers.ForwardBuilder` op (or the ops of one
fused kernel) on a :class:`~app.core.runner.plan.ShardPlan` built for a one-layer model of the
measured shape, so the runner's rates, ramps, bytes and fixed costs apply unchanged:

- GEMM ``m x k`` times ``k x n``: ``ForwardBuilder.gemm`` at the table's quantization.
- MoE: ``moe_experts`` (grouped up GEMM, activation, grouped down GEMM over the experts the
  tokens touch) and ``moe_combine_sum``, the parts of the engines' fused MoE kernel;
  ``num_tokens`` tokens route ``topk`` of ``num_experts`` experts, ``moe_ep_size`` devices hold
  the experts and each expert is split ``moe_tp_size`` ways. Non-gated experts
  (:data:`NONGATED_MOE`) have two matrices; ``fp8_block`` runs a block-FP8 checkpoint's path.
- context / generation attention: ``gqa_attention_kernel`` for ``batch_size`` requests of
  ``isl`` new tokens over ``isl + step`` positions (a ``window_size`` above 0: a sliding-window
  layer of that window).
- context / generation MLA: ``mla_attention_kernel`` (prefill / decode) with DeepSeek-V3's
  MLA sizes (the tables give only the local head count).
- MLA BMMs: ``mla_bmm`` (``q_absorb`` for ``mla_gen_pre``, ``v_up`` for ``mla_gen_post``).
- Gated DeltaNet: ``gdn_conv1d`` (the ``causal_conv1d_*`` kernels) and ``gdn_delta_rule`` (the
  chunked / fused-recurrent delta-rule kernels) for ``batch_size`` requests of ``seq_len``
  tokens, ``num_k_heads`` / ``num_v_heads`` local heads; a ``generation`` row is a decode.
- DSA (GLM-5's kernel tables, ``glm5_*_module_perf``; the ``kernel-level`` rows time single
  kernels): ``ForwardBuilder.indexer_scores`` (the indexer's FP8 scores, DeepGEMM
  ``fp8_mqa_logits``, and its top-k, ``fast_topk_transform_fused``, one op each) and the
  sparse MLA kernel (``flash_mla_sparse_fwd``) for ``batch_size`` requests of ``isl`` new
  tokens over ``isl + step`` positions, GLM-5's MLA and indexer sizes with the table's
  ``num_heads``. A top-k row measured 0 is the kernel skipped (the context fits in the top-k).
  The ``dsa_*_module`` tables time whole attention modules and stay refused.
- collectives: ``ForwardBuilder.collective`` over ``num_gpus`` devices of the system's tiers.

The fixed cost per kernel is the runner's captured-graph cost (the collectors time kernels back
to back, without host launch gaps), except for a collective measured eagerly (``backend`` ending
in ``_eager``), which pays the eager cost.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from app.core.catalog.architecture import (
    AttentionKind,
    FfnKind,
    LayerAttention,
    LayerGroup,
    LinearAttentionDims,
    MlaDims,
    ModelArchitecture,
    MoeDims,
    SparseIndexerDims,
)
from app.core.catalog.hardware import Device
from app.core.catalog.quantization import AttentionQuantAction, LinearQuantAction, Quantization
from app.core.cost import ForwardShape
from app.core.errors import ChunkwiseError
from app.core.limits import KernelSplit
from app.core.parallel import ParallelLayout
from app.core.profiles import Mxfp4Activation, Mxfp4MoeKernel
from app.core.runner.comm import Collective
from app.core.runner.kernel_fit import FP8_BLOCK
from app.core.runner.kernel_fit_comm import NCCL_ENGINE
from app.core.runner.kernel_fit_dsa import DSA_LOGITS, DSA_SPARSE_MLA, DSA_TOPK
from app.core.runner.kernel_fit_moe import (
    MXFP4_MARLIN_MOE_LABEL,
    SkewCurve,
    kernel_fit_moe,
    moe_table_label,
)
from app.core.runner.layers import MLA_Q_ABSORB, MLA_V_UP, ForwardBuilder, attended_pairs
from app.core.runner.plan import ShardPlan, build_plan

#: AIConfigurator system folder -> catalog device (``app/core/catalog/device_table.py``).
SYSTEM_DEVICES: Mapping[str, str] = {
    "a100_sxm": "NVIDIA_A100_SXM_80G",
    "a100_pcie": "NVIDIA_A100_PCIE_80G",
    "a30": "NVIDIA_A30_24G",
    "h100_sxm": "NVIDIA_H100_SXM_80G",
    "h100_pcie": "NVIDIA_H100_PCIE_80G",
    "h200_sxm": "NVIDIA_H200_SXM_141G",
    "l4": "NVIDIA_L4_24G",
    "l40s": "NVIDIA_L40S_48G",
    "rtx_pro_6000_server": "NVIDIA_RTX_PRO_6000_SERVER_96G",
    "b200_sxm": "NVIDIA_B200_SXM_180G",
    "gb200": "NVIDIA_GB200_186G",
    "b300_sxm": "NVIDIA_B300_SXM_288G",
    "gb300": "NVIDIA_GB300_288G",
    "b60": "INTEL_ARC_PRO_B60_24G",
}


class KernelFamily(enum.StrEnum):
    """The measured tables the runner prices (by table name, the parquet file's stem)."""

    GEMM = "gemm"
    MOE = "moe"
    CONTEXT_ATTENTION = "context_attention"
    GENERATION_ATTENTION = "generation_attention"
    CONTEXT_MLA = "context_mla"
    GENERATION_MLA = "generation_mla"
    MLA_BMM = "mla_bmm"
    GDN = "gdn"
    DSA = "dsa"
    CUSTOM_ALL_REDUCE = "custom_all_reduce"
    NCCL = "nccl"


#: Table name -> family. Every other table is refused whole (:func:`table_refusal`).
KERNEL_TABLES: Mapping[str, KernelFamily] = {
    "gemm_perf": KernelFamily.GEMM,
    "moe_perf": KernelFamily.MOE,
    "context_attention_perf": KernelFamily.CONTEXT_ATTENTION,
    "generation_attention_perf": KernelFamily.GENERATION_ATTENTION,
    "context_mla_perf": KernelFamily.CONTEXT_MLA,
    "generation_mla_perf": KernelFamily.GENERATION_MLA,
    "mla_bmm_perf": KernelFamily.MLA_BMM,
    "gdn_perf": KernelFamily.GDN,
    "glm5_mqa_logits_module_perf": KernelFamily.DSA,
    "glm5_topk_module_perf": KernelFamily.DSA,
    "glm5_dsa_attn_module_perf": KernelFamily.DSA,
    "custom_allreduce_perf": KernelFamily.CUSTOM_ALL_REDUCE,
    "nccl_perf": KernelFamily.NCCL,
    "oneccl_perf": KernelFamily.NCCL,
}

#: The columns a family's prediction reads, in the order :meth:`KernelPricer.price` takes them
#: (a column a table lacks is passed as ``None``).
_ATTENTION_KEY = (
    "attn_dtype",
    "kv_cache_dtype",
    "batch_size",
    "isl",
    "step",
    "num_heads",
    "num_key_value_heads",
    "head_dim",
    "window_size",
)
_MLA_KEY = ("mla_dtype", "kv_cache_dtype", "batch_size", "isl", "step", "num_heads")
KEY_COLUMNS: Mapping[KernelFamily, tuple[str, ...]] = {
    KernelFamily.GEMM: ("gemm_dtype", "m", "n", "k"),
    KernelFamily.MOE: (
        "moe_dtype",
        "num_tokens",
        "hidden_size",
        "inter_size",
        "topk",
        "num_experts",
        "moe_tp_size",
        "moe_ep_size",
        "distribution",
        "kernel_source",
    ),
    KernelFamily.CONTEXT_ATTENTION: _ATTENTION_KEY,
    KernelFamily.GENERATION_ATTENTION: _ATTENTION_KEY,
    KernelFamily.CONTEXT_MLA: _MLA_KEY,
    KernelFamily.GENERATION_MLA: _MLA_KEY,
    KernelFamily.MLA_BMM: ("bmm_dtype", "op_name", "num_tokens", "num_heads"),
    KernelFamily.GDN: (
        "kernel_source",
        "phase",
        "batch_size",
        "seq_len",
        "num_k_heads",
        "head_k_dim",
        "num_v_heads",
        "head_v_dim",
        "d_conv",
    ),
    KernelFamily.DSA: (
        "kernel_source",
        "kv_cache_dtype",
        "batch_size",
        "isl",
        "step",
        "num_heads",
        "score_mode",
    ),
    KernelFamily.CUSTOM_ALL_REDUCE: ("allreduce_dtype", "num_gpus", "message_size", "backend"),
    KernelFamily.NCCL: ("nccl_dtype", "op_name", "num_gpus", "message_size"),
}

#: Why whole tables are refused, by table name prefix (the first match wins).
_TABLE_REFUSALS: tuple[tuple[str, str], ...] = (
    ("wideep_", "wide-EP (DeepEP) module measurement: the runner prices EP as collectives"),
    ("dsv4_megamoe", "DeepSeek-V4 MegaMoE module: no runner op"),
    ("moe_a2a", "MoE all-to-all with token routing: not mapped in this increment"),
    ("trtllm_alltoall", "MoE all-to-all with token routing: not mapped in this increment"),
    ("kda", "Kimi delta attention: the runner has no KDA layer"),
    ("mamba2", "Mamba2: the runner has no Mamba2 layer"),
    ("encoder_attention", "encoder attention: the runner has no encoder"),
    ("mhc", "manifold hyper-connections: the runner has no mHC op"),
    ("computescale", "activation quantization kernel: the runner folds it into its GEMMs"),
    ("scale_matrix", "activation quantization kernel: the runner folds it into its GEMMs"),
)
_MODULE_REFUSAL = "module measurement (several ops fused): the runner prices ops, not modules"
_SPARSE_REFUSAL = (
    "sparse-attention kernel (DSA / DeepSeek-V4 / GLM-5): not mapped in this increment"
)
NON_POSITIVE_MEASUREMENT = "measured latency missing or not positive"
NO_DEVICE = "no catalog device for this system"


def table_refusal(table: str) -> str | None:
    """Why the runner cannot price any row of ``table`` (None: :data:`KERNEL_TABLES` has it)."""
    if table in KERNEL_TABLES:
        return None
    for prefix, reason in _TABLE_REFUSALS:
        if table.startswith(prefix):
            return reason
    if table.startswith(("dsa_", "dsv4_", "glm5_", "msa_")):
        return _MODULE_REFUSAL if "_module" in table else _SPARSE_REFUSAL
    if "_module" in table:
        return _MODULE_REFUSAL
    return f"table {table}: no runner op"


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelPrediction:
    """The runner's latency of one measured shape, or why there is none.

    ``op`` is the group label (the family; MoE with a skewed token distribution is reported
    apart), ``quantization`` the measured dtype label, ``band`` the shape band of the report.
    """

    op: str
    quantization: str
    band: str
    predicted_ms: float | None
    reason: str = ""


# -- quantization of each table's dtype columns -------------------------------------------------
_GEMM_QUANT: Mapping[str, LinearQuantAction] = {
    "bfloat16": LinearQuantAction.DISABLED,
    "float16": LinearQuantAction.DISABLED,
    "fp8": LinearQuantAction.FP8,
    "fp8_block": LinearQuantAction.FP8,  # the runner has no block-scale cost of its own
    "int8_wo": LinearQuantAction.W8A16_STATIC,
    "int4_wo": LinearQuantAction.W4A16,
    "sq": LinearQuantAction.W8A8_STATIC,  # SmoothQuant: INT8 weights and activations
    "nvfp4": LinearQuantAction.NVFP4,
}
#: MoE dtypes with MXFP4 weights: the activations their GEMMs run with.
_MXFP4_MOE: Mapping[str, Mxfp4Activation] = {
    "w4a16_mxfp4": "bf16",
    "w4a8_mxfp4_mxfp8": "fp8",
}
_EIGHT_BIT = frozenset({"fp8", "fp8_e4m3", "int8"})
_SIXTEEN_BIT = frozenset({"bfloat16", "float16", "half"})
_ELEMENT_BYTES: Mapping[str, float] = {
    "bfloat16": 2.0,
    "float16": 2.0,
    "half": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "float32": 4.0,
    "float": 4.0,
}
_MLA_BMMS: Mapping[str, str] = {"mla_gen_pre": MLA_Q_ABSORB, "mla_gen_post": MLA_V_UP}
_NCCL_OPS: Mapping[str, Collective] = {
    "all_reduce": Collective.ALL_REDUCE,
    "all_gather": Collective.ALL_GATHER,
    "reduce_scatter": Collective.REDUCE_SCATTER,
    "alltoall": Collective.ALL_TO_ALL,
    "all_to_all": Collective.ALL_TO_ALL,
}

# DeepSeek-V3 / R1 MLA sizes (its config.json): the collectors' MLA shapes.
DEEPSEEK_V3_MLA = MlaDims(
    q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128
)
DEEPSEEK_V3_HIDDEN = 7168
# GLM-5's MLA and indexer sizes (its config.json): the collectors' DSA kernel shapes.
GLM5_MLA = MlaDims(
    q_lora_rank=2048, kv_lora_rank=512, qk_nope_head_dim=192, qk_rope_head_dim=64, v_head_dim=256
)
GLM5_INDEXER = SparseIndexerDims(topk=2048, n_heads=32, head_dim=128)
GLM5_HIDDEN = 6144
_BALANCED = "balanced"
_SCOPE = "kernel"
_LAYER = LayerGroup(ffn=FfnKind.DENSE, sliding_window=None, count=1)
_MOE_LAYER = LayerGroup(ffn=FfnKind.MOE, sliding_window=None, count=1)
_LINEAR_LAYER = LayerGroup(
    ffn=FfnKind.DENSE, sliding_window=None, count=1, attention=LayerAttention.LINEAR
)
_GDN_OPS = (("conv1d", "gdn_conv1d"), ("delta_rule", "gdn_delta_rule"))
#: DSA kernels by a marker of their ``kernel_source``.
_DSA_OPS = (("mqa_logits", DSA_LOGITS), ("topk", DSA_TOPK), ("mla_sparse", DSA_SPARSE_MLA))
_GENERATION = "generation"
_DECODE = ForwardShape(is_decode=True, concurrency=1, query_len=1, seq_len=1)
_EAGER_SUFFIX = "_eager"
#: MoE kernels of a non-gated (up, activation, down) expert MLP, by their ``kernel_source``.
_NONGATED = "nongated"
#: (hidden_size, inter_size, topk, num_experts) of the measured MoE shapes that are non-gated
#: in every engine's table: the shapes the wheel's TensorRT-LLM tables measure with
#: ``moe_torch_flow_nongated`` (NVIDIA Nemotron-H's squared-ReLU experts); the vLLM and SGLang
#: tables measure them too but do not label them.
NONGATED_MOE = frozenset(
    {
        (1024, 2688, 22, 512),
        (2048, 5120, 22, 512),
        (2688, 1856, 6, 128),
        (4096, 2688, 22, 512),
        (8192, 5120, 22, 512),
    }
)
#: TensorRT-LLM's opt-in min-latency MoE kernel (``kernel_source``): reported apart.
MIN_LATENCY_MOE = "min_latency"
_KIB = 1024
_MIB = 1024 * 1024


class _Refused(Exception):
    """A point the runner cannot represent (its message is the reason)."""


def _int(value: object, name: str) -> int:
    if type(value) is int and value >= 0:  # not a bool (type, not isinstance)
        return value
    raise _Refused(f"{name} is not a non-negative integer")


def _positive(value: object, name: str) -> int:
    if type(value) is int and value >= 1:
        return value
    if type(value) is int:
        raise _Refused(f"{name} is not a positive integer")
    raise _Refused(f"{name} is not a non-negative integer")


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _attention_quant(compute: str, kv: str) -> AttentionQuantAction:
    """The runner's attention action for a measured (compute dtype, KV dtype): FP8 computes and
    stores in 8 bits; an 8-bit KV cache read by 16-bit compute is the INT8 action (the same
    bytes, the 16-bit rate)."""
    if compute in _SIXTEEN_BIT and kv in _SIXTEEN_BIT:
        return AttentionQuantAction.DISABLED
    if compute in _EIGHT_BIT and kv in _EIGHT_BIT:
        return AttentionQuantAction.FP8
    if compute in _SIXTEEN_BIT and kv in _EIGHT_BIT:
        return AttentionQuantAction.INT8
    raise _Refused(f"attention in {compute or '?'} over a {kv or '?'} KV cache: no runner action")


def _band(value: float, edges: Sequence[tuple[float, str]], last: str) -> str:
    for edge, label in edges:
        if value <= edge:
            return label
    return last


_M_BANDS = ((128.0, "M<=128"), (1024.0, "M 129-1024"))
_TOKENS_PER_EXPERT_BANDS = (
    (1.0, "tok/expert<=1"),
    (16.0, "tok/expert 1-16"),
    (128.0, "tok/expert 16-128"),
)
_CONTEXT_BANDS = ((1024.0, "ctx<=1k"), (8192.0, "ctx 1k-8k"))
_MESSAGE_BANDS = ((64.0 * _KIB, "msg<=64KiB"), (4.0 * _MIB, "msg 64KiB-4MiB"))


def _quantization_label(family: KernelFamily, key: Sequence[object]) -> str:
    """A refused row's quantization label: its dtype column (the first key column of every
    family but Gated DeltaNet, whose tables have none)."""
    if family in (KernelFamily.GDN, KernelFamily.DSA) or not key:
        return ""
    return _text(key[0])


def _attention_prediction(
    family: KernelFamily, compute: str, kv: str, band: str, builder: ForwardBuilder
) -> KernelPrediction:
    """An attention kernel's prediction, labelled with its compute and KV dtypes."""
    return KernelPrediction(
        op=family.value,
        quantization=f"{compute}/kv {kv}",
        band=band,
        predicted_ms=builder.latency_ms(),
    )


def _model(
    *,
    heads: int,
    kv_heads: int,
    head_dim: int,
    hidden: int,
    intermediate: int = 1,
    moe: MoeDims | None = None,
    mla: MlaDims | None = None,
    linear: LinearAttentionDims | None = None,
    gated: bool = True,
    native_linear: str | None = None,
) -> ModelArchitecture:
    """A one-layer model whose one op of interest has the measured shape."""
    layer = _LAYER
    if moe is not None:
        layer = _MOE_LAYER
    elif linear is not None:
        layer = _LINEAR_LAYER
    return ModelArchitecture(
        name="kernel",
        model_type="kernel",
        hidden_size=hidden,
        num_layers=1,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=1,
        intermediate_size=intermediate,
        rotary_dim=head_dim,
        attention=AttentionKind.MLA if mla is not None else AttentionKind.GQA,
        mla=mla,
        moe=moe,
        linear_attention=linear,
        layer_groups=(layer,),
        mlp_gated=gated,
        native_linear=native_linear,
    )


class KernelPricer:
    """Prices the measured shapes of one system on its catalog device (plans are memoised);
    ``engine``: the engine whose fitted kernel curves the runner applies (None: the defaults);
    ``version``: its version, whose own MoE curve prices MoE rows where fitted (None, or no
    curve of that version: the runner's default version)."""

    def __init__(
        self, device: Device, engine: str | None = None, version: str | None = None
    ) -> None:
        self.device = device
        self.engine = engine
        self.version = version  # the engine version whose MoE curve prices MoE rows
        self._plans: dict[tuple[object, ...], ShardPlan] = {}
        self._latencies: dict[tuple[object, ...], float] = {}
        self._tokens_per_expert: dict[tuple[object, ...], float] = {}
        self._builders: dict[tuple[int, bool], ForwardBuilder] = {}
        self._pricers: Mapping[KernelFamily, Callable[[Sequence[object]], KernelPrediction]] = {
            KernelFamily.GEMM: self._gemm,
            KernelFamily.MOE: self._moe,
            KernelFamily.CONTEXT_ATTENTION: self._context_attention,
            KernelFamily.GENERATION_ATTENTION: self._generation_attention,
            KernelFamily.CONTEXT_MLA: self._context_mla,
            KernelFamily.GENERATION_MLA: self._generation_mla,
            KernelFamily.MLA_BMM: self._mla_bmm,
            KernelFamily.GDN: self._gdn,
            KernelFamily.DSA: self._dsa,
            KernelFamily.CUSTOM_ALL_REDUCE: self._custom_all_reduce,
            KernelFamily.NCCL: self._nccl,
        }

    def price(self, family: KernelFamily, key: Sequence[object]) -> KernelPrediction:
        """The prediction for one row of a ``family`` table (``key``: its :data:`KEY_COLUMNS`)."""
        try:
            return self._pricers[family](key)
        except _Refused as refusal:
            return KernelPrediction(
                op=family.value,
                quantization=_quantization_label(family, key),
                band="",
                predicted_ms=None,
                reason=str(refusal),
            )
        except ChunkwiseError as err:  # the runner's own refusal of the shape (tiers, sizes)
            return KernelPrediction(
                op=family.value,
                quantization=_quantization_label(family, key),
                band="",
                predicted_ms=None,
                reason=f"runner refuses the shape: {err}",
            )

    # -- plans and builders -------------------------------------------------------------------
    def _plan(self, key: tuple[object, ...], build: Callable[[], ShardPlan]) -> ShardPlan:
        """The plan of ``key`` (``build()`` on its first use)."""
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = build()
        return plan

    def _builder(self, plan: ShardPlan, *, eager: bool = False) -> ForwardBuilder:
        """An empty builder on ``plan`` whose ops pay the captured-graph fixed cost (the eager
        one if ``eager``); one per plan, emptied for each shape."""
        key = (id(plan), eager)  # plans live as long as the pricer (self._plans)
        builder = self._builders.get(key)
        if builder is None:
            builder = ForwardBuilder(plan, (_DECODE,), graph_mode=not eager, detail=False)
            self._builders[key] = builder
        builder.totals_ms.clear()
        return builder

    # -- families -----------------------------------------------------------------------------
    def _gemm(self, key: Sequence[object]) -> KernelPrediction:
        dtype, m, n, k = _text(key[0]), key[1], key[2], key[3]
        linear = _GEMM_QUANT.get(dtype)
        if linear is None:
            raise _Refused(f"GEMM dtype {dtype or '?'}: no runner quantization")
        rows, cols, depth = _positive(m, "m"), _positive(n, "n"), _positive(k, "k")
        # A block-scaled FP8 checkpoint is a DeepSeek-style one (``native_linear`` FP8).
        model = _GEMM_BLOCK_FP8_MODEL if dtype == FP8_BLOCK else _GEMM_MODEL
        plan = self._plan(
            ("gemm", linear, model.native_linear),
            lambda: build_plan(
                model,
                self.device,
                _SINGLE,
                Quantization(linear=linear),
                kernel_engine=self.engine,
            ),
        )
        builder = self._builder(plan)
        builder.gemm("gemm", _SCOPE, 1, rows, depth, cols)
        return KernelPrediction(
            op=_OP_GEMM,
            quantization=dtype,
            band=_band(rows, _M_BANDS, "M>1024"),
            predicted_ms=builder.latency_ms(),
        )

    def _moe(self, key: Sequence[object]) -> KernelPrediction:
        dtype = _text(key[0])
        tokens = _positive(key[1], "num_tokens")
        hidden, inter = _positive(key[2], "hidden_size"), _positive(key[3], "inter_size")
        topk, experts = _positive(key[4], "topk"), _positive(key[5], "num_experts")
        moe_tp, moe_ep = _positive(key[6], "moe_tp_size"), _positive(key[7], "moe_ep_size")
        distribution = _text(key[8]) or _BALANCED
        kernel = _text(key[9]) if len(key) > 9 else ""
        gated = _NONGATED not in kernel and (hidden, inter, topk, experts) not in NONGATED_MOE
        activation: Mxfp4Activation = "fp4"
        # One dtype, two kernels (Marlin and the engine's own MXFP4 kernel): each its own curve.
        label = moe_table_label(dtype, kernel)
        moe_kernel: Mxfp4MoeKernel = "marlin" if label == MXFP4_MARLIN_MOE_LABEL else "default"
        if dtype in _MXFP4_MOE:
            linear = LinearQuantAction.MXFP4
            activation = _MXFP4_MOE[dtype]
        elif dtype in _GEMM_QUANT:
            linear = _GEMM_QUANT[dtype]
        else:
            raise _Refused(f"MoE dtype {dtype or '?'}: no runner quantization")
        if topk > experts:
            raise _Refused("topk exceeds num_experts")
        # The same runner shape recurs under every token distribution: priced once.
        shape_key = (
            "moe",
            tokens,
            hidden,
            inter,
            topk,
            experts,
            moe_tp,
            moe_ep,
            linear,
            activation,
            gated,
            moe_kernel,
            dtype == FP8_BLOCK,
        )
        latency_ms = self._latencies.get(shape_key)
        if latency_ms is None:
            devices = moe_tp * moe_ep
            plan = self._plan(
                shape_key[2:],
                lambda: self._moe_version(
                    build_plan(
                        _model(
                            heads=devices,
                            kv_heads=devices,
                            head_dim=1,
                            hidden=hidden,
                            moe=MoeDims(
                                num_experts=experts,
                                experts_per_token=topk,
                                expert_intermediate_size=inter,
                            ),
                            gated=gated,
                            native_linear=LinearQuantAction.FP8.value if shape_key[-1] else None,
                        ),
                        self.device,
                        ParallelLayout(tp=devices, ep=moe_ep),
                        Quantization(linear=linear),
                        activation,
                        kernel_engine=self.engine,
                        mxfp4_moe_kernel=moe_kernel,
                    )
                ),
            )
            builder = self._builder(plan)
            builder.moe_experts(_SCOPE, 1, tokens)
            builder.moe_combine_sum(_SCOPE, 1, tokens)
            latency_ms = self._latencies[shape_key] = builder.latency_ms()
            routes, touched, _ = builder.expert_load(tokens)
            self._tokens_per_expert[shape_key] = routes / touched if touched > 0 else routes
        skew = self._skew(distribution)
        if skew is not None:  # a skewed distribution: the fitted factor over the balanced time
            latency_ms *= skew.factor_at(self._tokens_per_expert[shape_key])
        # The runner routes tokens uniformly; a skewed distribution is reported apart (priced
        # with its fitted skew factor where the engine's curves apply), and so is TensorRT-LLM's
        # min-latency MoE (an opt-in mode measured beside the default kernel at the same
        # shapes).
        op = _OP_MOE
        if distribution != _BALANCED:
            op = f"{op}[{distribution}]"
        if MIN_LATENCY_MOE in kernel:
            op = f"{op}[{MIN_LATENCY_MOE}]"
        return KernelPrediction(
            op=op,
            quantization=label,
            band=_band(tokens * topk / experts, _TOKENS_PER_EXPERT_BANDS, "tok/expert>128"),
            predicted_ms=latency_ms,
        )

    def _skew(self, distribution: str) -> SkewCurve | None:
        """The fitted skew factor of ``distribution`` on this device and engine (None: the
        balanced rows, or no fit)."""
        if distribution == _BALANCED or self.engine is None:
            return None
        return kernel_fit_moe().skew.get((self.device.name, self.engine, distribution))

    def _moe_version(self, plan: ShardPlan) -> ShardPlan:
        """``plan`` with the MoE curve of the pricer's engine version, where it has one."""
        fit = plan.moe_fit
        if fit is None or self.engine is None or self.version is None:
            return plan
        curve = kernel_fit_moe().curve(self.device.name, self.engine, fit.label, self.version)
        if curve is None or curve is fit.curve:
            return plan
        return dataclasses.replace(plan, moe_fit=dataclasses.replace(fit, curve=curve))

    def _attention_shape(self, key: Sequence[object], *, decode: bool) -> tuple[ForwardShape, str]:
        batch = _positive(key[2], "batch_size")
        isl = _positive(key[3], "isl")
        step = _int(key[4] if key[4] is not None else 0, "step")
        shape = ForwardShape(is_decode=decode, concurrency=batch, query_len=isl, seq_len=isl + step)
        return shape, _band(shape.seq_len, _CONTEXT_BANDS, "ctx>8k")

    def _gqa(self, key: Sequence[object], family: KernelFamily) -> KernelPrediction:
        compute, kv = _text(key[0]), _text(key[1])
        attention = _attention_quant(compute, kv)
        shape, band = self._attention_shape(key, decode=family is KernelFamily.GENERATION_ATTENTION)
        heads, kv_heads = _positive(key[5], "num_heads"), _positive(key[6], "num_key_value_heads")
        head_dim = _positive(key[7], "head_dim")
        if heads % kv_heads:
            raise _Refused("num_key_value_heads does not divide num_heads")
        window = key[8] if len(key) > 8 else None
        if window is not None and _int(window, "window_size") > 0:
            layer = LayerGroup(
                ffn=FfnKind.DENSE, sliding_window=_int(window, "window_size"), count=1
            )
        else:
            layer = _LAYER
        plan = self._plan(
            ("gqa", heads, kv_heads, head_dim, attention),
            lambda: build_plan(
                _model(heads=heads, kv_heads=kv_heads, head_dim=head_dim, hidden=heads * head_dim),
                self.device,
                _SINGLE,
                Quantization(attention=attention),
                kernel_engine=self.engine,
            ),
        )
        builder = self._builder(plan)
        new_tokens = shape.concurrency * shape.query_len
        builder.gqa_attention_kernel(layer, _SCOPE, 1, shape, new_tokens)
        return _attention_prediction(family, compute, kv, band, builder)

    def _context_attention(self, key: Sequence[object]) -> KernelPrediction:
        return self._gqa(key, KernelFamily.CONTEXT_ATTENTION)

    def _generation_attention(self, key: Sequence[object]) -> KernelPrediction:
        return self._gqa(key, KernelFamily.GENERATION_ATTENTION)

    def _mla_plan(
        self,
        heads: int,
        *,
        linear: LinearQuantAction = LinearQuantAction.DISABLED,
        attention: AttentionQuantAction = AttentionQuantAction.DISABLED,
    ) -> ShardPlan:
        return self._plan(
            ("mla", heads, linear, attention),
            lambda: build_plan(
                _model(
                    heads=heads,
                    kv_heads=heads,
                    head_dim=DEEPSEEK_V3_MLA.v_head_dim,
                    hidden=DEEPSEEK_V3_HIDDEN,
                    mla=DEEPSEEK_V3_MLA,
                ),
                self.device,
                _SINGLE,
                Quantization(linear=linear, attention=attention),
                kernel_engine=self.engine,
            ),
        )

    def _mla(self, key: Sequence[object], family: KernelFamily) -> KernelPrediction:
        compute, kv = _text(key[0]), _text(key[1])
        attention = _attention_quant(compute, kv)
        shape, band = self._attention_shape(key, decode=family is KernelFamily.GENERATION_MLA)
        plan = self._mla_plan(_positive(key[5], "num_heads"), attention=attention)
        builder = self._builder(plan)
        new_tokens = shape.concurrency * shape.query_len
        pairs = shape.concurrency * attended_pairs(shape.query_len, shape.seq_len, None)
        builder.mla_attention_kernel(
            _SCOPE, 1, shape, new_tokens, positions=shape.seq_len, pairs=pairs
        )
        return _attention_prediction(family, compute, kv, band, builder)

    def _context_mla(self, key: Sequence[object]) -> KernelPrediction:
        return self._mla(key, KernelFamily.CONTEXT_MLA)

    def _generation_mla(self, key: Sequence[object]) -> KernelPrediction:
        return self._mla(key, KernelFamily.GENERATION_MLA)

    def _mla_bmm(self, key: Sequence[object]) -> KernelPrediction:
        dtype, op = _text(key[0]), _text(key[1])
        linear = _GEMM_QUANT.get(dtype)
        if linear is None:
            raise _Refused(f"BMM dtype {dtype or '?'}: no runner quantization")
        tokens, heads = _positive(key[2], "num_tokens"), _positive(key[3], "num_heads")
        plan = self._mla_plan(heads, linear=linear)
        builder = self._builder(plan)
        bmm = _MLA_BMMS.get(op)
        if bmm is None:
            raise _Refused(f"MLA BMM {op or '?'}: no runner op")
        builder.mla_bmm(bmm, _SCOPE, 1, tokens)
        return KernelPrediction(
            op=f"{_OP_MLA_BMM}[{op}]",
            quantization=dtype,
            band=_band(tokens, _M_BANDS, "M>1024"),
            predicted_ms=builder.latency_ms(),
        )

    def _gdn(self, key: Sequence[object]) -> KernelPrediction:
        source, phase = _text(key[0]), _text(key[1])
        op = next((name for marker, name in _GDN_OPS if marker in source), None)
        if op is None:
            raise _Refused(f"Gated DeltaNet kernel {source or '?'}: no runner op")
        batch, length = _positive(key[2], "batch_size"), _positive(key[3], "seq_len")
        k_heads, dk = _positive(key[4], "num_k_heads"), _positive(key[5], "head_k_dim")
        v_heads, dv = _positive(key[6], "num_v_heads"), _positive(key[7], "head_v_dim")
        conv = _positive(key[8], "d_conv")
        if v_heads % k_heads:
            raise _Refused("num_v_heads is not a multiple of num_k_heads")
        plan = self._plan(
            ("gdn", k_heads, dk, v_heads, dv, conv),
            lambda: build_plan(
                _model(
                    heads=1,
                    kv_heads=1,
                    head_dim=dk,
                    hidden=v_heads * dv,
                    linear=LinearAttentionDims(
                        num_key_heads=k_heads,
                        num_value_heads=v_heads,
                        key_head_dim=dk,
                        value_head_dim=dv,
                        conv_kernel_size=conv,
                    ),
                ),
                self.device,
                _SINGLE,
                _BF16,
                kernel_engine=self.engine,
            ),
        )
        shape = ForwardShape(
            is_decode=phase == _GENERATION, concurrency=batch, query_len=length, seq_len=length
        )
        builder = self._builder(plan)
        if op == "gdn_conv1d":
            builder.gdn_conv1d(_SCOPE, 1, shape, batch * length)
        else:
            builder.gdn_delta_rule(_SCOPE, 1, shape, batch * length)
        return KernelPrediction(
            op=f"{op}[{phase}]",
            quantization="bfloat16",
            band=_band(batch * length, _M_BANDS, "M>1024"),
            predicted_ms=builder.latency_ms(),
        )

    def _dsa(self, key: Sequence[object]) -> KernelPrediction:
        source, kv = _text(key[0]), _text(key[1])
        op = next((name for marker, name in _DSA_OPS if marker in source), None)
        if op is None:
            raise _Refused(f"DSA kernel {source or '?'}: no runner op")
        batch, isl = _positive(key[2], "batch_size"), _positive(key[3], "isl")
        step = _int(key[4] if key[4] is not None else 0, "step")
        heads = _positive(key[5], "num_heads")
        attention = _attention_quant("bfloat16", kv)
        plan = self._plan(
            ("dsa", heads, attention),
            lambda: build_plan(
                dataclasses.replace(
                    _model(
                        heads=heads,
                        kv_heads=heads,
                        head_dim=GLM5_MLA.v_head_dim,
                        hidden=GLM5_HIDDEN,
                        mla=GLM5_MLA,
                    ),
                    sparse_indexer=GLM5_INDEXER,
                ),
                self.device,
                _SINGLE,
                Quantization(attention=attention),
                kernel_engine=self.engine,
            ),
        )
        shape = ForwardShape(
            is_decode=isl == 1, concurrency=batch, query_len=isl, seq_len=isl + step
        )
        tokens = batch * isl
        builder = self._builder(plan)
        if op == DSA_LOGITS:
            builder.indexer_logits(_LAYER, _SCOPE, 1, shape, tokens)
        elif op == DSA_TOPK:
            builder.indexer_topk(_LAYER, _SCOPE, 1, shape)
        else:
            self._dsa_attention(plan, builder, shape, tokens)
        mode = _text(key[6]) if len(key) > 6 else ""
        return KernelPrediction(
            op=f"{op}[{mode}]" if mode else op,
            quantization=f"kv {kv}",
            band=_band(shape.seq_len, _CONTEXT_BANDS, "ctx>8k"),
            predicted_ms=builder.latency_ms(),
        )

    @staticmethod
    def _dsa_attention(
        plan: ShardPlan, builder: ForwardBuilder, shape: ForwardShape, tokens: int
    ) -> None:
        """The sparse MLA kernel: on its fitted curve where the plan has one, else the
        runner's MLA kernel of the phase as the forward prices it (a decode over the selected
        latents, a prefill decompressed over the whole context)."""
        topk = GLM5_INDEXER.topk
        pairs = shape.concurrency * attended_pairs(shape.query_len, shape.seq_len, topk)
        selected = min(shape.seq_len, topk)
        if plan.dsa_fit is not None and plan.dsa_fit.sparse_mla is not None:
            builder.sparse_mla_kernel(
                _SCOPE, 1, shape, tokens, plan.dsa_fit.sparse_mla, positions=selected, pairs=pairs
            )
            return
        positions = selected if shape.is_decode else shape.seq_len
        builder.mla_attention_kernel(_SCOPE, 1, shape, tokens, positions=positions, pairs=pairs)

    def _collective(
        self,
        kind: Collective,
        dtype: str,
        gpus: object,
        elements: object,
        *,
        eager: bool,
        nccl: bool = False,
    ) -> tuple[float, str]:
        """``nccl``: an NCCL table (priced by the fitted NCCL curves whatever engine's folder
        measured it; an engine's custom all-reduce otherwise)."""
        element_bytes = _ELEMENT_BYTES.get(dtype)
        if element_bytes is None:
            raise _Refused(f"collective dtype {dtype or '?'}: unknown element size")
        devices = _positive(gpus, "num_gpus")
        message_bytes = _positive(elements, "message_size") * element_bytes
        if devices > self.device.max_devices:
            raise _Refused(f"{devices} devices exceed the device's {self.device.max_devices}")
        engine = NCCL_ENGINE if nccl and self.engine is not None else self.engine
        plan = self._plan(
            ("collective", devices, engine),
            lambda: build_plan(
                _model(heads=devices, kv_heads=devices, head_dim=1, hidden=devices),
                self.device,
                ParallelLayout(tp=devices),
                _BF16,
                kernel_engine=engine,
            ),
        )
        builder = self._builder(plan, eager=eager)
        builder.collective(kind.value, _SCOPE, 1, kind, message_bytes, devices)
        return builder.latency_ms(), _band(message_bytes, _MESSAGE_BANDS, "msg>4MiB")

    def _custom_all_reduce(self, key: Sequence[object]) -> KernelPrediction:
        dtype = _text(key[0])
        eager = _text(key[3]).endswith(_EAGER_SUFFIX)
        latency_ms, band = self._collective(
            Collective.ALL_REDUCE, dtype, key[1], key[2], eager=eager
        )
        return KernelPrediction(
            op=_OP_CUSTOM_ALL_REDUCE + ("[eager]" if eager else ""),
            quantization=dtype,
            band=band,
            predicted_ms=latency_ms,
        )

    def _nccl(self, key: Sequence[object]) -> KernelPrediction:
        dtype, op = _text(key[0]), _text(key[1])
        kind = _NCCL_OPS.get(op)
        if kind is None:
            raise _Refused(f"collective {op or '?'}: no runner collective")
        latency_ms, band = self._collective(kind, dtype, key[2], key[3], eager=False, nccl=True)
        return KernelPrediction(
            op=f"{_OP_NCCL}[{op}]",
            quantization=dtype,
            band=band,
            predicted_ms=latency_ms,
        )


_SINGLE = ParallelLayout()
_OP_GEMM = KernelFamily.GEMM.value
_OP_MOE = KernelFamily.MOE.value
_OP_MLA_BMM = KernelFamily.MLA_BMM.value
_OP_CUSTOM_ALL_REDUCE = KernelFamily.CUSTOM_ALL_REDUCE.value
_OP_NCCL = KernelFamily.NCCL.value
_BF16 = Quantization()
# GEMMs read only the plan's rates, bytes and fixed costs: any one-layer model serves.
_GEMM_MODEL = _model(heads=1, kv_heads=1, head_dim=1, hidden=1)
_GEMM_BLOCK_FP8_MODEL = dataclasses.replace(_GEMM_MODEL, native_linear=LinearQuantAction.FP8.value)


# -- held-out split ----------------------------------------------------------------------------
#: One shape in ``SPLIT_MODULUS`` is held out (``test``); the others are ``train``.
SPLIT_MODULUS = 4


def split_of(shape: str) -> KernelSplit:
    """The split of a measured shape (its text, as the CSV's ``shape`` column): a stable hash
    (CRC-32), so a shape lands in the same split on every system, engine and run."""
    return "test" if zlib.crc32(shape.encode()) % SPLIT_MODULUS == 0 else "train"


# -- report ------------------------------------------------------------------------------------
P90 = 0.9


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorStats:
    """Signed relative errors ``(predicted - measured) / measured`` in % of one group."""

    n: int
    median_abs_pct: float
    p90_abs_pct: float
    median_signed_pct: float

    def to_dict(self) -> dict[str, float | int]:
        return {
            "n": self.n,
            "median_abs_pct": self.median_abs_pct,
            "p90_abs_pct": self.p90_abs_pct,
            "median_signed_pct": self.median_signed_pct,
        }


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between the order statistics around ``q (n - 1)``."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def error_stats(errors_pct: Sequence[float]) -> ErrorStats:
    """Median and p90 of |error| and the median signed error of a non-empty group."""
    if not errors_pct:
        raise ValueError("a group needs at least one error")
    signed = sorted(errors_pct)
    absolute = sorted(abs(e) for e in errors_pct)
    return ErrorStats(
        n=len(signed),
        median_abs_pct=_quantile(absolute, 0.5),
        p90_abs_pct=_quantile(absolute, P90),
        median_signed_pct=_quantile(signed, 0.5),
    )


def error_pct(measured_ms: float, predicted_ms: float) -> float:
    return (predicted_ms - measured_ms) / measured_ms * 100.0


#: A report group: (system, engine, op, quantization, band); band "" is the whole group.
GroupKey = tuple[str, str, str, str, str]
ALL_BANDS = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelReport:
    """Errors per (system, engine, op, quantization), overall and per shape band, and the
    refused points counted per reason."""

    groups: tuple[tuple[GroupKey, ErrorStats], ...]
    refusals: tuple[tuple[str, int], ...]
    points: int
    predicted: int

    def to_dict(self) -> dict[str, object]:
        return {
            "points": self.points,
            "predicted": self.predicted,
            "refused": self.points - self.predicted,
            "groups": [
                {
                    "system": key[0],
                    "engine": key[1],
                    "op": key[2],
                    "quantization": key[3],
                    "band": key[4] or "all",
                    **stats.to_dict(),
                }
                for key, stats in self.groups
            ],
            "refusals": [{"reason": reason, "points": n} for reason, n in self.refusals],
        }

    def format_table(self) -> str:
        header = (
            "system",
            "engine",
            "op",
            "quantization",
            "band",
            "n",
            "med|err|%",
            "p90|err|%",
            "med err%",
        )
        rows = [header]
        for key, stats in self.groups:
            rows.append(
                (
                    *key[:4],
                    key[4] or "all",
                    str(stats.n),
                    f"{stats.median_abs_pct:.1f}",
                    f"{stats.p90_abs_pct:.1f}",
                    f"{stats.median_signed_pct:+.1f}",
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        lines = [
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in rows
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        lines.append("")
        lines.append(
            f"{self.points} measured points: {self.predicted} predicted, "
            f"{self.points - self.predicted} refused"
        )
        for reason, n in self.refusals:
            lines.append(f"  refused {n:>9}  {reason}")
        return "\n".join(lines)


def build_report(
    errors: Mapping[GroupKey, Sequence[float]], refusals: Mapping[str, int], points: int
) -> KernelReport:
    """The report of grouped errors (each key with band ``""`` and per band) and refusals."""
    groups = tuple((key, error_stats(values)) for key, values in sorted(errors.items()) if values)
    predicted = sum(len(values) for key, values in errors.items() if key[4] == ALL_BANDS)
    ordered_refusals = tuple(sorted(refusals.items(), key=lambda item: (-item[1], item[0])))
    return KernelReport(
        groups=groups, refusals=ordered_refusals, points=points, predicted=predicted
    )
