"""The architecture of a decoder model, as the latency and memory model reads it.

Everything the latency model needs is flattened into one frozen :class:`ModelArchitecture`;
per-layer differences (dense vs MoE FFN, sliding vs full attention, softmax attention vs a
Gated DeltaNet linear-attention layer) become :class:`LayerGroup` counts so the runner computes
each distinct layer once. Sizes are in
elements; :mod:`app.core.catalog.hf_config` builds these values from a ``config.json``.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any

from app.core.errors import InvalidParameterError

# Gated MLPs (SwiGLU) hold gate, up and down matrices; plain MLPs (GELU) hold up and down.
GATED_MLP_MATRICES = 3
PLAIN_MLP_MATRICES = 2
KV_TENSORS = 2  # a K and a V vector per KV head and token
NORMS_PER_LAYER = 2  # pre-attention and pre-MLP norms
QK_NORMS = 2  # Qwen3 normalizes queries and keys (one head_dim weight each)
MTP_EH_INPUTS = 2  # DeepSeek MTP projects [embedding ; hidden] (2h) back to h
MTP_NORMS = 2  # enorm and hnorm of an MTP module
# HF default when a config omits ``intermediate_size`` / ``n_inner`` for GPT-J and Falcon.
DEFAULT_FFN_MULTIPLIER = 4
# Gated DeltaNet (Qwen3-Next / Qwen3.5 ``linear_attn``): queries and keys have the key width,
# values and the output gate z the value width; q, k and v all pass the short causal conv.
GDN_QK = 2  # a query and a key vector per key head
GDN_GATES_PER_VALUE_HEAD = 2  # in_proj_b (beta) and in_proj_a (decay) emit a scalar per v head
GDN_PARAMS_PER_VALUE_HEAD = 2  # A_log and dt_bias of the decay, one each per value head
#: Recurrent (SSM) state dtype when a config does not name it: the reference kernels keep the
#: state in fp32 (FLA's chunk_gated_delta_rule returns its final state as float32; vLLM's GDN
#: MambaSpec of Qwen3.5 holds (bfloat16 conv, float32 temporal) states; SGLang's
#: --mamba-ssm-dtype defaults to float32).
FP32_BYTES = 4
# DeepSeek Sparse Attention (DSA) lightning indexer, as DeepSeek-V3.2-Exp's reference
# ``inference/model.py`` builds it (GLM-5's ``GlmMoeDsaIndexer`` is the same module): its key
# cache holds FP8 e4m3 keys plus one fp32 scale per 128-element block, i.e. 128 + 4 = 132 bytes
# per token for index_head_dim 128 (the layout vLLM and SGLang allocate too).
INDEXER_KEY_BYTES = 1.0  # float8_e4m3fn
INDEXER_SCALE_BYTES = 4.0  # float32 scale
INDEXER_SCALE_BLOCK = 128  # key elements per scale (the reference's block_size)
INDEXER_K_NORM_TENSORS = 2  # k_norm is a LayerNorm: weight and bias of index_head_dim each
#: Parts of a decoder a quantized checkpoint may keep in 16 bits beside its quantized experts
#: (its ``modules_to_not_convert`` / ``ignore`` list): the softmax-attention projections, the
#: shared experts and the dense MLPs. The router, embeddings and LM head are 16-bit in the
#: runner whatever the checkpoint.
SIXTEEN_BIT_ATTENTION = "attention"
SIXTEEN_BIT_SHARED_EXPERTS = "shared_experts"
SIXTEEN_BIT_DENSE_MLP = "dense_mlp"
SIXTEEN_BIT_PARTS = (SIXTEEN_BIT_ATTENTION, SIXTEEN_BIT_SHARED_EXPERTS, SIXTEEN_BIT_DENSE_MLP)


class AttentionKind(enum.StrEnum):
    GQA = "gqa"  # MHA / GQA / MQA: K and V heads cached per token
    MLA = "mla"  # multi-head latent attention: one compressed latent + RoPE key cached


class FfnKind(enum.StrEnum):
    DENSE = "dense"
    MOE = "moe"


class LayerAttention(enum.StrEnum):
    """How a decoder layer mixes tokens (named as in HF ``layer_types``)."""

    FULL = "full_attention"  # softmax attention over the KV cache (capped by a sliding window)
    LINEAR = "linear_attention"  # Gated DeltaNet: a fixed-size recurrent state, no KV cache


@dataclass(frozen=True, slots=True, kw_only=True)
class LinearAttentionDims:
    """Gated DeltaNet sizes (the ``linear_*`` keys of Qwen3-Next / Qwen3.5 configs).

    Per value head the layer keeps a ``key_head_dim x value_head_dim`` state matrix; queries and
    keys have ``num_key_heads`` heads, each shared by ``num_value_heads / num_key_heads`` value
    heads. ``state_bytes_per_element`` is the dtype of that recurrent state (fp32 by default).
    """

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel_size: int
    state_bytes_per_element: int = FP32_BYTES

    def __post_init__(self) -> None:
        for field in (
            "num_key_heads",
            "num_value_heads",
            "key_head_dim",
            "value_head_dim",
            "conv_kernel_size",
            "state_bytes_per_element",
        ):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidParameterError(field, value, "an integer >= 1")
        if self.num_value_heads % self.num_key_heads:
            raise InvalidParameterError(
                "linear_num_value_heads",
                self.num_value_heads,
                f"a multiple of linear_num_key_heads={self.num_key_heads}",
            )

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the depthwise causal conv: q, k and v."""
        return GDN_QK * self.key_dim + self.value_dim

    @property
    def in_proj_outputs(self) -> int:
        """Outputs of the input projections: q, k, v, the output gate z, beta and decay."""
        return self.conv_dim + self.value_dim + GDN_GATES_PER_VALUE_HEAD * self.num_value_heads

    @property
    def state_elements(self) -> int:
        """Recurrent state of one request in one layer: a d_k x d_v matrix per value head."""
        return self.num_value_heads * self.key_head_dim * self.value_head_dim

    @property
    def conv_state_elements(self) -> int:
        """Conv state of one request in one layer: the last ``kernel - 1`` inputs per channel."""
        return (self.conv_kernel_size - 1) * self.conv_dim


@dataclass(frozen=True, slots=True, kw_only=True)
class MlaDims:
    """DeepSeek multi-head latent attention sizes (``q_lora_rank`` 0 = no Q compression)."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def cache_elements_per_token(self) -> int:
        """Latent plus the decoupled RoPE key, shared by all heads."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True, slots=True, kw_only=True)
class SparseIndexerDims:
    """DSA lightning indexer sizes (config ``index_topk``, ``index_n_heads``, ``index_head_dim``).

    Per new token the indexer projects ``n_heads`` queries of ``head_dim`` from MLA's query
    latent (``wq_b``) and one key of ``head_dim`` from the hidden state (``wk``, then the
    LayerNorm ``k_norm``), plus one weight per head (``weights_proj``); it scores every cached
    key and MLA then attends only to the ``topk`` best-scoring tokens.
    """

    topk: int
    n_heads: int
    head_dim: int

    def __post_init__(self) -> None:
        for field, key in (
            ("topk", "index_topk"),
            ("n_heads", "index_n_heads"),
            ("head_dim", "index_head_dim"),
        ):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidParameterError(key, value, "an integer >= 1")

    @property
    def cache_bytes_per_token(self) -> float:
        """The indexer's own key cache of one token in one layer (FP8 keys + fp32 scales)."""
        scales = -(-self.head_dim // INDEXER_SCALE_BLOCK)  # ceil: one scale per started block
        return self.head_dim * INDEXER_KEY_BYTES + scales * INDEXER_SCALE_BYTES

    def params(self, hidden_size: int, q_lora_rank: int) -> int:
        """``wq_b`` (q latent -> heads x head_dim), ``wk`` (hidden -> head_dim),
        ``weights_proj`` (hidden -> heads) and the ``k_norm`` LayerNorm."""
        q = q_lora_rank * self.n_heads * self.head_dim
        k = hidden_size * self.head_dim
        weights = hidden_size * self.n_heads
        return q + k + weights + INDEXER_K_NORM_TENSORS * self.head_dim


@dataclass(frozen=True, slots=True, kw_only=True)
class MoeDims:
    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    num_shared_experts: int = 0
    shared_intermediate_size: int = 0  # total over all shared experts

    def __post_init__(self) -> None:
        # The runner routes k of the e experts per token (a fraction k / e of each).
        if self.num_experts < 1:
            raise InvalidParameterError(
                "num_experts", self.num_experts, "an integer >= 1 for a mixture-of-experts model"
            )
        if not 1 <= self.experts_per_token <= self.num_experts:
            raise InvalidParameterError(
                "num_experts_per_tok",
                self.experts_per_token,
                f"an integer in [1, num_experts={self.num_experts}]",
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerGroup:
    """``count`` decoder layers that share FFN kind, attention window and token mixer."""

    ffn: FfnKind
    sliding_window: int | None
    count: int
    attention: LayerAttention = LayerAttention.FULL

    def __post_init__(self) -> None:
        if self.attention is LayerAttention.LINEAR and self.sliding_window is not None:
            raise InvalidParameterError(
                "sliding_window", self.sliding_window, "None for a linear-attention layer"
            )

    def to_dict(self) -> dict[str, Any]:
        """The wire form; ``attention`` only for linear-attention groups, so every softmax-only
        architecture keeps the document (and the runner identity, a cache key) it always had."""
        out: dict[str, Any] = {
            "ffn": self.ffn.value,
            "sliding_window": self.sliding_window,
            "count": self.count,
        }
        if self.attention is not LayerAttention.FULL:
            out["attention"] = self.attention.value
        return out


#: Fields added after the architecture document was first published: left out of
#: :meth:`ModelArchitecture.to_dict` while at their default, so the document and the runner
#: identity (the latency-cache key, which hashes it) of every older architecture stay the same.
_NEW_FIELDS_AT_DEFAULT = frozenset(
    {
        "attn_output_gate",
        "linear_attention",
        "sparse_indexer",
        "native_linear",
        "sixteen_bit_parts",
        "unmodelled_sixteen_bit",
    }
)


#: Fields that bound a request but change no forward's cost: left out of the runner identity
#: (:meth:`ModelArchitecture.cost_dict`), so adding one keeps every latency-cache key.
_REQUEST_BOUND_FIELDS = frozenset({"max_context_tokens"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelArchitecture:
    """Everything the latency and memory model reads from a config (sizes in elements)."""

    name: str
    model_type: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int  # dense FFN width (dense layers of an MoE model too)
    mlp_gated: bool = True
    parallel_attention: bool = False  # attention and MLP read one norm, one residual add
    qk_norm: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    rotary_dim: int = 0
    attention: AttentionKind = AttentionKind.GQA
    mla: MlaDims | None = None
    sparse_indexer: SparseIndexerDims | None = None  # DSA: MLA attends to the top-k tokens
    moe: MoeDims | None = None
    layer_groups: tuple[LayerGroup, ...] = ()
    num_mtp_layers: int = 0
    native_quantization: str | None = None
    #: The linear action (``LinearQuantAction`` value) the checkpoint's quantization is, when
    #: the runner has it; with that action the checkpoint's :data:`SIXTEEN_BIT_PARTS` stay 16-bit.
    native_linear: str | None = None
    sixteen_bit_parts: frozenset[str] = frozenset()
    #: Entries of the checkpoint's 16-bit list the runner has no part for (said in the notes).
    unmodelled_sixteen_bit: tuple[str, ...] = ()
    # Qwen3-Next / Qwen3.5 full attention: q_proj also emits a per-head sigmoid gate on the
    # attention output (2 x num_heads x head_dim outputs).
    attn_output_gate: bool = False
    linear_attention: LinearAttentionDims | None = None
    #: The most tokens (prompt + output) one request may hold: the config's position limit,
    #: rope-scaled when it declares so (:func:`app.core.catalog.hf_config.context_limit`);
    #: None: the config states none (no check).
    max_context_tokens: int | None = None

    def __post_init__(self) -> None:
        for field in (
            "hidden_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "vocab_size",
            "intermediate_size",
        ):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidParameterError(field, value, "an integer >= 1")
        unknown_parts = sorted(self.sixteen_bit_parts - set(SIXTEEN_BIT_PARTS))
        if unknown_parts:
            raise InvalidParameterError(
                "sixteen_bit_parts", unknown_parts[0], f"one of {', '.join(SIXTEEN_BIT_PARTS)}"
            )
        if self.num_heads % self.num_kv_heads:
            raise InvalidParameterError(
                "num_key_value_heads", self.num_kv_heads, f"a divisor of {self.num_heads}"
            )
        if (self.attention is AttentionKind.MLA) != (self.mla is not None):
            raise InvalidParameterError("mla", self.mla, "given exactly for MLA attention")
        if self.sparse_indexer is not None and (self.mla is None or not self.mla.q_lora_rank):
            # The indexer's queries project from MLA's query latent (DeepSeek-V3.2, GLM-5).
            raise InvalidParameterError(
                "index_topk",
                self.sparse_indexer.topk,
                "set only for MLA attention with a query latent (q_lora_rank > 0)",
            )
        if not self.layer_groups:
            object.__setattr__(
                self,
                "layer_groups",
                (LayerGroup(ffn=FfnKind.DENSE, sliding_window=None, count=self.num_layers),),
            )
        if sum(g.count for g in self.layer_groups) != self.num_layers:
            raise InvalidParameterError("layer_groups", self.layer_groups, "num_layers in total")
        if self.moe is None and any(g.ffn is FfnKind.MOE for g in self.layer_groups):
            raise InvalidParameterError("moe", None, "MoE sizes for MoE layers")
        if self.linear_attention is None and self.num_linear_attention_layers:
            raise InvalidParameterError(
                "linear_attention", None, "Gated DeltaNet sizes for linear-attention layers"
            )

    def check_context(self, *, field: str, value: int, tokens: int, what: str) -> None:
        """A request holding ``tokens`` (``what``: how they add up) beyond the model's context
        is an :class:`InvalidParameterError` naming ``field`` (given as ``value``) and the
        limit."""
        limit = self.max_context_tokens
        if limit is not None and tokens > limit:
            raise InvalidParameterError(
                field,
                value,
                f"{what} = {tokens:,} within {self.name}'s context of {limit:,} tokens "
                "(max_position_embeddings, rope-scaled when the config says so)",
            )

    # -- derived sizes -----------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def num_moe_layers(self) -> int:
        return sum(g.count for g in self.layer_groups if g.ffn is FfnKind.MOE)

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def num_linear_attention_layers(self) -> int:
        return sum(g.count for g in self.layer_groups if g.attention is LayerAttention.LINEAR)

    @property
    def num_full_attention_layers(self) -> int:
        """Layers with softmax attention (sliding-window ones included): the KV-cache layers."""
        return self.num_layers - self.num_linear_attention_layers

    @property
    def kv_elements_per_token_per_layer(self) -> int:
        if self.mla is not None:
            return self.mla.cache_elements_per_token
        return KV_TENSORS * self.num_kv_heads * self.head_dim

    @property
    def indexer_cache_bytes_per_token_per_layer(self) -> float:
        """The sparse indexer's key cache (its own FP8 dtype, whatever the KV dtype); 0 without."""
        return 0.0 if self.sparse_indexer is None else self.sparse_indexer.cache_bytes_per_token

    def kv_bytes_per_token(self, bytes_per_element: float) -> float:
        """KV-cache bytes of one token over the attention layers, unsharded (MTP layers apart;
        linear-attention layers keep a fixed-size state instead, see :meth:`state_bytes`), the
        sparse indexer's key cache included."""
        layers = self.num_full_attention_layers
        kv = layers * self.kv_elements_per_token_per_layer * bytes_per_element
        if self.sparse_indexer is None:
            return kv
        return kv + layers * self.indexer_cache_bytes_per_token_per_layer

    def state_bytes(self, conv_bytes_per_element: float) -> float:
        """Recurrent state of one request over the linear-attention layers, unsharded: the SSM
        state (``state_bytes_per_element``) plus the conv state (``conv_bytes_per_element``,
        the activation dtype). It does not grow with the context."""
        dims = self.linear_attention
        if dims is None:
            return 0.0
        per_layer = (
            dims.state_elements * dims.state_bytes_per_element
            + dims.conv_state_elements * conv_bytes_per_element
        )
        return self.num_linear_attention_layers * per_layer

    @property
    def mlp_matrices(self) -> int:
        return GATED_MLP_MATRICES if self.mlp_gated else PLAIN_MLP_MATRICES

    # -- parameter counts (elements) ---------------------------------------------------------
    @property
    def attention_params_per_layer(self) -> int:
        h = self.hidden_size
        if self.mla is not None:
            m = self.mla
            q = (
                h * m.q_lora_rank + m.q_lora_rank * self.num_heads * m.qk_head_dim + m.q_lora_rank
                if m.q_lora_rank
                else h * self.num_heads * m.qk_head_dim
            )
            kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
            kv_b = m.kv_lora_rank * self.num_heads * (m.qk_nope_head_dim + m.v_head_dim)
            o = self.num_heads * m.v_head_dim * h
            indexer = (
                0 if self.sparse_indexer is None else self.sparse_indexer.params(h, m.q_lora_rank)
            )
            return q + kv_a + kv_b + o + indexer
        q_out = self.num_heads * self.head_dim
        kv_out = KV_TENSORS * self.num_kv_heads * self.head_dim
        params = h * (q_out + kv_out) + q_out * h
        if self.attn_output_gate:
            params += h * q_out
        if self.attention_bias:
            params += q_out + kv_out
        if self.qk_norm:
            params += QK_NORMS * self.head_dim
        return params

    @property
    def linear_attention_params_per_layer(self) -> int:
        """Gated DeltaNet: in_proj (q, k, v, z, b, a), the depthwise conv1d, A_log and dt_bias,
        the gated RMSNorm (one value_head_dim weight shared by every head) and out_proj."""
        dims = self.linear_attention
        if dims is None:
            return 0
        h = self.hidden_size
        return (
            h * dims.in_proj_outputs
            + dims.conv_dim * dims.conv_kernel_size
            + GDN_PARAMS_PER_VALUE_HEAD * dims.num_value_heads
            + dims.value_head_dim
            + dims.value_dim * h
        )

    @property
    def dense_mlp_params_per_layer(self) -> int:
        params = self.mlp_matrices * self.hidden_size * self.intermediate_size
        if self.mlp_bias:
            params += self.intermediate_size + self.hidden_size
        return params

    @property
    def moe_params_per_layer(self) -> int:
        """Routed experts, shared experts and router of one MoE layer."""
        if self.moe is None:
            return 0
        m = self.moe
        per_expert = self.mlp_matrices * self.hidden_size * m.expert_intermediate_size
        shared = self.mlp_matrices * self.hidden_size * m.shared_intermediate_size
        router = self.hidden_size * m.num_experts
        return m.num_experts * per_expert + shared + router

    @property
    def norm_params_per_layer(self) -> int:
        return NORMS_PER_LAYER * self.hidden_size

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def mtp_params(self) -> int:
        """MTP modules (DeepSeek): eh_proj (2h -> h), two norms and one MoE decoder layer."""
        if not self.num_mtp_layers:
            return 0
        h = self.hidden_size
        ffn = self.moe_params_per_layer if self.moe else self.dense_mlp_params_per_layer
        layer = self.attention_params_per_layer + ffn + self.norm_params_per_layer
        return self.num_mtp_layers * (MTP_EH_INPUTS * h * h + MTP_NORMS * h + layer)

    @property
    def num_params(self) -> int:
        """Parameters of the main model (embedding, decoder layers, final norm, lm_head)."""
        layers = self.num_full_attention_layers * self.attention_params_per_layer
        layers += self.num_linear_attention_layers * self.linear_attention_params_per_layer
        layers += self.num_layers * self.norm_params_per_layer
        layers += self.num_dense_layers * self.dense_mlp_params_per_layer
        layers += self.num_moe_layers * self.moe_params_per_layer
        return self.embedding_params + layers + self.hidden_size + self.lm_head_params

    @property
    def num_active_params(self) -> int:
        """Parameters one token touches (top-k routed experts only)."""
        if self.moe is None:
            return self.num_params
        m = self.moe
        idle = m.num_experts - m.experts_per_token
        per_expert = self.mlp_matrices * self.hidden_size * m.expert_intermediate_size
        return self.num_params - self.num_moe_layers * idle * per_expert

    def cost_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` without the fields that change no forward's cost (the runner
        identity's model part)."""
        return {k: v for k, v in self.to_dict().items() if k not in _REQUEST_BOUND_FIELDS}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in _NEW_FIELDS_AT_DEFAULT and value == f.default:
                continue  # see _NEW_FIELDS_AT_DEFAULT
            if f.name == "layer_groups":
                value = [g.to_dict() for g in value]
            elif dataclasses.is_dataclass(value) and not isinstance(value, type):
                value = dataclasses.asdict(value)
            elif isinstance(value, enum.Enum):
                value = value.value
            elif isinstance(value, frozenset):
                value = sorted(value)
            out[f.name] = value
        out["num_params"] = self.num_params
        out["num_active_params"] = self.num_active_params
        out["kv_elements_per_token_per_layer"] = self.kv_elements_per_token_per_layer
        if self.sparse_indexer is not None:
            out["indexer_cache_bytes_per_token_per_layer"] = (
                self.indexer_cache_bytes_per_token_per_layer
            )
        return out
