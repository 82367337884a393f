"""Operators of one forward: per distinct layer kind once, multiplied by its layer count.

Shapes are per device. A forward runs one or more *sub-batches* (an
:class:`~app.core.cost.ForwardShape` each, the engine's own shape type) as one
token batch, the way serving engines flatten a prefill chunk and decodes into one step:
``tokens = sum(concurrency * query_len)`` new tokens run through every GEMM, MoE, norm,
embedding and collective; attention is costed per sub-batch (each request covers ``seq_len``
positions, causal over its new tokens, capped by a sliding window); the lm_head runs only on
the tokens that sample. One sub-batch is the ordinary prefill or decode forward.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from app.core.catalog.architecture import (
    GDN_GATES_PER_VALUE_HEAD,
    GDN_QK,
    KV_TENSORS,
    MTP_EH_INPUTS,
    SIXTEEN_BIT_ATTENTION,
    SIXTEEN_BIT_DENSE_MLP,
    SIXTEEN_BIT_SHARED_EXPERTS,
    FfnKind,
    LayerAttention,
    LayerGroup,
    LinearAttentionDims,
    MlaDims,
    SparseIndexerDims,
)
from app.core.catalog.quantization import BYTES_16BIT
from app.core.cost import ForwardShape
from app.core.runner.comm import Collective, collective_time_s
from app.core.runner.kernel_fit import DEFAULT_SOURCE
from app.core.runner.ops import (
    MS_PER_S,
    OpCategory,
    OpCost,
    communication,
    communication_ms,
    fixed,
    roofline,
    roofline_ms,
)
from app.core.runner.plan import (
    ACTIVATION_BYTES,
    EAGLE3_DRAFT_VOCAB,
    EAGLE3_FC_INPUTS,
    ShardPlan,
    eagle3_qkv_outputs,
)

if TYPE_CHECKING:  # the fitted tables load only for a plan with a kernel engine
    from app.core.runner.kernel_fit_attention import FittedAttention

FLOPS_PER_MAC = 2
NORM_FLOPS_PER_ELEMENT = 5  # square, reduce, rsqrt scale, weight multiply, cast
ROPE_FLOPS_PER_ELEMENT = 3
ACT_FLOPS_PER_ELEMENT = 5  # SiLU/GELU and the gate multiply
ROUTER_TOPK_FLOPS_PER_ELEMENT = 4  # sigmoid/softmax, top-k compare, renormalize
LOGIT_BYTES = 4.0  # fp32 logits
SAMPLING_PASSES = 2  # softmax then top-k/top-p over the vocabulary
RESIDUAL_NORM_TENSORS = 4  # read x and residual, write residual and normed x
READ_WRITE = 2  # an elementwise kernel reads its input and writes its output
Q_AND_O = 2  # attention reads the queries and writes the outputs
GATED_OUTPUT_TENSORS = 3  # an output gate reads the values and the gate, writes the product
# Gated DeltaNet (Yang et al., "Gated Delta Networks", ICLR 2025; FLA's gated_delta_rule
# kernels, which vLLM and SGLang run for Qwen3-Next / Qwen3.5). Per new token and value head
# the recurrent form touches every element of the d_k x d_v state: decay S *= exp(g) (1 mul),
# retrieval S^T k (1 MAC), rank-1 update S += k (beta (v - S^T k))^T (1 MAC), readout S^T q
# (1 MAC): 1 + 3 x FLOPS_PER_MAC FLOPs per state element.
GDN_RECURRENT_FLOPS_PER_STATE_ELEMENT = 1 + 3 * FLOPS_PER_MAC
# The chunked (prefill) form, chunk size 64 (FLA chunk_gated_delta_rule, BT = 64): per token
# and value head, 3 MACs per state element across chunks (output q S, the WY term w S, the
# state update k^T v_new) and, inside its chunk, products with every chunk token: 3 of key
# width (beta K K^T for the UT transform, Q K^T, w = A K) and 2 of value width (u = A V, the
# intra-chunk output).
GDN_CHUNK_TOKENS = 64
GDN_CHUNK_STATE_MACS_PER_ELEMENT = 3
GDN_CHUNK_KEY_PRODUCTS = 3
GDN_CHUNK_VALUE_PRODUCTS = 2
# The chunked kernels write each chunk's state (k dtype: 16-bit) and read it back for the
# output, and write w, u (and v_new) per token and read them back.
GDN_CHUNK_VALUE_INTERMEDIATES = 2  # u and v_new, value width per head
GDN_CHUNK_KEY_INTERMEDIATES = 1  # w, key width per head
# DSA lightning indexer (DeepSeek-V3.2-Exp inference/model.py; GLM-5 runs the same module):
# the score kernel computes relu(q . k) per head, scales it by the head's weight and sums the
# heads: three flops per (pair, head) on top of the QK dot products.
INDEXER_SCORE_FLOPS_PER_HEAD = 3
# Before FP8 quantization q and k pass a Walsh-Hadamard rotation (log2(head_dim) butterfly
# stages of one add each) and a per-block absmax quantization (abs-max, scale, cast).
FP8_QUANT_FLOPS_PER_ELEMENT = 3
INDEXER_Q_BYTES = 1.0  # queries enter the score kernel as float8_e4m3fn
INDEXER_WEIGHT_BYTES = 4.0  # per-head weights times the query scales, float32
#: Query heads one FlashMLA sparse kernel block computes on SM90: fewer heads per rank are
#: padded to it. Evidence (SGLang 0.5.14 ``dsa_context_module_perf``, H200, GLM-5-FP8, one
#: request of 8,192 tokens): the whole attention module takes 7.43 / 7.75 / 8.47 / 9.03 ms at
#: 8 / 16 / 32 / 64 heads per rank, while the 64-head sparse kernel alone measures 3.96 ms
#: (``glm5_dsa_attn_module_perf``): a kernel proportional to the heads could not leave 7.4 ms
#: at 8 heads.
SPARSE_MLA_HEAD_BLOCK = 64
MLA_Q_ABSORB = "q_absorb"  # decode MLA's batched GEMMs (ForwardBuilder.mla_bmm)
MLA_V_UP = "v_up"


def gdn_conv1d_terms(
    dims: LinearAttentionDims, key_heads: int, value_heads: int, s: ForwardShape, part_tokens: int
) -> tuple[float, float]:
    """``(flops, hbm_bytes)`` of Gated DeltaNet's causal conv1d over ``part_tokens`` tokens of
    ``s`` with ``key_heads`` / ``value_heads`` local heads: the q, k, v channels in and out,
    each request's conv state (the last kernel - 1 inputs) read and written, the taps read."""
    conv_local = GDN_QK * key_heads * dims.key_head_dim + value_heads * dims.value_head_dim
    conv_state_bytes = (dims.conv_kernel_size - 1) * conv_local * ACTIVATION_BYTES
    flops = (
        part_tokens * conv_local * (FLOPS_PER_MAC * dims.conv_kernel_size + ACT_FLOPS_PER_ELEMENT)
    )
    hbm_bytes = (
        READ_WRITE * part_tokens * conv_local * ACTIVATION_BYTES
        + READ_WRITE * s.concurrency * conv_state_bytes
        + conv_local * dims.conv_kernel_size * BYTES_16BIT
    )
    return flops, hbm_bytes


def gdn_delta_rule_terms(
    dims: LinearAttentionDims, key_heads: int, value_heads: int, s: ForwardShape, part_tokens: int
) -> tuple[float, float]:
    """``(flops, hbm_bytes)`` of Gated DeltaNet's delta-rule kernel over ``part_tokens`` tokens
    of ``s``: recurrent for a decode, chunked for a prefill; q and k in, v in, the output out,
    each request's state read once and written once (the chunked form also writes and rereads
    its per-chunk states and w, u)."""
    dk, dv = dims.key_head_dim, dims.value_head_dim
    state_elements = value_heads * dk * dv
    state_bytes = state_elements * dims.state_bytes_per_element
    io_bytes = (
        part_tokens * (GDN_QK * key_heads * dk + Q_AND_O * value_heads * dv) * ACTIVATION_BYTES
        + READ_WRITE * s.concurrency * state_bytes
    )
    if s.is_decode:
        return GDN_RECURRENT_FLOPS_PER_STATE_ELEMENT * part_tokens * state_elements, io_bytes
    per_head_macs = GDN_CHUNK_STATE_MACS_PER_ELEMENT * dk * dv + GDN_CHUNK_TOKENS * (
        GDN_CHUNK_KEY_PRODUCTS * dk + GDN_CHUNK_VALUE_PRODUCTS * dv
    )
    chunks = s.concurrency * math.ceil(s.query_len / GDN_CHUNK_TOKENS)
    intermediates = (
        part_tokens
        * value_heads
        * (GDN_CHUNK_KEY_INTERMEDIATES * dk + GDN_CHUNK_VALUE_INTERMEDIATES * dv)
    )
    io_bytes += READ_WRITE * (chunks * state_elements + intermediates) * ACTIVATION_BYTES
    return FLOPS_PER_MAC * part_tokens * value_heads * per_head_macs, io_bytes


def indexer_logits_terms(
    dims: SparseIndexerDims, s: ForwardShape, new_tokens: int, context: int, pairs: float
) -> tuple[float, float]:
    """``(flops, hbm_bytes)`` of the DSA indexer's FP8 score kernel for one sub-batch: every new
    token scores ``pairs`` (query, key) pairs in all against each request's ``context`` cached
    keys; the keys, the new keys, the FP8 queries with their weights in, fp32 logits out."""
    heads, d, key_bytes = dims.n_heads, dims.head_dim, dims.cache_bytes_per_token
    queries = new_tokens * heads * (d * INDEXER_Q_BYTES + INDEXER_WEIGHT_BYTES)
    hbm_bytes = (
        s.concurrency * context * key_bytes + new_tokens * key_bytes + queries + pairs * LOGIT_BYTES
    )
    return pairs * heads * (FLOPS_PER_MAC * d + INDEXER_SCORE_FLOPS_PER_HEAD), hbm_bytes


def indexer_topk_terms(pairs: float) -> tuple[float, float]:
    """``(flops, hbm_bytes)`` of the top-k over ``pairs`` fp32 logits: the router's
    compare-and-select work per logit, each logit read once."""
    return pairs * ROUTER_TOPK_FLOPS_PER_ELEMENT, pairs * LOGIT_BYTES


def sparse_mla_terms(
    mla: MlaDims,
    heads: int,
    s: ForwardShape,
    new_tokens: int,
    *,
    positions: int,
    pairs: float,
    kv_bytes_per_element: float,
) -> tuple[float, float]:
    """``(flops, hbm_bytes)`` of the absorbed MLA kernel over the selected latents (DSA's sparse
    attention, prefill and decode alike): ``heads`` query heads of the latent plus rope width
    against ``positions`` latents per request (``pairs`` in all), the values in the latent."""
    latent = mla.cache_elements_per_token
    width = latent + mla.kv_lora_rank
    kv_bytes = (s.concurrency * positions + new_tokens) * latent * kv_bytes_per_element
    hbm_bytes = kv_bytes + new_tokens * heads * width * ACTIVATION_BYTES
    return FLOPS_PER_MAC * pairs * heads * width, hbm_bytes


def new_tokens(shape: ForwardShape) -> int:
    """Tokens the forward computes for ``shape``: ``concurrency x query_len``."""
    return shape.concurrency * shape.query_len


#: One attention sub-batch: its shape (pairs and context read) and the new tokens whose
#: queries it reads and whose KV it appends (``new_tokens(shape)``, except in an MTP draft pass,
#: which appends one token per request over the verify step's shape).
Part = tuple[ForwardShape, int]


def _context(shape: ForwardShape, group: LayerGroup) -> int:
    """KV positions one request of ``shape`` reads in a layer of ``group``."""
    window = group.sliding_window
    return shape.seq_len if window is None else min(shape.seq_len, window)


def attention_window(group: LayerGroup, topk: int | None) -> int | None:
    """Keys one query can reach: the layer's sliding window, capped at a sparse indexer's
    ``topk`` (each query of a DSA model attends to ``min(its causal context, topk)`` keys)."""
    window = group.sliding_window
    if topk is None:
        return window
    return topk if window is None else min(window, topk)


def attended_pairs(query_len: int, seq_len: int, window: int | None) -> float:
    """(query, key) pairs of one request: positions ``seq_len-query_len+1 .. seq_len`` each
    attend to ``min(position, window)`` keys (causal)."""
    first, last = seq_len - query_len + 1, seq_len
    if window is None or last <= window:
        return (first + last) * query_len / 2
    if first >= window:
        return float(window * query_len)
    return (first + window) * (window - first + 1) / 2 + window * (last - window)


class ForwardBuilder:
    """Collects the :class:`OpCost` list of one forward over ``batches`` (see the module doc).

    Kernels pay the captured-graph launch cost only when every sub-batch decodes (a batch with
    prefill tokens runs eager); MTP draft passes are decode-only forwards of their own and pay
    the graph cost whenever ``graph_mode`` is on.
    """

    __slots__ = (
        "batches",
        "detail",
        "draft_graph",
        "draft_launch_s",
        "graph",
        "launch_s",
        "launches",
        "ops",
        "plan",
        "sixteen_bit",
        "totals_ms",
    )

    def __init__(
        self,
        plan: ShardPlan,
        batches: Sequence[ForwardShape],
        graph_mode: bool,
        *,
        detail: bool = True,
    ) -> None:
        if not batches:
            raise ValueError("a forward needs at least one sub-batch")
        self.plan = plan
        self.batches = tuple(batches)
        decode_only = all(batch.is_decode for batch in self.batches)
        self.graph = graph_mode and decode_only  # the forward's kernels run in a captured graph
        self.launch_s = plan.graph_launch_s if self.graph else plan.eager_launch_s
        self.draft_graph = graph_mode
        self.draft_launch_s = plan.graph_launch_s if graph_mode else plan.eager_launch_s
        # ``detail``: every op as an :class:`OpCost`; else only each op's total time (what a
        # simulation needs, at a fraction of the cost). ``totals_ms`` is kept either way.
        self.detail = detail
        self.ops: list[OpCost] = []
        self.totals_ms: list[float] = []
        #: Operators the forward launches (every compute op and collective instance; the fixed
        #: per-forward costs are not operators): what an eager host dispatches one by one.
        self.launches = 0
        self.sixteen_bit = False  # the part being built is one the checkpoint keeps 16-bit

    def latency_ms(self) -> float:
        """The forward's time: the sum of every op's total."""
        return math.fsum(self.totals_ms)

    def _record(self, op: OpCost) -> None:
        self.ops.append(op)
        self.totals_ms.append(op.total_ms)

    def _roofline(
        self,
        *,
        name: str,
        category: OpCategory,
        scope: str,
        count: int,
        flops: float,
        hbm_bytes: float,
        flops_per_s: float,
        hbm_bytes_per_s: float,
        launch_s: float,
        source: str = DEFAULT_SOURCE,
    ) -> None:
        self.launches += count
        if self.detail:
            op = roofline(
                name=name,
                category=category,
                scope=scope,
                count=count,
                flops=flops,
                hbm_bytes=hbm_bytes,
                flops_per_s=flops_per_s,
                hbm_bytes_per_s=hbm_bytes_per_s,
                launch_s=launch_s,
                source=source,
            )
            self._record(op)
        else:
            time_ms = roofline_ms(flops, hbm_bytes, flops_per_s, hbm_bytes_per_s, launch_s)
            self.totals_ms.append(time_ms * count)

    def _communication(
        self,
        *,
        name: str,
        scope: str,
        count: int,
        comm_bytes: float,
        comm_s: float,
        launch_s: float,
        source: str = DEFAULT_SOURCE,
    ) -> None:
        self.launches += count
        if self.detail:
            op = communication(
                name=name,
                scope=scope,
                count=count,
                comm_bytes=comm_bytes,
                comm_s=comm_s,
                launch_s=launch_s,
                source=source,
            )
            self._record(op)
        else:
            self.totals_ms.append(communication_ms(comm_s, launch_s) * count)

    def _fixed(self, *, name: str, scope: str, time_s: float) -> None:
        if self.detail:
            op = fixed(name=name, scope=scope, time_s=time_s)
            self._record(op)
        else:
            self.totals_ms.append(time_s * MS_PER_S)

    def _fitted_floor_s(self, fixed_s: float, graph_fixed_s: float) -> float:
        """A fitted kernel's floor: ``graph_fixed_s`` inside a captured graph, else its fitted
        ``fixed_s``, never below the builder's launch cost."""
        if self.graph:
            return graph_fixed_s
        return fixed_s if fixed_s > self.launch_s else self.launch_s

    @property
    def tokens(self) -> int:
        """New tokens of every sub-batch: the M of the dense parts."""
        return sum(new_tokens(batch) for batch in self.batches)

    @property
    def sample_tokens(self) -> int:
        """Tokens that reach the lm_head: every decode token, one per prefill request."""
        return sum(new_tokens(b) if b.is_decode else b.concurrency for b in self.batches)

    # -- primitives ------------------------------------------------------------------------
    def gemm(
        self,
        name: str,
        scope: str,
        count: int,
        m: float,
        k: float,
        n: float,
        *,
        category: OpCategory = OpCategory.GEMM,
        quantized: bool = True,
        weight_rows: float | None = None,
        rows_per_weight: float | None = None,
    ) -> None:
        """``m x k`` activations times a ``k x n`` weight.

        ``weight_rows`` overrides the weight elements read (MoE: only touched experts);
        ``rows_per_weight`` is the M each weight sees (MoE: tokens per expert), which sets
        the GEMM efficiency ramp ``m / (m + half-efficiency M)`` (the plan's, per path).
        A plain GEMM (neither) on a path with a fitted curve (``plan.gemm_fit``) is priced by
        the curve instead: its compute efficiency at ``m`` and ``k x n`` times its wave factor
        (the ``m x n`` output's tiles over the SMs), its memory efficiency at ``k x n``, both
        times its shape efficiency at ``m``, ``n``, ``k``, and its fixed cost (never below the
        builder's launch cost; inside a captured graph, the plan's in-graph floor).
        """
        p = self.plan
        quantized = quantized and not self.sixteen_bit
        wbytes = p.weight_bytes_per_param if quantized else BYTES_16BIT
        in_bytes = p.gemm_input_bytes if quantized else ACTIVATION_BYTES
        weights = (k * n if weight_rows is None else weight_rows) * wbytes
        flops = FLOPS_PER_MAC * m * k * n
        hbm_bytes = weights + m * k * in_bytes + m * n * ACTIVATION_BYTES
        fit = p.gemm_fit if quantized else p.bf16_gemm_fit
        launch, source = self.launch_s, DEFAULT_SOURCE
        if fit is not None and weight_rows is None and rows_per_weight is None:
            (rate, bandwidth), source = fit.rates(m, k, n), fit.source
            launch = self._fitted_floor_s(fit.fixed_s, fit.graph_fixed_s)
        else:
            rows = m if rows_per_weight is None else rows_per_weight
            if quantized:
                rate = p.gemm_flops_per_s * (rows / (rows + p.gemm_half_efficiency_tokens))
            else:
                rate = p.bf16_flops_per_s * (rows / (rows + p.bf16_half_efficiency_tokens))
            bandwidth = p.hbm_bytes_per_s
        self._roofline(
            name=name,
            category=category,
            scope=scope,
            count=count,
            flops=flops,
            hbm_bytes=hbm_bytes,
            flops_per_s=rate,
            hbm_bytes_per_s=bandwidth,
            launch_s=launch,
            source=source,
        )

    def elementwise(
        self,
        name: str,
        scope: str,
        count: int,
        elements: float,
        *,
        tensors: float,
        flops_per_element: float,
        category: OpCategory = OpCategory.ELEMENTWISE,
        element_bytes: float = ACTIVATION_BYTES,
    ) -> None:
        """A memory-bound kernel touching ``tensors`` tensors of ``elements`` each."""
        p = self.plan
        self._roofline(
            name=name,
            category=category,
            scope=scope,
            count=count,
            flops=flops_per_element * elements,
            hbm_bytes=tensors * elements * element_bytes,
            flops_per_s=p.bf16_flops_per_s,
            hbm_bytes_per_s=p.hbm_bytes_per_s,
            launch_s=self.launch_s,
        )

    def collective(
        self, name: str, scope: str, count: int, kind: Collective, message_bytes: float, group: int
    ) -> None:
        if group <= 1:
            return
        p = self.plan
        fitted = None if p.comm_fit is None else p.comm_fit.get(kind, group, self.graph)
        if fitted is not None:  # measured back to back: the latency term holds the launch
            self._communication(
                name=name,
                scope=scope,
                count=count,
                comm_bytes=message_bytes,
                comm_s=fitted.curve.time_s(message_bytes),
                launch_s=0.0,
                source=fitted.source,
            )
            return
        tier = p.tp_tier if group <= p.tp else p.ep_tier
        self._communication(
            name=name,
            scope=scope,
            count=count,
            comm_bytes=message_bytes,
            comm_s=collective_time_s(
                kind, message_bytes, group, tier, node=p.device.interconnect[0]
            ),
            launch_s=self.launch_s,
        )

    # -- layers ----------------------------------------------------------------------------
    def layer_group(
        self,
        group: LayerGroup,
        scope: str,
        count: int,
        tokens: int,
        attention: Sequence[Part],
    ) -> None:
        """Every op of one decoder layer of this group, ``count`` times: the dense parts over
        ``tokens``, the attention kernels once per sub-batch of ``attention``."""
        p, m = self.plan, self.plan.model
        h = m.hidden_size
        self.elementwise(
            "input_norm",
            scope,
            count,
            tokens * h,
            tensors=RESIDUAL_NORM_TENSORS,
            flops_per_element=NORM_FLOPS_PER_ELEMENT,
        )
        if group.attention is LayerAttention.LINEAR:
            self._linear_attention(scope, count, tokens, attention)
        else:
            self.sixteen_bit = SIXTEEN_BIT_ATTENTION in p.sixteen_bit_parts
            if m.mla is not None:
                self._mla_attention(group, scope, count, tokens, attention)
            else:
                self._gqa_attention(group, scope, count, tokens, attention)
            self.sixteen_bit = False
        if not m.parallel_attention:
            self.collective(
                "attn_all_reduce",
                scope,
                count,
                Collective.ALL_REDUCE,
                tokens * h * ACTIVATION_BYTES,
                p.tp,
            )
            self.elementwise(
                "post_attn_norm",
                scope,
                count,
                tokens * h,
                tensors=RESIDUAL_NORM_TENSORS,
                flops_per_element=NORM_FLOPS_PER_ELEMENT,
            )
        if group.ffn is FfnKind.MOE:
            self._moe(scope, count, tokens)
        else:
            self.sixteen_bit = SIXTEEN_BIT_DENSE_MLP in p.sixteen_bit_parts
            self._mlp("mlp", scope, count, tokens, m.intermediate_size / p.tp)
            self.sixteen_bit = False
            self.collective(
                "mlp_all_reduce",
                scope,
                count,
                Collective.ALL_REDUCE,
                tokens * h * ACTIVATION_BYTES,
                p.tp,
            )

    def _gqa_attention(
        self, group: LayerGroup, scope: str, count: int, tokens: int, attention: Sequence[Part]
    ) -> None:
        p, m = self.plan, self.plan.model
        h, d = m.hidden_size, m.head_dim
        q_out = p.heads_local * d
        kv_out = KV_TENSORS * p.kv_heads_local * d
        gate_out = q_out if m.attn_output_gate else 0
        self.gemm("qkv_proj", scope, count, tokens, h, q_out + gate_out + kv_out)
        heads_touched = p.heads_local + p.kv_heads_local
        if m.qk_norm:
            self.elementwise(
                "qk_norm",
                scope,
                count,
                tokens * heads_touched * d,
                tensors=READ_WRITE,
                flops_per_element=NORM_FLOPS_PER_ELEMENT,
            )
        self.elementwise(
            "rope",
            scope,
            count,
            tokens * heads_touched * m.rotary_dim,
            tensors=READ_WRITE,
            flops_per_element=ROPE_FLOPS_PER_ELEMENT,
        )
        for s, new_tokens in attention:
            self.gqa_attention_kernel(group, scope, count, s, new_tokens)
        if gate_out:
            self.elementwise(
                "attn_output_gate",
                scope,
                count,
                tokens * gate_out,
                tensors=GATED_OUTPUT_TENSORS,
                flops_per_element=ACT_FLOPS_PER_ELEMENT,
            )
        self.gemm("o_proj", scope, count, tokens, q_out, h)

    def gqa_attention_kernel(
        self, group: LayerGroup, scope: str, count: int, s: ForwardShape, new_tokens: int
    ) -> None:
        """The attention kernel of one sub-batch ``s`` (``new_tokens`` queries and KV appends):
        QK^T and PV over its attended pairs, the KV it reads and writes, its queries and
        outputs. Also what ``validate --kernels`` prices a measured attention kernel with."""
        p, m = self.plan, self.plan.model
        d = m.head_dim
        q_out = p.heads_local * d
        kv_out = KV_TENSORS * p.kv_heads_local * d
        pairs = s.concurrency * attended_pairs(s.query_len, s.seq_len, group.sliding_window)
        kv_read = s.concurrency * _context(s, group) * kv_out * p.kv_bytes_per_element
        kv_write = new_tokens * kv_out * p.kv_bytes_per_element
        self._attention_kernel(
            s,
            scope,
            count,
            flops=FLOPS_PER_MAC * pairs * p.heads_local * (d + d),  # QK^T then PV
            hbm_bytes=kv_read + kv_write + Q_AND_O * new_tokens * q_out * ACTIVATION_BYTES,
            rows=new_tokens * p.heads_local,
            context=_context(s, group),
            head_dim=d,
            group=p.heads_local / p.kv_heads_local,
        )

    def _linear_attention(
        self, scope: str, count: int, tokens: int, attention: Sequence[Part]
    ) -> None:
        """Gated DeltaNet (Qwen3.5 ``linear_attn``), heads split over the TP ranks: in_proj
        GEMMs, per sub-batch the short causal conv1d and the delta-rule kernel (recurrent for
        decodes, chunked for prefills; both read and write each request's state, neither reads
        anything that grows with the context), the decay / beta gates, the gated RMSNorm and
        out_proj."""
        p, m = self.plan, self.plan.model
        dims = m.linear_attention
        assert dims is not None
        h = m.hidden_size
        k_heads, v_heads = p.linear_key_heads_local, p.linear_value_heads_local
        dk, dv = dims.key_head_dim, dims.value_head_dim
        key_local, value_local = k_heads * dk, v_heads * dv
        conv_local = GDN_QK * key_local + value_local
        gates_local = GDN_GATES_PER_VALUE_HEAD * v_heads
        self.gemm("gdn_in_proj_qkvz", scope, count, tokens, h, conv_local + value_local)
        self.gemm("gdn_in_proj_ba", scope, count, tokens, h, gates_local)
        for s, part_tokens in attention:
            self.gdn_conv1d(scope, count, s, part_tokens)
        self.elementwise(
            "gdn_gating",
            scope,
            count,
            tokens * gates_local,
            tensors=READ_WRITE,
            flops_per_element=ACT_FLOPS_PER_ELEMENT,
        )
        for s, part_tokens in attention:
            self.gdn_delta_rule(scope, count, s, part_tokens)
        self.elementwise(
            "gdn_gated_norm",
            scope,
            count,
            tokens * value_local,
            tensors=GATED_OUTPUT_TENSORS,
            flops_per_element=NORM_FLOPS_PER_ELEMENT + ACT_FLOPS_PER_ELEMENT,
        )
        self.gemm("gdn_out_proj", scope, count, tokens, value_local, h)

    def gdn_conv1d(self, scope: str, count: int, s: ForwardShape, part_tokens: int) -> None:
        """Gated DeltaNet's short causal conv1d over the q, k, v channels of one sub-batch's
        ``part_tokens`` tokens (:func:`gdn_conv1d_terms`)."""
        p = self.plan
        dims = p.model.linear_attention
        assert dims is not None
        flops, hbm_bytes = gdn_conv1d_terms(
            dims, p.linear_key_heads_local, p.linear_value_heads_local, s, part_tokens
        )
        fits = p.gdn_fit
        fit = None if fits is None or s.is_decode else fits.conv_prefill
        self._gdn_op("gdn_conv1d", scope, count, s, flops, hbm_bytes, fit, p.bf16_flops_per_s)

    def gdn_delta_rule(self, scope: str, count: int, s: ForwardShape, part_tokens: int) -> None:
        """Gated DeltaNet's delta-rule kernel of one sub-batch: recurrent for a decode, chunked
        for a prefill (:func:`gdn_delta_rule_terms`)."""
        p = self.plan
        dims = p.model.linear_attention
        assert dims is not None
        flops, hbm_bytes = gdn_delta_rule_terms(
            dims, p.linear_key_heads_local, p.linear_value_heads_local, s, part_tokens
        )
        fits = p.gdn_fit
        fit = None if fits is None else fits.recurrent if s.is_decode else fits.chunked
        name = "gdn_recurrent" if s.is_decode else "gdn_chunked"
        efficiency = 1.0 if s.is_decode else p.gdn_chunk_efficiency
        self._gdn_op(
            name, scope, count, s, flops, hbm_bytes, fit, p.attention_flops_per_s, efficiency
        )

    def _gdn_op(
        self,
        name: str,
        scope: str,
        count: int,
        s: ForwardShape,
        flops: float,
        hbm_bytes: float,
        fit: FittedAttention | None,
        flops_per_s: float,
        efficiency: float = 1.0,
    ) -> None:
        """A Gated DeltaNet kernel of ``s``: on its fitted curve (``kernel_fit_gdn``: rows =
        requests x local value heads, context = one request's new tokens) if the plan has one,
        else a roofline at ``flops_per_s`` and the HBM bandwidth, both times ``efficiency``
        (the plan's ``gdn_chunk_efficiency`` for the chunked kernel)."""
        p = self.plan
        dims = p.model.linear_attention
        assert dims is not None
        self._curve_op(
            name,
            scope,
            count,
            fit,
            flops=flops,
            hbm_bytes=hbm_bytes,
            flops_per_s=flops_per_s,
            rows=s.concurrency * p.linear_value_heads_local,
            context=s.query_len,
            head_dim=dims.key_head_dim,
            efficiency=efficiency,
        )

    def _attention_kernel(
        self,
        shape: ForwardShape,
        scope: str,
        count: int,
        *,
        flops: float,
        hbm_bytes: float,
        rows: float,
        context: float,
        head_dim: float,
        group: float = 1.0,
    ) -> None:
        """An attention kernel of ``rows`` query rows (new tokens x local heads) over
        ``context`` positions per request, ``group`` query heads per KV head (1 for MLA): on
        the plan's fitted curve of its phase if it has one (``kernel_fit_attention``), else at
        the attention rate and HBM bandwidth."""
        name = "decode_attention" if shape.is_decode else "flash_attention"
        p = self.plan
        fit = p.decode_attention_fit if shape.is_decode else p.prefill_attention_fit
        self._curve_op(
            name,
            scope,
            count,
            fit,
            flops=flops,
            hbm_bytes=hbm_bytes,
            flops_per_s=p.attention_flops_per_s,
            rows=rows,
            context=context,
            head_dim=head_dim,
            group=group,
        )

    def _attention_op(
        self,
        name: str,
        scope: str,
        count: int,
        *,
        flops: float,
        hbm_bytes: float,
        flops_per_s: float,
        efficiency: float = 1.0,
    ) -> None:
        """An attention-category kernel (attention, and the linear-attention conv1d and delta
        rule): a roofline at ``flops_per_s`` and the HBM bandwidth, both times ``efficiency``."""
        self._roofline(
            name=name,
            category=OpCategory.ATTENTION,
            scope=scope,
            count=count,
            flops=flops,
            hbm_bytes=hbm_bytes,
            flops_per_s=flops_per_s * efficiency,
            hbm_bytes_per_s=self.plan.hbm_bytes_per_s * efficiency,
            launch_s=self.launch_s,
        )

    def _mla_attention(
        self, group: LayerGroup, scope: str, count: int, tokens: int, attention: Sequence[Part]
    ) -> None:
        """DeepSeek MLA: naive (decompressed) attention for prefill, absorbed for decode; in a
        mixed batch each sub-batch takes its own path, as the engines' MLA backends split it.

        With a sparse indexer (DSA: DeepSeek-V3.2, GLM-5) the indexer runs first and each query
        then attends to ``min(its causal context, topk)`` keys; without one nothing changes."""
        p, m = self.plan, self.plan.model
        mla = m.mla
        assert mla is not None
        h, heads = m.hidden_size, p.heads_local
        latent = mla.cache_elements_per_token
        if mla.q_lora_rank:
            self.gemm("qkv_a_proj", scope, count, tokens, h, mla.q_lora_rank + latent)
            self.elementwise(
                "qkv_a_norm",
                scope,
                count,
                tokens * (mla.q_lora_rank + mla.kv_lora_rank),
                tensors=READ_WRITE,
                flops_per_element=NORM_FLOPS_PER_ELEMENT,
            )
            self.gemm("q_b_proj", scope, count, tokens, mla.q_lora_rank, heads * mla.qk_head_dim)
        else:
            self.gemm("q_proj", scope, count, tokens, h, heads * mla.qk_head_dim)
            self.gemm("kv_a_proj", scope, count, tokens, h, latent)
        self.elementwise(
            "rope",
            scope,
            count,
            tokens * (heads + 1) * mla.qk_rope_head_dim,
            tensors=READ_WRITE,
            flops_per_element=ROPE_FLOPS_PER_ELEMENT,
        )
        indexer = m.sparse_indexer
        if indexer is not None:
            self._sparse_indexer(group, scope, count, tokens, attention)
        topk = None if indexer is None else indexer.topk
        window = attention_window(group, topk)
        sparse_fit = None if p.dsa_fit is None else p.dsa_fit.sparse_mla
        for s, new_tokens in attention:
            context = _context(s, group)
            # A sparse model's query reads only the top-k latents the indexer selected.
            selected = context if topk is None else min(context, topk)
            pairs = s.concurrency * attended_pairs(s.query_len, s.seq_len, window)
            if sparse_fit is not None:
                # The measured sparse kernel (``kernel_fit_dsa``): absorbed in both phases.
                self.mla_bmm(MLA_Q_ABSORB, scope, count, new_tokens)
                self.sparse_mla_kernel(
                    scope, count, s, new_tokens, sparse_fit, positions=selected, pairs=pairs
                )
                self.mla_bmm(MLA_V_UP, scope, count, new_tokens)
            elif s.is_decode:
                # Absorb W_UK into the query and W_UV after attention: MQA over the latent.
                self.mla_bmm(MLA_Q_ABSORB, scope, count, new_tokens)
                self.mla_attention_kernel(
                    scope, count, s, new_tokens, positions=selected, pairs=pairs
                )
                self.mla_bmm(MLA_V_UP, scope, count, new_tokens)
            else:
                # Decompress the latent of every context token, then multi-head attention (a
                # sparse model's queries select different tokens: together they cover the
                # context, so every latent is read and decompressed once).
                kv_b_out = heads * (mla.qk_nope_head_dim + mla.v_head_dim)
                self.gemm(
                    "kv_b_proj", scope, count, s.concurrency * context, mla.kv_lora_rank, kv_b_out
                )
                self.mla_attention_kernel(
                    scope, count, s, new_tokens, positions=context, pairs=pairs
                )
        self.gemm("o_proj", scope, count, tokens, heads * mla.v_head_dim, h)

    def mla_bmm(self, name: str, scope: str, count: int, new_tokens: float) -> None:
        """Decode MLA's batched GEMMs, one per head: :data:`MLA_Q_ABSORB` (the query times its
        W_UK slice, before attention) or :data:`MLA_V_UP` (the latent output times its W_UV
        slice, after)."""
        p = self.plan
        mla = p.model.mla
        assert mla is not None
        if name == MLA_Q_ABSORB:
            k, n = mla.qk_nope_head_dim, mla.kv_lora_rank
        else:
            k, n = mla.kv_lora_rank, mla.v_head_dim
        heads = p.heads_local
        self.gemm(name, scope, count, new_tokens, k, heads * n, weight_rows=heads * k * n)

    def mla_attention_kernel(
        self,
        scope: str,
        count: int,
        s: ForwardShape,
        new_tokens: int,
        *,
        positions: int,
        pairs: float,
    ) -> None:
        """MLA's attention kernel of one sub-batch over ``positions`` cached latents per request
        (``pairs`` attended (query, key) pairs in all): a decode attends over the latent with
        the up-projections absorbed (MQA), a prefill over the decompressed heads."""
        p = self.plan
        mla = p.model.mla
        assert mla is not None
        heads, latent = p.heads_local, mla.cache_elements_per_token
        kv_read = s.concurrency * positions * latent * p.kv_bytes_per_element
        kv_write = new_tokens * latent * p.kv_bytes_per_element
        if s.is_decode:
            width = latent + mla.kv_lora_rank
            hbm_bytes = kv_read + kv_write + new_tokens * heads * width * ACTIVATION_BYTES
        else:
            width = mla.qk_head_dim + mla.v_head_dim
            hbm_bytes = (
                kv_read
                + kv_write
                + s.concurrency * positions * heads * width * ACTIVATION_BYTES
                + new_tokens * heads * width * ACTIVATION_BYTES
            )
        self._attention_kernel(
            s,
            scope,
            count,
            flops=FLOPS_PER_MAC * pairs * heads * width,
            hbm_bytes=hbm_bytes,
            rows=new_tokens * heads,
            context=positions,
            head_dim=mla.qk_head_dim,
        )

    def sparse_mla_kernel(
        self,
        scope: str,
        count: int,
        s: ForwardShape,
        new_tokens: int,
        fit: FittedAttention,
        *,
        positions: int,
        pairs: float,
    ) -> None:
        """DSA's sparse MLA kernel on its fitted curve (``kernel_fit_dsa``): the local heads
        padded to the kernel's head block, rows = new tokens x those heads, context = the
        selected latents per request."""
        p = self.plan
        mla = p.model.mla
        assert mla is not None
        heads = max(p.heads_local, SPARSE_MLA_HEAD_BLOCK)
        flops, hbm_bytes = sparse_mla_terms(
            mla,
            heads,
            s,
            new_tokens,
            positions=positions,
            pairs=pairs,
            kv_bytes_per_element=p.kv_bytes_per_element,
        )
        self._curve_op(
            "sparse_mla_attention",
            scope,
            count,
            fit,
            flops=flops,
            hbm_bytes=hbm_bytes,
            flops_per_s=p.attention_flops_per_s,
            rows=new_tokens * heads,
            context=positions,
            head_dim=mla.cache_elements_per_token,
        )

    def _curve_op(
        self,
        name: str,
        scope: str,
        count: int,
        fit: FittedAttention | None,
        *,
        flops: float,
        hbm_bytes: float,
        flops_per_s: float,
        rows: float,
        context: float,
        head_dim: float,
        group: float = 1.0,
        efficiency: float = 1.0,
    ) -> None:
        """An attention-category kernel on its fitted attention-form curve at its shape
        (``rows``, ``context``, ``head_dim``, ``group`` query heads per KV head), or without
        one (``fit`` None) a roofline at ``flops_per_s`` and the HBM bandwidth, both times
        ``efficiency``."""
        if fit is None:
            self._attention_op(
                name,
                scope,
                count,
                flops=flops,
                hbm_bytes=hbm_bytes,
                flops_per_s=flops_per_s,
                efficiency=efficiency,
            )
            return
        rate, bandwidth = fit.rates(flops, rows, context, head_dim, group)
        self._roofline(
            name=name,
            category=OpCategory.ATTENTION,
            scope=scope,
            count=count,
            flops=flops,
            hbm_bytes=hbm_bytes,
            flops_per_s=rate,
            hbm_bytes_per_s=bandwidth,
            launch_s=self._fitted_floor_s(fit.fixed_s, fit.graph_fixed_s),
            source=fit.source,
        )

    def _sparse_indexer(
        self, group: LayerGroup, scope: str, count: int, tokens: int, attention: Sequence[Part]
    ) -> None:
        """DSA lightning indexer: its projections over every new token, then per sub-batch the
        FP8 scores of each new token against every cached key and the top-k selection.

        Replicated on every TP rank (the engines' ``ReplicatedLinear``), so nothing is split.
        """
        m = self.plan.model
        mla, ix = m.mla, m.sparse_indexer
        assert mla is not None and ix is not None
        h, d, heads = m.hidden_size, ix.head_dim, ix.n_heads
        self.gemm("indexer_q_proj", scope, count, tokens, mla.q_lora_rank, heads * d)
        self.gemm("indexer_k_proj", scope, count, tokens, h, d)
        self.elementwise(
            "indexer_k_norm",
            scope,
            count,
            tokens * d,
            tensors=READ_WRITE,
            flops_per_element=NORM_FLOPS_PER_ELEMENT,
        )
        # weights_proj is not quantized in the checkpoints (the engines load it 16-bit).
        self.gemm("indexer_weights_proj", scope, count, tokens, h, heads, quantized=False)
        self.elementwise(
            "indexer_rope",
            scope,
            count,
            tokens * (heads + 1) * mla.qk_rope_head_dim,
            tensors=READ_WRITE,
            flops_per_element=ROPE_FLOPS_PER_ELEMENT,
        )
        self.elementwise(
            "indexer_rotate_quant",
            scope,
            count,
            tokens * (heads + 1) * d,
            tensors=READ_WRITE,
            flops_per_element=math.log2(d) + FP8_QUANT_FLOPS_PER_ELEMENT,
        )
        for s, new_tokens in attention:
            self.indexer_logits(group, scope, count, s, new_tokens)
            self.indexer_topk(group, scope, count, s)

    def indexer_logits(
        self, group: LayerGroup, scope: str, count: int, s: ForwardShape, part_tokens: int
    ) -> None:
        """The DSA indexer's FP8 scores of one sub-batch (``part_tokens`` new tokens): each one
        against every cached key of its request (the window caps a sliding layer); on the
        fitted curve of its phase (``kernel_fit_dsa``) where the plan has one."""
        p = self.plan
        ix = p.model.sparse_indexer
        assert ix is not None
        context = _context(s, group)
        pairs = s.concurrency * attended_pairs(s.query_len, s.seq_len, group.sliding_window)
        flops, hbm_bytes = indexer_logits_terms(ix, s, part_tokens, context, pairs)
        fits = p.dsa_fit
        fit = None if fits is None else fits.logits_decode if s.is_decode else fits.logits
        self._curve_op(
            "indexer_logits",
            scope,
            count,
            fit,
            flops=flops,
            hbm_bytes=hbm_bytes,
            flops_per_s=p.indexer_flops_per_s,
            # A decode walks each request's keys in turn: its rows are the keys (DSA_LOGITS_DECODE).
            rows=context if s.is_decode else part_tokens,
            context=context,
            head_dim=ix.head_dim,
        )

    def indexer_topk(self, group: LayerGroup, scope: str, count: int, s: ForwardShape) -> None:
        """The DSA indexer's top-k over each new token's logits (:func:`indexer_topk_terms`);
        on the fitted curve (``kernel_fit_dsa``) where the plan has one, and then not at all
        while the context fits in the top-k (the measured kernel does not run)."""
        p = self.plan
        ix = p.model.sparse_indexer
        assert ix is not None
        context = _context(s, group)
        pairs = s.concurrency * attended_pairs(s.query_len, s.seq_len, group.sliding_window)
        flops, hbm_bytes = indexer_topk_terms(pairs)
        fit = None if p.dsa_fit is None else p.dsa_fit.topk
        if fit is None or context > ix.topk:
            self._curve_op(
                "indexer_topk",
                scope,
                count,
                fit,
                flops=flops,
                hbm_bytes=hbm_bytes,
                flops_per_s=p.bf16_flops_per_s,
                rows=new_tokens(s),
                context=context,
                head_dim=ix.head_dim,
            )

    def _mlp(self, name: str, scope: str, count: int, tokens: float, width: float) -> None:
        """Dense MLP of local ``width`` (gated: gate+up, act, down; plain: up, act, down)."""
        m = self.plan.model
        h = m.hidden_size
        in_matrices = m.mlp_matrices - 1
        self.gemm(f"{name}_up", scope, count, tokens, h, in_matrices * width)
        self.elementwise(
            f"{name}_act",
            scope,
            count,
            tokens * width,
            tensors=in_matrices + 1,
            flops_per_element=ACT_FLOPS_PER_ELEMENT,
        )
        self.gemm(f"{name}_down", scope, count, tokens, width, h)

    def _moe(self, scope: str, count: int, tokens: int) -> None:
        p, m = self.plan, self.plan.model
        moe = m.moe
        assert moe is not None
        h = m.hidden_size
        e, k = moe.num_experts, moe.experts_per_token
        self.gemm("router", scope, count, tokens, h, e, category=OpCategory.MOE, quantized=False)
        self.elementwise(
            "router_topk",
            scope,
            count,
            tokens * e,
            tensors=1,
            flops_per_element=ROUTER_TOPK_FLOPS_PER_ELEMENT,
            category=OpCategory.MOE,
        )
        dispatch_bytes = tokens / p.tp * k * h * p.gemm_input_bytes
        combine_bytes = tokens / p.tp * k * h * ACTIVATION_BYTES
        # experts tensor-parallel over the data-parallel replicas (no EP): every rank gathers
        # all the group's tokens and reduce-scatters the experts' output back to their ranks
        gathered = p.ep == 1 and p.moe_group_size > p.tp
        group_tokens = tokens * p.tokens_scale
        # expert parallelism exchanges tokens unless every rank holds them all already (the
        # expert group is the attention-TP group) and the engine routes them in place
        exchanged = p.ep > 1 and (p.moe_group_size > p.tp or p.tp_group_all_to_all)
        if exchanged:
            self.collective(
                "moe_dispatch",
                scope,
                count,
                Collective.ALL_TO_ALL,
                dispatch_bytes,
                p.moe_group_size,
            )
        elif gathered:
            self.collective(
                "moe_all_gather",
                scope,
                count,
                Collective.ALL_GATHER,
                group_tokens * h * p.gemm_input_bytes,
                p.moe_group_size,
            )
        self.moe_experts(scope, count, tokens)
        if moe.shared_intermediate_size:
            self.sixteen_bit = SIXTEEN_BIT_SHARED_EXPERTS in p.sixteen_bit_parts
            self._mlp("shared_expert", scope, count, tokens, moe.shared_intermediate_size / p.tp)
            self.sixteen_bit = False
        if exchanged:
            self.collective(
                "moe_combine",
                scope,
                count,
                Collective.ALL_TO_ALL,
                combine_bytes,
                p.moe_group_size,
            )
        elif gathered:
            self.collective(
                "moe_reduce_scatter",
                scope,
                count,
                Collective.REDUCE_SCATTER,
                group_tokens * h * ACTIVATION_BYTES,
                p.moe_group_size,
            )
        self.moe_combine_sum(scope, count, tokens)
        self.collective(
            "moe_all_reduce",
            scope,
            count,
            Collective.ALL_REDUCE,
            tokens * h * ACTIVATION_BYTES,
            p.tp,
        )

    def expert_load(self, tokens: int) -> tuple[float, float, float]:
        """``(routes, touched, width)`` of ``tokens`` tokens on this device: the token-expert
        pairs it computes, the expert slots they touch (uniform routing), each expert's local
        intermediate width."""
        p = self.plan
        moe = p.model.moe
        assert moe is not None
        # The routed pairs spread evenly over the slots (uniform routing; a redundant slot
        # takes a share of its expert's pairs, each token going to one replica).
        slots, k = p.expert_slots or moe.num_experts, moe.experts_per_token
        group_tokens = tokens * p.tokens_scale
        touched = slots / p.ep * (1.0 - (1.0 - k / slots) ** group_tokens)
        return group_tokens * k / p.ep, touched, moe.expert_intermediate_size / p.moe_tp

    def moe_experts(self, scope: str, count: int, tokens: int) -> None:
        """The routed experts of ``tokens`` tokens on this device: the grouped up (gate+up)
        GEMM over the experts they touch, the activation, the grouped down GEMM. With a
        fitted MoE curve (``plan.moe_fit``) the grouped GEMMs take its efficiencies at the
        tokens per touched expert and one expert's weights, and its fixed and per-expert
        costs; the activation is fused into the up GEMM (no op of its own)."""
        p, m = self.plan, self.plan.model
        h = m.hidden_size
        routes, touched, width = self.expert_load(tokens)
        in_matrices = m.mlp_matrices - 1
        per_expert = routes / touched if touched > 0 else routes
        fit = p.moe_fit
        if fit is not None:
            expert_elements = m.mlp_matrices * h * width
            launch = self._fitted_floor_s(fit.fixed_s, fit.graph_fixed_s) + touched * fit.expert_s
            for name, k, n in (("experts_up", h, in_matrices * width), ("experts_down", width, h)):
                self._roofline(
                    name=name,
                    category=OpCategory.MOE,
                    scope=scope,
                    count=count,
                    flops=FLOPS_PER_MAC * routes * k * n,
                    hbm_bytes=touched * k * n * p.weight_bytes_per_param
                    + routes * k * p.gemm_input_bytes
                    + routes * n * ACTIVATION_BYTES,
                    flops_per_s=fit.flops_per_s(per_expert, expert_elements),
                    hbm_bytes_per_s=fit.hbm_bytes_per_s(expert_elements),
                    launch_s=launch,
                    source=fit.source,
                )
            return
        self.gemm(
            "experts_up",
            scope,
            count,
            routes,
            h,
            in_matrices * width,
            category=OpCategory.MOE,
            weight_rows=touched * h * in_matrices * width,
            rows_per_weight=per_expert,
        )
        self.elementwise(
            "experts_act",
            scope,
            count,
            routes * width,
            tensors=in_matrices + 1,
            flops_per_element=ACT_FLOPS_PER_ELEMENT,
            category=OpCategory.MOE,
        )
        self.gemm(
            "experts_down",
            scope,
            count,
            routes,
            width,
            h,
            category=OpCategory.MOE,
            weight_rows=touched * width * h,
            rows_per_weight=per_expert,
        )

    def moe_combine_sum(self, scope: str, count: int, tokens: int) -> None:
        """The weighted sum of each token's ``k`` expert outputs. With a fitted MoE curve: the
        routing, permute, un-permute and sum around the grouped GEMMs, ``route_passes`` HBM
        passes over every routed token's hidden vector at the peak bandwidth; in a captured
        graph, plus the in-graph floors of the MoE call's other kernels (``graph_extra_s``)."""
        p, m = self.plan, self.plan.model
        assert m.moe is not None
        k = m.moe.experts_per_token
        fit = p.moe_fit
        if fit is not None:
            routes = self.expert_load(tokens)[0]
            self._roofline(
                name="moe_combine_sum",
                category=OpCategory.MOE,
                scope=scope,
                count=count,
                flops=tokens * m.hidden_size * k,
                hbm_bytes=fit.curve.route_passes * routes * m.hidden_size * ACTIVATION_BYTES,
                flops_per_s=p.bf16_flops_per_s,
                hbm_bytes_per_s=fit.peak_hbm_bytes_per_s,
                launch_s=fit.graph_extra_s if self.graph else 0.0,
                source=fit.source,
            )
            return
        self.elementwise(
            "moe_combine_sum",
            scope,
            count,
            tokens * m.hidden_size,
            tensors=k + 1,
            flops_per_element=k,
            category=OpCategory.MOE,
        )

    # -- per forward -----------------------------------------------------------------------
    def embedding(self, scope: str, count: int, tokens: int) -> None:
        self.elementwise(
            "embedding",
            scope,
            count,
            tokens * self.plan.model.hidden_size,
            tensors=READ_WRITE,
            flops_per_element=0,
        )

    def lm_head(self, scope: str, count: int, sample_tokens: int) -> None:
        p, m = self.plan, self.plan.model
        vocab_local = m.vocab_size / p.tp
        self.elementwise(
            "final_norm",
            scope,
            count,
            sample_tokens * m.hidden_size,
            tensors=READ_WRITE,
            flops_per_element=NORM_FLOPS_PER_ELEMENT,
        )
        self.gemm(
            "lm_head",
            scope,
            count,
            sample_tokens,
            m.hidden_size,
            vocab_local,
            category=OpCategory.LM_HEAD,
            quantized=False,
        )
        self.collective(
            "logits_all_gather",
            scope,
            count,
            Collective.ALL_GATHER,
            sample_tokens * m.vocab_size * LOGIT_BYTES,
            p.tp,
        )
        self.elementwise(
            "sampling",
            scope,
            count,
            sample_tokens * m.vocab_size,
            tensors=SAMPLING_PASSES,
            flops_per_element=ROUTER_TOPK_FLOPS_PER_ELEMENT,
            category=OpCategory.LM_HEAD,
            element_bytes=LOGIT_BYTES,
        )

    def pipeline_sends(self, tokens: int) -> None:
        p = self.plan
        if p.pp <= 1:
            return
        message = tokens * p.model.hidden_size * ACTIVATION_BYTES
        self._communication(
            name="pp_send_recv",
            scope="model",
            count=p.pp - 1,
            comm_bytes=message,
            comm_s=collective_time_s(Collective.SEND_RECV, message, 2, p.pp_tier),
            launch_s=self.launch_s,
        )

    def mtp_drafts(self, drafts: int, decode: ForwardShape) -> None:
        """``drafts`` sequential draft passes, one token per request of ``decode`` each
        (decode-only forwards of their own: graph launch cost when graph mode is on): the
        model's MTP modules, or a one-layer EAGLE-3 head for a model without them."""
        if drafts <= 0:
            return
        main_launch_s, self.launch_s = self.launch_s, self.draft_launch_s
        main_graph, self.graph = self.graph, self.draft_graph
        try:
            if self.plan.model.num_mtp_layers:
                self._mtp_module_drafts(drafts, decode)
            else:
                self._eagle3_drafts(drafts, decode)
        finally:
            self.launch_s = main_launch_s
            self.graph = main_graph

    def _mtp_module_drafts(self, drafts: int, decode: ForwardShape) -> None:
        p, m = self.plan, self.plan.model
        tokens = decode.concurrency
        scope = "mtp"
        count = drafts * m.num_mtp_layers
        self.embedding(scope, count, tokens)
        self.gemm(
            "mtp_eh_proj",
            scope,
            count,
            tokens,
            MTP_EH_INPUTS * m.hidden_size,
            m.hidden_size / p.tp,
        )
        ffn = FfnKind.MOE if m.moe is not None else FfnKind.DENSE
        layer = LayerGroup(ffn=ffn, sliding_window=None, count=1)
        self.layer_group(layer, scope, count, tokens, ((decode, tokens),))
        self.lm_head(scope, count, tokens)

    def _eagle3_drafts(self, drafts: int, decode: ForwardShape) -> None:
        """The one-layer EAGLE-3 head (see ``plan.EAGLE3_LAYERS``): ``fc`` fuses the target's
        hidden states once per verify step, then each of the ``drafts`` tokens runs the draft
        layer (its QKV reads 2h: the extra h as its own GEMM) and the draft-vocabulary LM head,
        one token per request."""
        p, m = self.plan, self.plan.model
        tokens = decode.concurrency
        h = m.hidden_size
        scope = "eagle3"
        self.gemm("eagle3_fc", scope, 1, tokens, EAGLE3_FC_INPUTS * h, h / p.tp)
        self.embedding(scope, drafts, tokens)
        qkv_out = eagle3_qkv_outputs(m)
        self.gemm("eagle3_qkv_hidden", scope, drafts, tokens, h, qkv_out / p.tp)
        layer = LayerGroup(ffn=FfnKind.DENSE, sliding_window=None, count=1)
        self.layer_group(layer, scope, drafts, tokens, ((decode, tokens),))
        self.gemm("eagle3_lm_head", scope, drafts, tokens, h, EAGLE3_DRAFT_VOCAB / p.tp)

    def overhead(self) -> None:
        self._fixed(name="forward_overhead", scope="model", time_s=self.plan.forward_overhead_s)
