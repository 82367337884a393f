"""``ModelRunner``: forward latency, per-op breakdown and device memory of one batch shape.

    runner = ModelRunner(model, device, ParallelLayout(tp=4), Quantization(linear="FP8"))
    result = runner.run_inference(ForwardShape(is_decode=False, concurrency=1,
                                               query_len=2048, seq_len=2048))
    result.latency_ms, result.breakdown.categories, result.memory.available_gb

Shapes are per data-parallel replica: ``concurrency`` requests each add ``query_len`` tokens on
top of ``seq_len - query_len`` cached ones. For a decode step the caller passes the KV-cache
context it wants memory accounted for as ``seq_len`` (the engine uses ``L + O // 2``).

``runner.run_mixed(MixedShape(prefill=..., decode=...))`` costs a mixed engine step as ONE
forward over the combined token batch (how vLLM, SGLang and TensorRT-LLM run a prefill chunk
beside decodes): GEMMs, MoE, norms, embeddings, lm_head and collectives over all tokens,
attention per part, the per-forward overhead once.

Shapes are :class:`app.core.cost.ForwardShape` / :class:`~app.core.cost.MixedShape`, the
engine's own types, from the serving adapter down to the layers.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.catalog.architecture import KV_TENSORS, LayerAttention, ModelArchitecture
from app.core.catalog.hardware import BYTES_PER_GB, Device
from app.core.catalog.quantization import (
    LinearQuantAction,
    Quantization,
)
from app.core.chunking import require_int
from app.core.cost import AnyShape, ForwardShape, MixedShape
from app.core.errors import InvalidParameterError
from app.core.parallel import ParallelLayout
from app.core.profiles import (
    MXFP4_ACTIVATIONS,
    MXFP4_MOE_KERNELS,
    Mxfp4Activation,
    Mxfp4MoeKernel,
)
from app.core.runner.layers import LOGIT_BYTES, Q_AND_O, ForwardBuilder, new_tokens
from app.core.runner.ops import Bound, OpCategory, OpCost
from app.core.runner.plan import ACTIVATION_BYTES, ShardPlan, build_plan

#: Bump when formulas change: cache keys include it (v3: EAGLE-3 drafts for models without MTP
#: layers, staged collectives across NVSwitch nodes, linear and sparse attention).
RUNNER_MODEL_VERSION = "runner-v3"
KV_BLOCK_TOKENS = 128
DEFAULT_RESERVED_MEMORY_GB = 10.0
RESIDUAL_STREAMS = 2  # residual and hidden state live across every op


def check_shape(shape: ForwardShape) -> None:
    """A forward the runner can cost: integers >= 1, ``seq_len >= query_len`` (domain errors).

    :class:`~app.core.cost.ForwardShape` is a plain value; the runner, which is called with
    shapes from the engine, the services and the CLI, checks them here, once per call.
    """
    if not isinstance(shape.is_decode, bool):
        raise InvalidParameterError("is_decode", shape.is_decode, "a boolean")
    require_int("concurrency", shape.concurrency, 1, None)
    require_int("query_len", shape.query_len, 1, None)
    require_int("seq_len", shape.seq_len, 1, None)
    if shape.seq_len < shape.query_len:
        raise InvalidParameterError("seq_len", shape.seq_len, f">= query_len={shape.query_len}")


def shape_to_dict(shape: ForwardShape, mtp_draft_tokens: int) -> dict[str, Any]:
    """The ``request`` document of a forward (its shape and the MTP draft passes it ran)."""
    return {
        "is_decode": shape.is_decode,
        "concurrency": shape.concurrency,
        "query_len": shape.query_len,
        "seq_len": shape.seq_len,
        "mtp_draft_tokens": mtp_draft_tokens,
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class CategoryCost:
    category: OpCategory
    time_ms: float
    bound: Bound  # the bound that contributed most time in this category

    def to_dict(self) -> dict[str, Any]:
        return {"category": self.category.value, "time_ms": self.time_ms, "bound": self.bound.value}


@dataclass(frozen=True, slots=True, kw_only=True)
class Breakdown:
    ops: tuple[OpCost, ...]
    categories: tuple[CategoryCost, ...]
    bound: Bound  # dominant over the whole forward

    def to_dict(self) -> dict[str, Any]:
        return {
            "bound": self.bound.value,
            "categories": [c.to_dict() for c in self.categories],
            "ops": [op.to_dict() for op in self.ops],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryBreakdown:
    """Device memory of the busiest device, decimal GB. ``available_gb < 0`` = infeasible."""

    capacity_gb: float
    weights_gb: float
    kv_cache_gb: float
    activation_gb: float
    reserved_gb: float
    available_gb: float

    @property
    def fits(self) -> bool:
        return self.available_gb >= 0

    def to_dict(self) -> dict[str, float]:
        return {
            "capacity_gb": self.capacity_gb,
            "weights_gb": self.weights_gb,
            "kv_cache_gb": self.kv_cache_gb,
            "activation_gb": self.activation_gb,
            "reserved_gb": self.reserved_gb,
            "available_gb": self.available_gb,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ForwardResult:
    """One forward of ``shape``. ``fused_decode``: the decodes that ran in the same forward as
    the prefill ``shape`` (a fused mixed step), ``None`` for an ordinary forward.
    ``mtp_draft_tokens``: the MTP draft passes run after the decode part (0 = none)."""

    latency_ms: float
    breakdown: Breakdown
    memory: MemoryBreakdown
    shape: ForwardShape
    mtp_draft_tokens: int = 0
    notes: tuple[str, ...] = field(default=())
    fused_decode: ForwardShape | None = None

    def to_dict(self) -> dict[str, Any]:
        fused = self.fused_decode
        drafts = self.mtp_draft_tokens
        body = {
            "latency_ms": self.latency_ms,
            "request": shape_to_dict(self.shape, 0 if fused is not None else drafts),
            "breakdown": self.breakdown.to_dict(),
            "memory": self.memory.to_dict(),
            "notes": list(self.notes),
        }
        if fused is not None:
            body["fused_decode"] = shape_to_dict(fused, drafts)
        return body


class ModelRunner:
    """The forward-latency model of one deployment (model, device, layout, quantization).

    ``reserved_memory_gb`` is held back per device (runtime, graphs, fragmentation; ``None``
    = the default 10 GB).
    ``num_mtp_tokens`` > 0 loads the model's MTP modules, or a one-layer EAGLE-3 draft head
    for a model without them (their weights and KV count in memory).
    ``decode_graph_mode`` costs decode kernels at the captured-graph launch cost;
    ``decode_graph_max_batch`` (``None``: no limit) is the largest decode batch an engine
    captured a graph for (a larger one runs eagerly).
    ``mxfp4_activation``: the activations MXFP4 GEMMs run with (an engine's kernels; ``fp4``:
    the device's FP4 path); ``mxfp4_moe_kernel``: the kernel MXFP4 routed experts run on
    (``marlin``: Marlin's measured curve where ``kernel_engine`` has one).
    ``redundant_experts``: MoE expert slots beyond the routed experts, each a replica of one
    (SGLang's ``--ep-num-redundant-experts``; :func:`~app.core.runner.plan.build_plan`).
    ``tp_group_all_to_all`` False: an expert-parallel MoE whose expert group is the attention
    tensor-parallel group routes the tokens every rank holds, with no dispatch or combine
    all-to-all (``serving.TP_GROUP_ROUTING_ENGINES``).
    ``kernel_engine``: the engine (``vllm``, ``sglang``, ``trtllm``) whose measured-kernel
    curves price the GEMMs, routed experts and collectives where the fitted tables have them
    for the device (None: the defaults), as kernels of a served forward
    (``build_plan(served=True)``: in-graph floors in a captured decode step, a quantized GEMM's
    floor capped at the 16-bit one's).
    """

    __slots__ = (
        "_identity",
        "decode_graph_max_batch",
        "decode_graph_mode",
        "device",
        "kernel_engine",
        "model",
        "mxfp4_activation",
        "mxfp4_moe_kernel",
        "num_mtp_tokens",
        "parallel",
        "plan",
        "quantization",
        "redundant_experts",
        "reserved_memory_gb",
        "tp_group_all_to_all",
    )

    def __init__(
        self,
        model: ModelArchitecture,
        device: Device,
        parallel: ParallelLayout | None = None,
        quantization: Quantization | None = None,
        *,
        reserved_memory_gb: float | None = DEFAULT_RESERVED_MEMORY_GB,
        num_mtp_tokens: int = 0,
        decode_graph_mode: bool = True,
        decode_graph_max_batch: int | None = None,
        mxfp4_activation: Mxfp4Activation = "fp4",
        kernel_engine: str | None = None,
        mxfp4_moe_kernel: Mxfp4MoeKernel = "default",
        redundant_experts: int = 0,
        tp_group_all_to_all: bool = True,
    ) -> None:
        if reserved_memory_gb is None:
            reserved_memory_gb = DEFAULT_RESERVED_MEMORY_GB
        if isinstance(reserved_memory_gb, bool) or not (
            isinstance(reserved_memory_gb, int | float) and reserved_memory_gb >= 0
        ):
            raise InvalidParameterError("reserved_memory_gb", reserved_memory_gb, "a number >= 0")
        require_int("num_mtp_tokens", num_mtp_tokens, 0, None)
        self.model = model
        self.device = device
        self.parallel = parallel or ParallelLayout()
        self.quantization = quantization or Quantization()
        self.reserved_memory_gb = float(reserved_memory_gb)
        self.num_mtp_tokens = num_mtp_tokens
        self.decode_graph_mode = bool(decode_graph_mode)
        if decode_graph_max_batch is not None:
            require_int("decode_graph_max_batch", decode_graph_max_batch, 0, None)
        self.decode_graph_max_batch = decode_graph_max_batch
        if mxfp4_activation not in MXFP4_ACTIVATIONS:
            raise InvalidParameterError(
                "mxfp4_activation", mxfp4_activation, f"one of {', '.join(MXFP4_ACTIVATIONS)}"
            )
        self.mxfp4_activation: Mxfp4Activation = mxfp4_activation
        if mxfp4_moe_kernel not in MXFP4_MOE_KERNELS:
            raise InvalidParameterError(
                "mxfp4_moe_kernel", mxfp4_moe_kernel, f"one of {', '.join(MXFP4_MOE_KERNELS)}"
            )
        self.mxfp4_moe_kernel: Mxfp4MoeKernel = mxfp4_moe_kernel
        self.plan: ShardPlan = build_plan(
            model,
            device,
            self.parallel,
            self.quantization,
            mxfp4_activation,
            kernel_engine,
            served=True,
            mxfp4_moe_kernel=mxfp4_moe_kernel,
            redundant_experts=redundant_experts,
            tp_group_all_to_all=tp_group_all_to_all,
        )
        self.redundant_experts = redundant_experts
        self.tp_group_all_to_all = bool(tp_group_all_to_all)
        plan = self.plan
        fitted = any(
            fit is not None
            for fit in (
                plan.gemm_fit,
                plan.bf16_gemm_fit,
                plan.moe_fit,
                plan.comm_fit,
                plan.prefill_attention_fit,
                plan.decode_attention_fit,
                plan.gdn_fit,
                plan.dsa_fit,
            )
        )
        self.kernel_engine = kernel_engine if fitted else None
        self._identity = self._digest()

    # -- identity ---------------------------------------------------------------------------
    def identity_dict(self) -> dict[str, Any]:
        """Every input that changes a result (the latency-cache key material)."""
        p = self.parallel
        return {
            "version": RUNNER_MODEL_VERSION,
            "model": self.model.cost_dict(),
            "device": self.device.to_dict(),
            "parallel": {"tp": p.tp, "dp": p.dp, "ep": p.ep, "pp": p.pp},
            "quantization": self.quantization.to_dict(),
            "reserved_memory_gb": self.reserved_memory_gb,
            "num_mtp_tokens": self.num_mtp_tokens,
            "decode_graph_mode": self.decode_graph_mode,
            **(
                {}
                if self.decode_graph_max_batch is None
                else {"decode_graph_max_batch": self.decode_graph_max_batch}
            ),
            # Only where it can move the GEMMs (an MXFP4 run off the FP4 path): other keys stay.
            **(
                {"mxfp4_activation": self.mxfp4_activation}
                if self.quantization.linear is LinearQuantAction.MXFP4
                and self.mxfp4_activation != "fp4"
                else {}
            ),
            # Only where it can move the routed experts (an MXFP4 run priced by fitted curves):
            # other keys stay.
            **(
                {"mxfp4_moe_kernel": self.mxfp4_moe_kernel}
                if self.quantization.linear is LinearQuantAction.MXFP4
                and self.mxfp4_moe_kernel != "default"
                and self.kernel_engine is not None
                else {}
            ),
            # Only where set: runners without redundant expert slots keep their keys.
            **({"redundant_experts": self.redundant_experts} if self.redundant_experts else {}),
            # Only where off: runners that exchange tokens in the TP group keep their keys.
            **({} if self.tp_group_all_to_all else {"tp_group_all_to_all": False}),
            # Only where a fitted curve prices an op: default-priced runners keep their keys.
            **({} if self.kernel_engine is None else {"kernel_engine": self.kernel_engine}),
        }

    def _digest(self) -> str:
        text = json.dumps(self.identity_dict(), sort_keys=True, separators=(",", ":"))
        return f"{RUNNER_MODEL_VERSION}:{hashlib.sha256(text.encode()).hexdigest()}"

    def identity(self) -> str:
        """Stable key: ``runner-v2:<sha256>`` of model numbers, device numbers, layout,
        quantization and runner options (names alone are not trusted: a custom device or
        inline config with the same name but other numbers gets another key)."""
        return self._identity

    # -- forward ----------------------------------------------------------------------------
    def _drafts(self, mtp_draft_tokens: int | None) -> int:
        if mtp_draft_tokens is None:
            return self.num_mtp_tokens
        require_int("mtp_draft_tokens", mtp_draft_tokens, 0, None)
        return mtp_draft_tokens

    def run_inference(
        self, shape: ForwardShape, *, mtp_draft_tokens: int | None = None
    ) -> ForwardResult:
        """One forward of ``shape``. A decode step runs ``mtp_draft_tokens`` MTP draft passes
        after it (``None`` = the runner's ``num_mtp_tokens``); a prefill runs none."""
        return self._run(*self._forward_parts(shape, mtp_draft_tokens))

    def run_mixed(self, shape: MixedShape, *, mtp_draft_tokens: int | None = None) -> ForwardResult:
        """A prefill chunk and decodes as ONE forward (a fused mixed step); the decode part
        keeps its MTP draft passes (``mtp_draft_tokens`` as in :meth:`run_inference`)."""
        return self._run(*self._mixed_parts(shape, mtp_draft_tokens))

    def _forward_parts(
        self, shape: ForwardShape, mtp_draft_tokens: int | None
    ) -> tuple[tuple[ForwardShape, ...], int]:
        """``shape`` checked, as the parts and draft passes of one forward."""
        check_shape(shape)
        return (shape,), self._drafts(mtp_draft_tokens) if shape.is_decode else 0

    def _mixed_parts(
        self, shape: MixedShape, mtp_draft_tokens: int | None
    ) -> tuple[tuple[ForwardShape, ...], int]:
        """``shape``'s parts checked, with the decode part's draft passes."""
        check_shape(shape.prefill)
        check_shape(shape.decode)
        return (shape.prefill, shape.decode), self._drafts(mtp_draft_tokens)

    def _graph_mode(self, parts: tuple[ForwardShape, ...]) -> bool:
        """Graph launch costs for this forward: graphs on, and the decode batch captured."""
        limit = self.decode_graph_max_batch
        if not self.decode_graph_mode or limit is None:
            return self.decode_graph_mode
        return sum(p.concurrency for p in parts if p.is_decode) <= limit

    def forward_ms(self, shape: ForwardShape, *, mtp_draft_tokens: int | None = None) -> float:
        """:meth:`run_inference`'s latency alone (no breakdown, no memory picture): what a
        simulation asks of every shape it steps through."""
        parts, drafts = self._forward_parts(shape, mtp_draft_tokens)
        return self._build(parts, drafts, detail=False).latency_ms()

    def mixed_ms(self, shape: MixedShape, *, mtp_draft_tokens: int | None = None) -> float:
        """:meth:`run_mixed`'s latency alone (see :meth:`forward_ms`)."""
        parts, drafts = self._mixed_parts(shape, mtp_draft_tokens)
        return self._build(parts, drafts, detail=False).latency_ms()

    def operators(self, shape: ForwardShape, *, mtp_draft_tokens: int | None = None) -> int:
        """Operators :meth:`forward_ms`'s forward launches (each compute op and collective
        instance of its plan): what an eager host dispatches one by one."""
        parts, drafts = self._forward_parts(shape, mtp_draft_tokens)
        return self._build(parts, drafts, detail=False).launches

    def mixed_operators(self, shape: MixedShape, *, mtp_draft_tokens: int | None = None) -> int:
        """:meth:`operators` of :meth:`mixed_ms`'s fused forward."""
        parts, drafts = self._mixed_parts(shape, mtp_draft_tokens)
        return self._build(parts, drafts, detail=False).launches

    def _build(
        self, parts: tuple[ForwardShape, ...], drafts: int, *, detail: bool
    ) -> ForwardBuilder:
        """The ops of one forward over every part's tokens (``detail``: as :class:`OpCost`
        records, else their times alone); attention per part, ``drafts`` MTP draft passes
        after the decode part (the last part when it decodes)."""
        plan = self.plan
        builder = ForwardBuilder(plan, parts, self._graph_mode(parts), detail=detail)
        tokens = builder.tokens
        attention = tuple((shape, new_tokens(shape)) for shape in parts)
        builder.embedding("model", 1, tokens)
        for index, group in enumerate(plan.model.layer_groups):
            scope = f"layers[{index}]:{group.ffn.value}" + (
                f":window{group.sliding_window}" if group.sliding_window else ""
            )
            if group.attention is LayerAttention.LINEAR:
                scope += f":{group.attention.value}"
            builder.layer_group(group, scope, group.count, tokens, attention)
        builder.lm_head("model", 1, builder.sample_tokens)
        builder.pipeline_sends(tokens)
        decode = parts[-1]
        if decode.is_decode:
            builder.mtp_drafts(drafts, decode)
        builder.overhead()
        return builder

    def _run(self, parts: tuple[ForwardShape, ...], drafts: int) -> ForwardResult:
        """One forward (see :meth:`_build`) with its breakdown and memory picture."""
        plan = self.plan
        builder = self._build(parts, drafts, detail=True)
        ops = tuple(builder.ops)
        decode = parts[-1]
        notes = list(plan.notes)
        drafts = drafts if decode.is_decode else 0
        if drafts and not plan.model.num_mtp_layers:
            notes.append("model has no MTP layers: drafts run a one-layer EAGLE-3 head")
        return ForwardResult(
            latency_ms=builder.latency_ms(),
            breakdown=_summarize(ops),
            memory=self._parts_memory(parts),
            shape=parts[0],
            mtp_draft_tokens=drafts,
            notes=tuple(notes),
            fused_decode=parts[1] if len(parts) > 1 else None,
        )

    # -- memory -----------------------------------------------------------------------------
    def state_bytes_per_request(self) -> float:
        """Recurrent state (SSM + conv) one running request holds on one device in the
        linear-attention layers (0 without them); it does not grow with the context."""
        return self.plan.state_bytes_per_request

    def kv_cache_bytes(self, concurrency: int, seq_len: int) -> float:
        """KV cache on one device for ``concurrency`` requests of ``seq_len`` context, with
        each request's linear-attention state (:meth:`state_bytes_per_request`): the memory a
        running request holds, which admission and KV capacity count."""
        plan = self.plan
        blocks = math.ceil(seq_len / KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS
        per_request = blocks * plan.kv_bytes_per_token
        windows = [g.sliding_window for g in plan.model.layer_groups if g.sliding_window]
        if plan.kv_bytes_per_token_sliding and windows:
            window_tokens = min(seq_len, max(windows))
            window_blocks = math.ceil(window_tokens / KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS
            per_request += window_blocks * plan.kv_bytes_per_token_sliding
        if self.num_mtp_tokens:
            per_request += blocks * plan.mtp_kv_bytes_per_token
        if plan.state_bytes_per_request:
            per_request += plan.state_bytes_per_request
        return concurrency * per_request

    def weights_bytes(self) -> float:
        extra = self.plan.mtp_weights_bytes if self.num_mtp_tokens else 0.0
        return self.plan.weights_bytes + extra

    def _activation_bytes(self, parts: Sequence[ForwardShape]) -> float:
        """Activations of one forward over every part's tokens (one token batch)."""
        plan, m = self.plan, self.plan.model
        h = m.hidden_size
        # queries, outputs, keys and values of one token
        attn = (Q_AND_O * plan.heads_local + KV_TENSORS * plan.kv_heads_local) * m.head_dim
        mlp = m.mlp_matrices * m.intermediate_size / plan.tp
        moe = 0.0
        if m.moe is not None:
            width = m.mlp_matrices * m.moe.expert_intermediate_size / plan.moe_tp
            moe = plan.tokens_scale * m.moe.experts_per_token / plan.ep * (width + h)
        linear = 0.0
        if m.linear_attention is not None and m.num_linear_attention_layers:
            linear = m.linear_attention.in_proj_outputs / plan.tp  # q, k, v, z, b, a
        per_token = RESIDUAL_STREAMS * h + max(attn, mlp, moe, linear)
        total = sum(new_tokens(part) for part in parts) * per_token * ACTIVATION_BYTES
        sample_tokens = 0
        for part in parts:
            if m.mla is not None and not part.is_decode:
                mla = m.mla
                total += (
                    part.concurrency
                    * part.seq_len
                    * plan.heads_local
                    * (mla.qk_head_dim + mla.v_head_dim)
                    * ACTIVATION_BYTES
                )
            sample_tokens += new_tokens(part) if part.is_decode else part.concurrency
        return total + sample_tokens * m.vocab_size / plan.tp * LOGIT_BYTES

    def memory(self, shape: AnyShape) -> MemoryBreakdown:
        """Memory while the forward of ``shape`` runs (a fused mixed step: both parts' KV
        cache and the activations of their combined tokens)."""
        parts = (shape.prefill, shape.decode) if isinstance(shape, MixedShape) else (shape,)
        for part in parts:
            check_shape(part)
        return self._parts_memory(parts)

    def _parts_memory(self, parts: Sequence[ForwardShape]) -> MemoryBreakdown:
        capacity = self.device.hbm_capacity_gb
        weights = self.weights_bytes() / BYTES_PER_GB
        kv_bytes = math.fsum(self.kv_cache_bytes(p.concurrency, p.seq_len) for p in parts)
        kv = kv_bytes / BYTES_PER_GB
        act = self._activation_bytes(parts) / BYTES_PER_GB
        reserved = self.reserved_memory_gb
        return MemoryBreakdown(
            capacity_gb=capacity,
            weights_gb=weights,
            kv_cache_gb=kv,
            activation_gb=act,
            reserved_gb=reserved,
            available_gb=capacity - weights - kv - act - reserved,
        )


_BOUND_ORDER = (Bound.COMPUTE, Bound.MEMORY, Bound.COMMUNICATION, Bound.OVERHEAD)


def _summarize(ops: tuple[OpCost, ...]) -> Breakdown:
    per_category: dict[OpCategory, dict[Bound, float]] = {}
    overall: dict[Bound, float] = dict.fromkeys(_BOUND_ORDER, 0.0)
    for op in ops:
        bucket = per_category.setdefault(op.category, dict.fromkeys(_BOUND_ORDER, 0.0))
        bucket[op.bound] += op.total_ms
        overall[op.bound] += op.total_ms
    categories = tuple(
        CategoryCost(
            category=category,
            time_ms=math.fsum(times.values()),
            bound=max(_BOUND_ORDER, key=times.__getitem__),
        )
        for category in OpCategory
        if (times := per_category.get(category)) is not None
    )
    return Breakdown(
        ops=ops, categories=categories, bound=max(_BOUND_ORDER, key=overall.__getitem__)
    )
