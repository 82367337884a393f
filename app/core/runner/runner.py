"""``ModelRunner``: forward latency, per-op breakdown and device memory of one batch shape.

    runner = ModelRunner(model, device, ParallelLayout(tp=4), Quantization(linear="FP8"))
    result = runner.run_inference(RequestInfo(is_decode=False, concurrency=1,
                                              query_len=2048, seq_len=2048))
    result.latency_ms, result.breakdown.categories, result.memory.available_gb

Shapes are per data-parallel replica: ``concurrency`` requests each add ``query_len`` tokens on
top of ``seq_len - query_len`` cached ones. For a decode step the caller passes the KV-cache
context it wants memory accounted for as ``seq_len`` (the engine uses ``L + O // 2``).

``runner.run_mixed(prefill, decode)`` costs a mixed engine step as ONE forward over the combined
token batch (how vLLM, SGLang and TensorRT-LLM run a prefill chunk beside decodes): GEMMs, MoE,
norms, embeddings, lm_head and collectives over all tokens, attention per part, the per-forward
overhead once.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.catalog.devices import BYTES_PER_GB, Device
from app.core.catalog.models import KV_TENSORS, ModelArchitecture
from app.core.catalog.quantization import Quantization
from app.core.errors import InvalidParameterError
from app.core.parallel import ParallelLayout
from app.core.runner.layers import LOGIT_BYTES, Q_AND_O, ForwardBuilder, Shape
from app.core.runner.ops import Bound, OpCategory, OpCost
from app.core.runner.plan import ACTIVATION_BYTES, ShardPlan, build_plan

RUNNER_MODEL_VERSION = "runner-v2"  # bump when formulas change: cache keys include it
KV_BLOCK_TOKENS = 128
DEFAULT_RESERVED_MEMORY_GB = 10.0
RESIDUAL_STREAMS = 2  # residual and hidden state live across every op


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidParameterError(name, value, f"an integer >= {minimum}")


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestInfo:
    """One forward on one DP replica (``seq_len`` = context after the forward)."""

    is_decode: bool
    concurrency: int
    query_len: int
    seq_len: int
    mtp_draft_tokens: int = 0  # MTP draft passes to add to a decode step (0 = none)

    def __post_init__(self) -> None:
        if not isinstance(self.is_decode, bool):
            raise InvalidParameterError("is_decode", self.is_decode, "a boolean")
        _check_int("concurrency", self.concurrency, 1)
        _check_int("query_len", self.query_len, 1)
        _check_int("seq_len", self.seq_len, 1)
        _check_int("mtp_draft_tokens", self.mtp_draft_tokens, 0)
        if self.seq_len < self.query_len:
            raise InvalidParameterError("seq_len", self.seq_len, f">= query_len={self.query_len}")

    @property
    def tokens(self) -> int:
        return self.concurrency * self.query_len

    def to_dict(self) -> dict[str, Any]:
        return {
            "is_decode": self.is_decode,
            "concurrency": self.concurrency,
            "query_len": self.query_len,
            "seq_len": self.seq_len,
            "mtp_draft_tokens": self.mtp_draft_tokens,
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

    def category_ms(self, category: OpCategory) -> float:
        for item in self.categories:
            if item.category is category:
                return item.time_ms
        return 0.0

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
    """One forward. ``fused_decode``: the decodes that ran in the same forward as the prefill
    ``request`` (a fused mixed step), ``None`` for an ordinary forward."""

    latency_ms: float
    breakdown: Breakdown
    memory: MemoryBreakdown
    request: RequestInfo
    notes: tuple[str, ...] = field(default=())
    fused_decode: RequestInfo | None = None

    def to_dict(self) -> dict[str, Any]:
        body = {
            "latency_ms": self.latency_ms,
            "request": self.request.to_dict(),
            "breakdown": self.breakdown.to_dict(),
            "memory": self.memory.to_dict(),
            "notes": list(self.notes),
        }
        if self.fused_decode is not None:
            body["fused_decode"] = self.fused_decode.to_dict()
        return body


class ModelRunner:
    """The forward-latency model of one deployment (model, device, layout, quantization).

    ``reserved_memory_gb`` is held back per device (runtime, graphs, fragmentation; ``None``
    = the default 10 GB).
    ``num_mtp_tokens`` > 0 loads the model's MTP modules (their weights and KV count in memory).
    ``decode_graph_mode`` costs decode kernels at the captured-graph launch cost.
    """

    __slots__ = (
        "_identity",
        "decode_graph_mode",
        "device",
        "model",
        "num_mtp_tokens",
        "parallel",
        "plan",
        "quantization",
        "reserved_memory_gb",
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
    ) -> None:
        if reserved_memory_gb is None:
            reserved_memory_gb = DEFAULT_RESERVED_MEMORY_GB
        if isinstance(reserved_memory_gb, bool) or not (
            isinstance(reserved_memory_gb, int | float) and reserved_memory_gb >= 0
        ):
            raise InvalidParameterError("reserved_memory_gb", reserved_memory_gb, "a number >= 0")
        _check_int("num_mtp_tokens", num_mtp_tokens, 0)
        self.model = model
        self.device = device
        self.parallel = parallel or ParallelLayout()
        self.quantization = quantization or Quantization()
        self.reserved_memory_gb = float(reserved_memory_gb)
        self.num_mtp_tokens = num_mtp_tokens
        self.decode_graph_mode = bool(decode_graph_mode)
        self.plan: ShardPlan = build_plan(model, device, self.parallel, self.quantization)
        self._identity = self._digest()

    # -- identity ---------------------------------------------------------------------------
    def identity_dict(self) -> dict[str, Any]:
        """Every input that changes a result (the latency-cache key material)."""
        p = self.parallel
        return {
            "version": RUNNER_MODEL_VERSION,
            "model": self.model.to_dict(),
            "device": self.device.to_dict(),
            "parallel": {"tp": p.tp, "dp": p.dp, "ep": p.ep, "pp": p.pp},
            "quantization": self.quantization.to_dict(),
            "reserved_memory_gb": self.reserved_memory_gb,
            "num_mtp_tokens": self.num_mtp_tokens,
            "decode_graph_mode": self.decode_graph_mode,
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
    def run_inference(self, request: RequestInfo) -> ForwardResult:
        return self._run((request,))

    def run_mixed(self, prefill: RequestInfo | None, decode: RequestInfo | None) -> ForwardResult:
        """A prefill chunk and decodes as ONE forward (a fused mixed step).

        Either part may be missing: the result is then exactly that part's own forward.
        The decode part keeps its MTP draft passes (``decode.mtp_draft_tokens``).
        """
        if prefill is not None and prefill.is_decode:
            raise InvalidParameterError("prefill.is_decode", True, "False for the prefill part")
        if decode is not None and not decode.is_decode:
            raise InvalidParameterError("decode.is_decode", False, "True for the decode part")
        parts = tuple(part for part in (prefill, decode) if part is not None)
        if not parts:
            raise InvalidParameterError("run_mixed", None, "a prefill part, a decode part or both")
        return self._run(parts)

    def _run(self, parts: tuple[RequestInfo, ...]) -> ForwardResult:
        """One forward over every part's tokens; attention and draft passes per part."""
        plan = self.plan
        shapes = tuple(
            Shape(
                is_decode=part.is_decode,
                concurrency=part.concurrency,
                query_len=part.query_len,
                seq_len=part.seq_len,
            )
            for part in parts
        )
        builder = ForwardBuilder(plan, shapes, self.decode_graph_mode)
        tokens = builder.tokens
        attention = tuple((shape, shape.tokens) for shape in shapes)
        builder.embedding("model", 1, tokens)
        for index, group in enumerate(plan.model.layer_groups):
            scope = f"layers[{index}]:{group.ffn.value}" + (
                f":window{group.sliding_window}" if group.sliding_window else ""
            )
            builder.layer_group(group, scope, group.count, tokens, attention)
        builder.lm_head("model", 1, builder.sample_tokens)
        builder.pipeline_sends(tokens)
        for part, shape in zip(parts, shapes, strict=True):
            if part.is_decode:
                builder.mtp_drafts(part.mtp_draft_tokens, shape)
        builder.overhead()
        ops = tuple(builder.ops)
        latency_ms = math.fsum(op.total_ms for op in ops)
        notes = list(plan.notes)
        if any(part.mtp_draft_tokens for part in parts) and not plan.model.num_mtp_layers:
            notes.append("model has no MTP layers: draft cost not modelled")
        return ForwardResult(
            latency_ms=latency_ms,
            breakdown=_summarize(ops),
            memory=self.parts_memory(parts),
            request=parts[0],
            notes=tuple(notes),
            fused_decode=parts[1] if len(parts) > 1 else None,
        )

    # -- memory -----------------------------------------------------------------------------
    def kv_cache_bytes(self, concurrency: int, seq_len: int) -> float:
        """KV cache on one device for ``concurrency`` requests of ``seq_len`` context."""
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
        return concurrency * per_request

    def weights_bytes(self) -> float:
        extra = self.plan.mtp_weights_bytes if self.num_mtp_tokens else 0.0
        return self.plan.weights_bytes + extra

    def activation_bytes(self, request: RequestInfo) -> float:
        return self._activation_bytes((request,))

    def _activation_bytes(self, parts: Sequence[RequestInfo]) -> float:
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
        per_token = RESIDUAL_STREAMS * h + max(attn, mlp, moe)
        total = sum(part.tokens for part in parts) * per_token * ACTIVATION_BYTES
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
            sample_tokens += part.tokens if part.is_decode else part.concurrency
        return total + sample_tokens * m.vocab_size / plan.tp * LOGIT_BYTES

    def memory(self, request: RequestInfo) -> MemoryBreakdown:
        return self.parts_memory((request,))

    def parts_memory(self, parts: Sequence[RequestInfo]) -> MemoryBreakdown:
        """Memory while one forward runs every part (a fused mixed step: prefill + decode)."""
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
