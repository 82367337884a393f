"""Model architectures read from Hugging Face ``config.json``.

Supported ``model_type`` values: dense GQA/MHA decoders (``llama``, ``mistral``, ``qwen2``,
``qwen3``), parallel-attention decoders (``gptj``, ``falcon``), MoE decoders (``mixtral``,
``qwen3_moe``, ``gpt_oss``, ``minimax_m2``) and MLA + MoE decoders (``deepseek_v2``,
``deepseek_v3``, ``kimi_k2``). A multimodal wrapper (``kimi_k25``, ``qwen3_5_moe``, ...) that
nests its language model under ``text_config`` is read through it: the serving workloads are
text only, so the vision tower never runs, and its weights (Kimi-K2.5's MoonViT: 27 layers of
width 1152, about 0.4 B parameters, 0.04 % of the model) are left out of the memory.

Architecture features the latency model does not represent are refused with
:class:`UnsupportedError` naming the feature, never approximated by a neighbouring one:
linear-attention layers (``layer_types`` entries other than full or sliding attention, e.g.
Qwen3.5's Gated DeltaNet, whose state does not grow with context) and sparse-attention indexers
(GLM-5's and DeepSeek-V3.2's DSA ``index_*`` keys, which attend to ``index_topk`` tokens).

Everything the latency model needs is flattened into one frozen :class:`ModelArchitecture`;
per-layer differences (dense vs MoE FFN, sliding vs full attention) become
:class:`LayerGroup` counts so the runner computes each distinct layer once.

The built-in catalog ships the configs under ``model_configs/`` and answers to their Hugging
Face ids case-insensitively; ``-Instruct``/``-FP8``/``-Base``/... variants resolve to the base
architecture.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from app.core.errors import InvalidParameterError, UnknownModelError, UnsupportedError

CONFIG_DIR = Path(__file__).resolve().parent / "model_configs"
CONFIG_FILE_NAME = "config.json"

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


class AttentionKind(enum.StrEnum):
    GQA = "gqa"  # MHA / GQA / MQA: K and V heads cached per token
    MLA = "mla"  # multi-head latent attention: one compressed latent + RoPE key cached


class FfnKind(enum.StrEnum):
    DENSE = "dense"
    MOE = "moe"


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
    """``count`` decoder layers that share FFN kind and attention window."""

    ffn: FfnKind
    sliding_window: int | None
    count: int


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
    moe: MoeDims | None = None
    layer_groups: tuple[LayerGroup, ...] = ()
    num_mtp_layers: int = 0
    native_quantization: str | None = None

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
        if self.num_heads % self.num_kv_heads:
            raise InvalidParameterError(
                "num_key_value_heads", self.num_kv_heads, f"a divisor of {self.num_heads}"
            )
        if (self.attention is AttentionKind.MLA) != (self.mla is not None):
            raise InvalidParameterError("mla", self.mla, "given exactly for MLA attention")
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
    def kv_elements_per_token_per_layer(self) -> int:
        if self.mla is not None:
            return self.mla.cache_elements_per_token
        return KV_TENSORS * self.num_kv_heads * self.head_dim

    def kv_bytes_per_token(self, bytes_per_element: float) -> float:
        """KV-cache bytes of one token over all decoder layers, unsharded (MTP layers apart)."""
        return self.num_layers * self.kv_elements_per_token_per_layer * bytes_per_element

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
            return q + kv_a + kv_b + o
        q_out = self.num_heads * self.head_dim
        kv_out = KV_TENSORS * self.num_kv_heads * self.head_dim
        params = h * (q_out + kv_out) + q_out * h
        if self.attention_bias:
            params += q_out + kv_out
        if self.qk_norm:
            params += QK_NORMS * self.head_dim
        return params

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
        layers = self.num_layers * (self.attention_params_per_layer + self.norm_params_per_layer)
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

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "layer_groups":
                value = [
                    {"ffn": g.ffn.value, "sliding_window": g.sliding_window, "count": g.count}
                    for g in value
                ]
            elif dataclasses.is_dataclass(value) and not isinstance(value, type):
                value = dataclasses.asdict(value)
            elif isinstance(value, enum.Enum):
                value = value.value
            out[f.name] = value
        out["num_params"] = self.num_params
        out["num_active_params"] = self.num_active_params
        out["kv_elements_per_token_per_layer"] = self.kv_elements_per_token_per_layer
        return out


# ---------------------------------------------------------------------------------------------
# Parsing Hugging Face configs
# ---------------------------------------------------------------------------------------------
_DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3")
_MOE_TYPES = ("mixtral", "qwen3_moe", "gpt_oss", "minimax_m2")
_MLA_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2")
_PARALLEL_TYPES = ("gptj", "falcon")
SUPPORTED_MODEL_TYPES: tuple[str, ...] = (*_DENSE_TYPES, *_PARALLEL_TYPES, *_MOE_TYPES, *_MLA_TYPES)


def _int(config: Mapping[str, Any], *keys: str, default: int | None = None) -> int:
    for key in keys:
        value = config.get(key)
        if value is not None:
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
                or value != int(value)
            ):
                raise InvalidParameterError(key, value, "a non-negative integer")
            return int(value)
    if default is None:
        raise InvalidParameterError(keys[0], None, "present in config.json")
    return default


def _bool(config: Mapping[str, Any], key: str, default: bool) -> bool:
    value = config.get(key)
    return default if value is None else bool(value)


def _native_quantization(config: Mapping[str, Any]) -> str | None:
    quant = config.get("quantization_config")
    if isinstance(quant, Mapping):
        method = quant.get("quant_method")
        return str(method) if method else None
    return None


#: ``layer_types`` entries the runner models (anything else is refused).
_ATTENTION_LAYER_TYPES = frozenset({"full_attention", "sliding_attention"})
#: Keys of a sparse-attention indexer (DeepSeek-V3.2 / GLM-5 DSA): attention reads only the
#: ``index_topk`` tokens the indexer picks, which the dense attention model would overstate.
_SPARSE_INDEXER_KEYS = ("index_topk", "index_n_heads", "index_head_dim")


def _language_model(config: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """The language-model part of ``config`` and the type the user named.

    A multimodal checkpoint (``KimiK25ForConditionalGeneration``, ``Qwen3_5Moe...``) keeps the
    decoder under ``text_config``; a top-level ``quantization_config`` applies to it too.
    """
    outer_type = str(config.get("model_type", "")).lower()
    text = config.get("text_config")
    if not isinstance(text, Mapping) or "hidden_size" in config:
        return config, outer_type
    inner: dict[str, Any] = dict(text)
    if "quantization_config" not in inner and "quantization_config" in config:
        inner["quantization_config"] = config["quantization_config"]
    if "tie_word_embeddings" in config and "tie_word_embeddings" not in inner:
        inner["tie_word_embeddings"] = config["tie_word_embeddings"]
    return inner, outer_type


def _refuse_unmodelled_features(config: Mapping[str, Any], model_type: str) -> None:
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list):
        other = sorted({str(t) for t in layer_types} - _ATTENTION_LAYER_TYPES)
        if other:
            count = sum(1 for t in layer_types if str(t) not in _ATTENTION_LAYER_TYPES)
            raise UnsupportedError(
                f"model_type {model_type!r} has {count} of {len(layer_types)} layers of type "
                f"{', '.join(repr(t) for t in other)} (layer_types): linear-attention layers "
                "(e.g. Gated DeltaNet, whose state does not grow with context) are not modelled, "
                "and Chunkwise does not approximate them as full attention"
            )
    found = [key for key in _SPARSE_INDEXER_KEYS if key in config]
    if found:
        raise UnsupportedError(
            f"model_type {model_type!r} uses a sparse-attention indexer ({', '.join(found)}: "
            f"attention reads index_topk={config.get('index_topk')!r} selected tokens); sparse "
            "attention is not modelled, and Chunkwise does not approximate it as dense attention"
        )


def _windows(config: Mapping[str, Any], num_layers: int, model_type: str) -> list[int | None]:
    """Per-layer sliding window (None = full attention)."""
    window = _int(config, "sliding_window", default=0)
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list) and len(layer_types) == num_layers and window:
        return [window if t == "sliding_attention" else None for t in layer_types]
    if model_type == "mistral" and window:
        return [window] * num_layers
    if (
        model_type in ("qwen2", "qwen3", "qwen3_moe")
        and config.get("use_sliding_window")
        and window
    ):
        first = _int(config, "max_window_layers", default=num_layers)
        return [window if i >= first else None for i in range(num_layers)]
    return [None] * num_layers


def _groups(ffn: list[FfnKind], windows: list[int | None]) -> tuple[LayerGroup, ...]:
    counts = Counter(zip(ffn, windows, strict=True))
    return tuple(
        LayerGroup(ffn=kind, sliding_window=window, count=count)
        for (kind, window), count in counts.items()
    )


def model_from_config(config: Mapping[str, Any], name: str | None = None) -> ModelArchitecture:
    """Build an architecture from a Hugging Face ``config.json`` mapping.

    Raises :class:`UnsupportedError` (listing the supported types) for other ``model_type``
    values and :class:`InvalidParameterError` for missing or malformed fields.
    """
    if not isinstance(config, Mapping):
        raise InvalidParameterError("config", config, "a JSON object (config.json)")
    config, outer_type = _language_model(config)
    model_type = str(config.get("model_type", "")).lower()
    _refuse_unmodelled_features(config, model_type or outer_type)
    if model_type not in SUPPORTED_MODEL_TYPES:
        wrapped = f" (the language model of {outer_type!r})" if outer_type != model_type else ""
        raise UnsupportedError(
            f"model_type {model_type!r}{wrapped} is not supported; supported: "
            + ", ".join(SUPPORTED_MODEL_TYPES)
        )
    label = name or str(config.get("_name_or_path") or model_type)
    if model_type in _PARALLEL_TYPES:
        return _parallel_model(config, label, model_type)

    h = _int(config, "hidden_size")
    layers = _int(config, "num_hidden_layers")
    heads = _int(config, "num_attention_heads")
    kv_heads = _int(config, "num_key_value_heads", default=heads)
    head_dim = _int(config, "head_dim", default=h // heads if heads else 0)
    common: dict[str, Any] = {
        "name": label,
        "model_type": model_type,
        "hidden_size": h,
        "num_layers": layers,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "vocab_size": _int(config, "vocab_size"),
        "intermediate_size": _int(config, "intermediate_size"),
        "tie_word_embeddings": _bool(config, "tie_word_embeddings", True),
        # Partial rotary embeddings (MiniMax-M2 rotates 64 of 128 dims) name their width.
        "rotary_dim": _int(config, "rotary_dim", default=head_dim),
        "attention_bias": _bool(config, "attention_bias", model_type == "qwen2"),
        "mlp_bias": _bool(config, "mlp_bias", False),
        "qk_norm": model_type in ("qwen3", "qwen3_moe") or _bool(config, "use_qk_norm", False),
        "native_quantization": _native_quantization(config),
    }
    windows = _windows(config, layers, model_type)
    if model_type in _DENSE_TYPES:
        return ModelArchitecture(**common, layer_groups=_groups([FfnKind.DENSE] * layers, windows))
    if model_type in _MOE_TYPES:
        return _moe_model(config, common, model_type, layers, windows)
    return _mla_model(config, common, layers, windows)


def _moe_model(
    config: Mapping[str, Any],
    common: dict[str, Any],
    model_type: str,
    layers: int,
    windows: list[int | None],
) -> ModelArchitecture:
    num_experts = _int(config, "num_local_experts", "num_experts")
    top_k = _int(config, "num_experts_per_tok", "experts_per_token")
    if model_type == "qwen3_moe":
        expert_size = _int(config, "moe_intermediate_size")
        step = max(_int(config, "decoder_sparse_step", default=1), 1)
        dense_only = set(config.get("mlp_only_layers") or [])
        ffn = [
            FfnKind.MOE if (i not in dense_only and (i + 1) % step == 0) else FfnKind.DENSE
            for i in range(layers)
        ]
    else:
        # Mixtral, gpt-oss and MiniMax-M2 name the expert width intermediate_size. MiniMax-M2's
        # MTP modules (use_mtp) are left out: serving engines load them only for speculative
        # decoding, which the runner models with the main model's layers.
        expert_size = common["intermediate_size"]
        ffn = [FfnKind.MOE] * layers
    moe = MoeDims(
        num_experts=num_experts, experts_per_token=top_k, expert_intermediate_size=expert_size
    )
    return ModelArchitecture(**common, moe=moe, layer_groups=_groups(ffn, windows))


def _mla_model(
    config: Mapping[str, Any], common: dict[str, Any], layers: int, windows: list[int | None]
) -> ModelArchitecture:
    mla = MlaDims(
        q_lora_rank=_int(config, "q_lora_rank", default=0),
        kv_lora_rank=_int(config, "kv_lora_rank"),
        qk_nope_head_dim=_int(config, "qk_nope_head_dim"),
        qk_rope_head_dim=_int(config, "qk_rope_head_dim"),
        v_head_dim=_int(config, "v_head_dim"),
    )
    expert_size = _int(config, "moe_intermediate_size")
    shared = _int(config, "n_shared_experts", default=0)
    moe = MoeDims(
        num_experts=_int(config, "n_routed_experts"),
        experts_per_token=_int(config, "num_experts_per_tok"),
        expert_intermediate_size=expert_size,
        num_shared_experts=shared,
        shared_intermediate_size=shared * expert_size,
    )
    first_dense = _int(config, "first_k_dense_replace", default=0)
    freq = max(_int(config, "moe_layer_freq", default=1), 1)
    ffn = [
        FfnKind.MOE if (i >= first_dense and i % freq == 0) else FfnKind.DENSE
        for i in range(layers)
    ]
    common = {
        **common,
        "head_dim": mla.v_head_dim,
        "rotary_dim": mla.qk_rope_head_dim,
        "qk_norm": False,
    }
    return ModelArchitecture(
        **common,
        attention=AttentionKind.MLA,
        mla=mla,
        moe=moe,
        layer_groups=_groups(ffn, windows),
        num_mtp_layers=_int(config, "num_nextn_predict_layers", default=0),
    )


def _parallel_model(config: Mapping[str, Any], label: str, model_type: str) -> ModelArchitecture:
    """GPT-J and Falcon: attention and a plain GELU MLP in parallel off one residual stream."""
    if model_type == "gptj":
        h = _int(config, "n_embd")
        heads = _int(config, "n_head")
        return ModelArchitecture(
            name=label,
            model_type=model_type,
            hidden_size=h,
            num_layers=_int(config, "n_layer"),
            num_heads=heads,
            num_kv_heads=heads,
            head_dim=h // heads,
            vocab_size=_int(config, "vocab_size"),
            intermediate_size=_int(config, "n_inner", default=DEFAULT_FFN_MULTIPLIER * h),
            mlp_gated=False,
            parallel_attention=True,
            mlp_bias=True,
            tie_word_embeddings=_bool(config, "tie_word_embeddings", False),
            rotary_dim=_int(config, "rotary_dim", default=h // heads),
        )
    h = _int(config, "hidden_size")
    heads = _int(config, "num_attention_heads")
    if _bool(config, "new_decoder_architecture", False):
        kv_heads = _int(config, "num_kv_heads", default=heads)
    elif _bool(config, "multi_query", True):
        kv_heads = 1
    else:
        kv_heads = heads
    return ModelArchitecture(
        name=label,
        model_type=model_type,
        hidden_size=h,
        num_layers=_int(config, "num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=h // heads,
        vocab_size=_int(config, "vocab_size"),
        intermediate_size=_int(config, "ffn_hidden_size", default=DEFAULT_FFN_MULTIPLIER * h),
        mlp_gated=False,
        parallel_attention=_bool(config, "parallel_attn", True),
        attention_bias=_bool(config, "bias", False),
        mlp_bias=_bool(config, "bias", False),
        tie_word_embeddings=_bool(config, "tie_word_embeddings", True),
        rotary_dim=h // heads,
    )


# ---------------------------------------------------------------------------------------------
# Built-in catalog
# ---------------------------------------------------------------------------------------------
BUILTIN_MODEL_FILES: dict[str, str] = {
    "Qwen/Qwen3-0.6B": "qwen3_dense_0_6b.json",
    "Qwen/Qwen3-8B": "qwen3_dense_8b.json",
    "Qwen/Qwen3-14B": "qwen3_dense_14b.json",
    "Qwen/Qwen3-32B": "qwen3_dense_32b.json",
    "Qwen/Qwen3-30B-A3B": "qwen3_moe_30b_a3b.json",
    "Qwen/Qwen3-235B-A22B": "qwen3_moe_235b_a22b.json",
    "Qwen/Qwen2.5-7B-Instruct": "qwen2.5-7b-instruct.json",
    "Qwen/Qwen2.5-72B-Instruct": "qwen2.5-72b-instruct.json",
    "meta-llama/Llama-3.1-8B": "llama3.1-8b.json",
    "meta-llama/Llama-3.1-70B": "llama3.1-70b.json",
    "meta-llama/Llama-3.1-405B": "llama3.1-405b.json",
    "meta-llama/Llama-3.3-70B-Instruct": "llama3.3-70b-instruct.json",
    "meta-llama/Llama-2-7b-hf": "llama-2-7b-hf.json",
    "meta-llama/Llama-2-70b-hf": "llama-2-70b-hf.json",
    "mistralai/Mistral-7B-v0.1": "mistral-7b-v0.1.json",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b.json",
    "EleutherAI/gpt-j-6b": "gpt-j-6b.json",
    "tiiuae/falcon-180B": "falcon-180b.json",
    "deepseek-ai/DeepSeek-V3": "deepseek_v3.json",
    "deepseek-ai/DeepSeek-R1": "deepseek-r1.json",
    "openai/gpt-oss-20b": "gpt-oss-20b.json",
    "openai/gpt-oss-120b": "gpt-oss-120b.json",
    "moonshotai/Kimi-K2-Instruct": "kimi-k2-instruct.json",
    "moonshotai/Kimi-K2.5": "kimi-k2.5.json",
    "MiniMaxAI/MiniMax-M2.5": "minimax-m2.5.json",
}

#: Models whose configs ship so that their names resolve and are refused with the feature that
#: is not modelled (see :func:`_refuse_unmodelled_features`), instead of "unknown model".
UNSUPPORTED_MODEL_FILES: dict[str, str] = {
    "Qwen/Qwen3.5-397B-A17B": "qwen3.5-397b-a17b.json",
    "zai-org/GLM-5": "glm-5.json",
}

# Trailing parts a checkpoint name may carry on top of its base architecture.
_VARIANT_SUFFIX = re.compile(
    r"[-_](instruct|chat|base|hf|fp8|bf16|fp16|fp4|nvfp4|mxfp4|int8|int4|w8a8|w4a16|w4a8|"
    r"awq|gptq|dynamic|thinking|\d{4})$"
)


def _key(name: str) -> str:
    return name.strip().lower()


def _aliases() -> dict[str, str]:
    table: dict[str, str] = {}
    for hf_id, file_name in {**BUILTIN_MODEL_FILES, **UNSUPPORTED_MODEL_FILES}.items():
        for alias in (hf_id, hf_id.split("/", 1)[1], file_name.removesuffix(".json")):
            table.setdefault(_key(alias), hf_id)
    return table


_ALIASES = _aliases()


def model_names() -> list[str]:
    """Hugging Face ids of the built-in models."""
    return list(BUILTIN_MODEL_FILES)


def resolve_model_name(name: str) -> str | None:
    """The built-in id ``name`` refers to (case-insensitive, variant suffixes stripped)."""
    key = _key(name)
    while key:
        if key in _ALIASES:
            return _ALIASES[key]
        stripped = _VARIANT_SUFFIX.sub("", key)
        if stripped == key:
            break
        key = stripped
    # "org/name-Instruct" whose org differs (mirrors): try the part after the slash.
    if "/" in name:
        return resolve_model_name(name.rsplit("/", 1)[1])
    return None


@cache
def _load_builtin(hf_id: str) -> ModelArchitecture:
    file_name = BUILTIN_MODEL_FILES.get(hf_id) or UNSUPPORTED_MODEL_FILES[hf_id]
    config = json.loads((CONFIG_DIR / file_name).read_text(encoding="utf-8"))
    return model_from_config(config, name=hf_id)


def get_model(name: str) -> ModelArchitecture:
    """A model by Hugging Face id (built-in catalog) or a local directory / config.json path.

    Raises :class:`UnknownModelError` with the valid ids when nothing matches.
    """
    text = str(name).strip()
    hf_id = resolve_model_name(text)
    if hf_id is not None:
        return _load_builtin(hf_id)
    try:
        path = Path(text).expanduser()
    except RuntimeError:  # "~user/..." with no such user: not a path we can read
        raise UnknownModelError(text, model_names()) from None
    if text and (path.is_dir() or path.suffix == ".json") and path.exists():
        return model_from_path(path)
    raise UnknownModelError(text, model_names())


def model_from_path(path: str | Path) -> ModelArchitecture:
    """Read a ``config.json`` (or a directory holding one)."""
    file = Path(path)
    if file.is_dir():
        file = file / CONFIG_FILE_NAME
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidParameterError("model", str(path), "a directory holding config.json") from None
    except json.JSONDecodeError as exc:
        raise InvalidParameterError("model", str(file), f"valid JSON ({exc})") from None
    return model_from_config(config, name=str(path))


def list_models() -> list[ModelArchitecture]:
    """Every built-in architecture, in catalog order."""
    return [_load_builtin(hf_id) for hf_id in BUILTIN_MODEL_FILES]
