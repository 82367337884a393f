"""Model architectures read from Hugging Face ``config.json``.

Supported ``model_type`` values: dense GQA/MHA decoders (``llama``, ``mistral``, ``qwen2``,
``qwen3``, ``internlm2``: its fused ``wqkv`` holds the same q, k and v weights as three
projections), parallel-attention decoders (``gptj``, ``falcon``), MoE decoders (``mixtral``,
``qwen3_moe``, ``qwen3_omni_moe_text``: Qwen3-Omni's thinker, ``gpt_oss``, ``minimax_m2``, and
HunYuan's ``hunyuan`` / ``hunyuan_v1_moe``: routed experts beside one shared MLP, the sizes given
per layer), MLA + MoE decoders (``deepseek_v2``,
``deepseek_v3``, ``kimi_k2``), with DeepSeek Sparse Attention's lightning indexer
(``deepseek_v32``, ``glm_moe_dsa``: the ``index_*`` keys, MLA attending to the ``index_topk``
tokens the indexer selects), and hybrid linear-attention decoders (``qwen3_5_text`` dense,
``qwen3_5_moe_text`` MoE: Gated DeltaNet layers between gated full-attention layers, as
``layer_types`` lists them). A
multimodal wrapper (``kimi_k25``, ``qwen3_5_moe``, ...) that
nests its language model under ``text_config`` (Qwen3-Omni: under ``thinker_config``) is read
through it: the serving workloads are text only, so the vision (and audio) towers never run,
and their weights are left out of the memory (Kimi-K2.5's MoonViT: 27 layers of width 1152,
about 0.4 B parameters, 0.04 % of the model; Qwen3-Omni-30B-A3B's audio and vision encoders:
about 1.2 B parameters, 3.8 % of the thinker, which only shrinks the KV pool).

Architecture features the latency model does not represent are refused with
:class:`UnsupportedError` naming the feature, never approximated by a neighbouring one:
``layer_types`` entries other than full or sliding attention (and linear attention outside the
Gated DeltaNet types above, whose ``linear_*`` sizes are read), a sparse-attention indexer on a
model without MLA, and indexers shared across layers (``indexer_types`` /
``index_topk_pattern`` / ``index_topk_freq``: a layer reusing another layer's top-k selection).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from app.core.catalog.architecture import (
    DEFAULT_FFN_MULTIPLIER,
    FP32_BYTES,
    SIXTEEN_BIT_ATTENTION,
    SIXTEEN_BIT_DENSE_MLP,
    SIXTEEN_BIT_SHARED_EXPERTS,
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
from app.core.errors import InvalidParameterError, UnsupportedError

_DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3", "internlm2")
#: Qwen3-MoE decoders: ``qwen3_moe`` and Qwen3-Omni's thinker (the same decoder, M-RoPE).
_QWEN3_MOE_TYPES = ("qwen3_moe", "qwen3_omni_moe_text")
#: HunYuan MoE (Hunyuan-A13B): ``hunyuan`` as its own remote code names it, ``hunyuan_v1_moe``
#: as transformers does.
_HUNYUAN_TYPES = ("hunyuan", "hunyuan_v1_moe")
_MOE_TYPES = ("mixtral", *_QWEN3_MOE_TYPES, "gpt_oss", "minimax_m2", *_HUNYUAN_TYPES)
_MLA_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32", "glm_moe_dsa")
_PARALLEL_TYPES = ("gptj", "falcon")
#: Hybrid decoders whose ``linear_attention`` layers are Gated DeltaNet (``linear_*`` keys):
#: Qwen3.5 with a dense FFN in every layer, and with MoE layers.
_GDN_DENSE_TYPES = ("qwen3_5_text",)
_GDN_MOE_TYPES = ("qwen3_5_moe_text",)
_GDN_TYPES = (*_GDN_DENSE_TYPES, *_GDN_MOE_TYPES)
SUPPORTED_MODEL_TYPES: tuple[str, ...] = (
    *_DENSE_TYPES,
    *_PARALLEL_TYPES,
    *_MOE_TYPES,
    *_MLA_TYPES,
    *_GDN_TYPES,
)
#: Bytes per element of the ``mamba_ssm_dtype`` names a config may give its recurrent state.
_STATE_DTYPE_BYTES = {"float32": FP32_BYTES, "bfloat16": 2, "float16": 2}


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


#: The keys a config names its position limit by (the first present wins): Llama-style
#: ``max_position_embeddings``, GPT-2/GPT-J ``n_positions``.
_POSITION_KEYS = ("max_position_embeddings", "n_positions")
#: Rope scalings whose ``max_position_embeddings`` already is the extended length (Llama 3.1's
#: ``llama3``, Phi-3's ``longrope`` / ``su``) or that extend nothing (``default``, ``mrope``).
_UNSCALED_ROPE = frozenset({"llama3", "longrope", "su", "default", "mrope"})


def context_limit(config: Mapping[str, Any]) -> int | None:
    """The most tokens one request may hold, as vLLM derives its ``max_model_len`` default
    (vllm/config.py, ``_get_and_verify_max_len``): the config's position limit; with a
    ``rope_scaling`` of another type and a ``factor``, that limit times the factor, the limit
    being ``original_max_position_embeddings`` for ``yarn`` (DeepSeek-V3: 4,096 x 40 =
    163,840). None: the config names no limit."""
    limit = next((_int(config, key) for key in _POSITION_KEYS if config.get(key) is not None), None)
    rope = _rope_config(config)
    kind = str(rope.get("rope_type") or rope.get("type") or "default").lower()
    if limit is None or kind in _UNSCALED_ROPE or rope.get("factor") is None:
        return limit
    factor = rope["factor"]
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not factor > 0:
        raise InvalidParameterError("rope_scaling.factor", factor, "a number > 0")
    if kind == "yarn":
        limit = _int(rope, "original_max_position_embeddings", default=limit)
    return max(1, int(limit * factor))


def _bool(config: Mapping[str, Any], key: str, default: bool) -> bool:
    value = config.get(key)
    return default if value is None else bool(value)


def _native_quantization(quant: Mapping[str, Any]) -> str | None:
    method = quant.get("quant_method")
    return str(method) if method else None


def _native_linear(quant: Mapping[str, Any]) -> str | None:
    """The linear action a ``quantization_config`` describes: ``mxfp4`` (gpt-oss), ``fp8``
    (DeepSeek-style block FP8), or compressed-tensors groups of 4-bit integer weights with
    16-bit activations (Kimi-K2.5's ``pack-quantized`` experts: W4A16); None otherwise."""
    method = quant.get("quant_method")
    if method in ("mxfp4", "fp8"):
        return str(method).upper()
    groups = quant.get("config_groups")
    if method != "compressed-tensors" or not isinstance(groups, Mapping) or not groups:
        return None
    for group in groups.values():
        weights = group.get("weights") if isinstance(group, Mapping) else None
        if not isinstance(weights, Mapping) or group.get("input_activations") is not None:
            return None
        if weights.get("num_bits") != 4 or weights.get("type") != "int":
            return None
    return "W4A16"


#: What a checkpoint's 16-bit list (``modules_to_not_convert``, compressed-tensors ``ignore``)
#: names, read from each entry with regex escapes undone: the parts the runner can keep in 16
#: bits, and the modules it keeps in 16 bits anyway (router and its bias, embeddings, LM head;
#: DeepSeek-style configs call the router ``gate``).
_SIXTEEN_BIT_PATTERNS: tuple[tuple[str, str | None], ...] = (
    (r"self_attn", SIXTEEN_BIT_ATTENTION),
    (r"shared_expert", SIXTEEN_BIT_SHARED_EXPERTS),
    (r"mlp\.\(?(gate|up|down|gate_up)(_proj|\|)", SIXTEEN_BIT_DENSE_MLP),
    (r"router|embed_tokens|lm_head|e_score_correction_bias|(^|\.)gate$", None),
)


def _sixteen_bit(quant: Mapping[str, Any]) -> tuple[frozenset[str], tuple[str, ...]]:
    """The :data:`SIXTEEN_BIT_PARTS` a checkpoint keeps in 16 bits, and the entries of its
    list the runner has no part for."""
    entries = quant.get("modules_to_not_convert") or quant.get("ignore") or ()
    parts: set[str] = set()
    unmodelled: list[str] = []
    for entry in entries if isinstance(entries, list) else ():
        name = str(entry).removeprefix("re:").replace("\\.", ".")
        if "experts." in name and "shared_expert" not in name:
            unmodelled.append(str(entry))  # some routed experts: no part for them
            continue
        matched = [part for regex, part in _SIXTEEN_BIT_PATTERNS if re.search(regex, name)]
        if not matched:
            unmodelled.append(str(entry))
        elif matched[0] is not None:  # the first pattern that matches names the part
            parts.add(matched[0])
    return frozenset(parts), tuple(unmodelled)


def _quantization_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    quant = config.get("quantization_config")
    if not isinstance(quant, Mapping):
        return {"native_quantization": None}
    parts, unmodelled = _sixteen_bit(quant)
    return {
        "native_quantization": _native_quantization(quant),
        "native_linear": _native_linear(quant),
        "sixteen_bit_parts": parts,
        "unmodelled_sixteen_bit": unmodelled,
    }


#: ``layer_types`` entries the runner models (anything else is refused); linear attention only
#: for the Gated DeltaNet types.
_ATTENTION_LAYER_TYPES = frozenset({"full_attention", "sliding_attention"})
_LINEAR_LAYER_TYPE = LayerAttention.LINEAR.value
#: Keys of a sparse-attention indexer (DeepSeek-V3.2 / GLM-5 DSA): attention reads only the
#: ``index_topk`` tokens the indexer picks (:class:`SparseIndexerDims`).
_SPARSE_INDEXER_KEYS = ("index_topk", "index_n_heads", "index_head_dim")
#: Keys that let a layer reuse another layer's top-k selection instead of running its own
#: indexer (later GLM-MoE-DSA checkpoints); the runner costs one indexer in every layer.
_SHARED_INDEXER_KEYS = ("indexer_types", "index_topk_pattern", "index_topk_freq")


def _language_model(config: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """The language-model part of ``config`` and the type the user named.

    A multimodal checkpoint (``KimiK25ForConditionalGeneration``, ``Qwen3_5Moe...``) keeps the
    decoder under ``text_config``; a top-level ``quantization_config`` applies to it too.
    """
    outer_type = str(config.get("model_type", "")).lower()
    thinker = config.get("thinker_config")
    if isinstance(thinker, Mapping) and "hidden_size" not in config:
        # Qwen3-Omni: the language model is the thinker's text_config.
        config = {**thinker, **{k: v for k, v in config.items() if k == "quantization_config"}}
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
        known = _ATTENTION_LAYER_TYPES
        if model_type in _GDN_TYPES:
            known = known | {_LINEAR_LAYER_TYPE}
        other = sorted({str(t) for t in layer_types} - known)
        if other:
            count = sum(1 for t in layer_types if str(t) not in known)
            raise UnsupportedError(
                f"model_type {model_type!r} has {count} of {len(layer_types)} layers of type "
                f"{', '.join(repr(t) for t in other)} (layer_types): only full and sliding "
                "attention, and the Gated DeltaNet linear attention of "
                f"{', '.join(_GDN_TYPES)}, are modelled; other layer types are not modelled, "
                "and Chunkwise does not approximate them as full attention"
            )
    found = [key for key in _SPARSE_INDEXER_KEYS if key in config]
    if found and model_type in SUPPORTED_MODEL_TYPES and model_type not in _MLA_TYPES:
        raise UnsupportedError(
            f"model_type {model_type!r} uses a sparse-attention indexer ({', '.join(found)}) "
            "without multi-head latent attention; sparse attention is modelled for MLA models "
            "only, and Chunkwise does not approximate it as dense attention"
        )
    shared = [key for key in _SHARED_INDEXER_KEYS if _shares_indexer(config.get(key))]
    if found and shared:
        raise UnsupportedError(
            f"model_type {model_type!r} shares the sparse-attention indexer across layers "
            f"({', '.join(shared)}): layers reusing another layer's top-k selection are not "
            "modelled, and Chunkwise does not cost them as layers running their own indexer"
        )


def _shares_indexer(value: Any) -> bool:
    """Whether a shared-indexer key makes some layer reuse another's selection."""
    if value is None:
        return False
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value > 1  # index_topk_freq: an own indexer every freq-th layer
    if isinstance(value, str):
        return any(c != "F" for c in value)  # index_topk_pattern: F(ull) / S(hared) per layer
    if isinstance(value, list):
        return any(str(t) not in ("full", "F") for t in value)
    return True


def _windows(config: Mapping[str, Any], num_layers: int, model_type: str) -> list[int | None]:
    """Per-layer sliding window (None = full attention)."""
    window = _int(config, "sliding_window", default=0)
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list) and len(layer_types) == num_layers and window:
        return [window if t == "sliding_attention" else None for t in layer_types]
    if model_type == "mistral" and window:
        return [window] * num_layers
    if (
        model_type in ("qwen2", "qwen3", *_QWEN3_MOE_TYPES)
        and config.get("use_sliding_window")
        and window
    ):
        first = _int(config, "max_window_layers", default=num_layers)
        return [window if i >= first else None for i in range(num_layers)]
    return [None] * num_layers


def _groups(
    ffn: list[FfnKind],
    windows: list[int | None],
    mixers: list[LayerAttention] | None = None,
) -> tuple[LayerGroup, ...]:
    kinds = mixers if mixers is not None else [LayerAttention.FULL] * len(ffn)
    counts = Counter(zip(ffn, windows, kinds, strict=True))
    return tuple(
        LayerGroup(ffn=kind, sliding_window=window, count=count, attention=mixer)
        for (kind, window, mixer), count in counts.items()
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
    head_dim = _int(config, "head_dim", "attention_head_dim", default=h // heads if heads else 0)
    common: dict[str, Any] = {
        "name": label,
        "model_type": model_type,
        "hidden_size": h,
        "num_layers": layers,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "vocab_size": _int(config, "vocab_size"),
        # Qwen3.5 MoE configs name no dense width (no dense layers): it is read where needed.
        "intermediate_size": _int(
            config, "intermediate_size", default=0 if model_type in _GDN_MOE_TYPES else None
        ),
        "tie_word_embeddings": _bool(config, "tie_word_embeddings", True),
        # Partial rotary embeddings (MiniMax-M2 rotates 64 of 128 dims) name their width.
        "rotary_dim": _int(config, "rotary_dim", default=head_dim),
        "attention_bias": _attention_bias(config, model_type),
        "mlp_bias": _bool(config, "mlp_bias", False),
        "qk_norm": model_type in ("qwen3", *_QWEN3_MOE_TYPES)
        or _bool(config, "use_qk_norm", False),
        "max_context_tokens": context_limit(config),
        **_quantization_fields(config),
    }
    windows = _windows(config, layers, model_type)
    if model_type in _DENSE_TYPES:
        return ModelArchitecture(**common, layer_groups=_groups([FfnKind.DENSE] * layers, windows))
    if model_type in _MOE_TYPES:
        return _moe_model(config, common, model_type, layers, windows)
    if model_type in _GDN_TYPES:
        return _gated_deltanet_model(config, common, layers, moe=model_type in _GDN_MOE_TYPES)
    return _mla_model(config, common, layers, windows)


def _attention_bias(config: Mapping[str, Any], model_type: str) -> bool:
    """Bias on the q/k/v projections: Qwen2's default is on; an InternLM2 config names it
    ``bias`` (one flag for its fused ``wqkv`` projection and ``wo``); else ``attention_bias``."""
    if model_type == "internlm2":
        return _bool(config, "bias", False)
    return _bool(config, "attention_bias", model_type == "qwen2")


def _moe_model(
    config: Mapping[str, Any],
    common: dict[str, Any],
    model_type: str,
    layers: int,
    windows: list[int | None],
) -> ModelArchitecture:
    if model_type in _HUNYUAN_TYPES:
        return _hunyuan_model(config, common, layers, windows)
    num_experts = _int(config, "num_local_experts", "num_experts")
    top_k = _int(config, "num_experts_per_tok", "experts_per_token")
    if model_type in _QWEN3_MOE_TYPES:
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


def _per_layer_int(config: Mapping[str, Any], key: str, layers: int) -> int:
    """A HunYuan size given once or per layer (``moe_topk``: [8] x 32); per-layer lists must
    hold one value, as the runner costs every MoE layer alike."""
    value = config.get(key)
    if not isinstance(value, list):
        return _int(config, key)
    if len(value) != layers:
        raise InvalidParameterError(key, len(value), f"one entry per layer ({layers})")
    values = {_int({key: v}, key) for v in value}
    if len(values) != 1:
        raise UnsupportedError(
            f"{key} differs between layers ({sorted(values)}): layers of different MoE sizes "
            "are not modelled, and Chunkwise does not average them"
        )
    return values.pop()


def _hunyuan_model(
    config: Mapping[str, Any], common: dict[str, Any], layers: int, windows: list[int | None]
) -> ModelArchitecture:
    """HunYuan MoE (Hunyuan-A13B): every layer routes to ``moe_topk`` of ``num_experts``
    experts of ``moe_intermediate_size`` and, with ``use_mixed_mlp_moe``, also runs a shared
    SwiGLU MLP of ``num_shared_expert x intermediate_size`` (the remote code's
    ``HunYuanMLP(..., is_shared_mlp=True)``). Cross-layer KV sharing (``use_cla``, Hunyuan-Large)
    and leading dense layers (``moe_layer_num_skipped``) are refused, not approximated."""
    if _bool(config, "use_cla", False):
        raise UnsupportedError(
            "HunYuan's cross-layer attention (use_cla: layers sharing another layer's KV "
            "cache) is not modelled, and Chunkwise does not cost it as one KV cache per layer"
        )
    if _int(config, "moe_layer_num_skipped", default=0):
        raise UnsupportedError(
            "HunYuan's dense leading layers (moe_layer_num_skipped) are not modelled"
        )
    num_experts = _int(config, "num_experts")
    if num_experts < 2:
        raise UnsupportedError(
            "a HunYuan config with one expert (num_experts 1) is the dense HunYuan decoder, "
            "which the catalog does not read"
        )
    shared = _per_layer_int(config, "num_shared_expert", layers)
    shared_size = (
        shared * common["intermediate_size"] if _bool(config, "use_mixed_mlp_moe", False) else 0
    )
    moe = MoeDims(
        num_experts=num_experts,
        experts_per_token=_per_layer_int(config, "moe_topk", layers),
        expert_intermediate_size=_per_layer_int(config, "moe_intermediate_size", layers),
        num_shared_experts=shared if shared_size else 0,
        shared_intermediate_size=shared_size,
    )
    return ModelArchitecture(
        **common, moe=moe, layer_groups=_groups([FfnKind.MOE] * layers, windows)
    )


def _mixers(config: Mapping[str, Any], layers: int) -> list[LayerAttention]:
    """Per-layer token mixer of a Gated DeltaNet hybrid: ``layer_types``, or (as HF's Qwen3.5
    config derives it when absent) full attention every ``full_attention_interval``-th layer."""
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list):
        if len(layer_types) != layers:
            raise InvalidParameterError(
                "layer_types", len(layer_types), f"one entry per layer ({layers})"
            )
        return [
            LayerAttention.LINEAR if t == _LINEAR_LAYER_TYPE else LayerAttention.FULL
            for t in layer_types
        ]
    interval = _int(config, "full_attention_interval")
    if interval < 1:
        raise InvalidParameterError("full_attention_interval", interval, "an integer >= 1")
    return [
        LayerAttention.FULL if (i + 1) % interval == 0 else LayerAttention.LINEAR
        for i in range(layers)
    ]


def _linear_attention_dims(config: Mapping[str, Any]) -> LinearAttentionDims:
    dtype = str(config.get("mamba_ssm_dtype") or "float32").lower()
    if dtype not in _STATE_DTYPE_BYTES:
        raise InvalidParameterError("mamba_ssm_dtype", dtype, ", ".join(_STATE_DTYPE_BYTES))
    return LinearAttentionDims(
        num_key_heads=_int(config, "linear_num_key_heads"),
        num_value_heads=_int(config, "linear_num_value_heads"),
        key_head_dim=_int(config, "linear_key_head_dim"),
        value_head_dim=_int(config, "linear_value_head_dim"),
        conv_kernel_size=_int(config, "linear_conv_kernel_dim"),
        state_bytes_per_element=_STATE_DTYPE_BYTES[dtype],
    )


def _rope_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    rope = config.get("rope_parameters") or config.get("rope_scaling")
    return rope if isinstance(rope, Mapping) else {}


def _gated_deltanet_model(
    config: Mapping[str, Any], common: dict[str, Any], layers: int, *, moe: bool
) -> ModelArchitecture:
    """Qwen3.5: Gated DeltaNet and gated full-attention layers, one MTP layer (full attention
    and the model's FFN). ``qwen3_5_text`` has a dense SwiGLU FFN of ``intermediate_size`` in
    every layer; ``qwen3_5_moe_text`` makes every layer MoE with one shared expert
    (``mlp_only_layers`` dense).

    The shared expert's sigmoid gate (hidden_size weights per layer, 0.25 M parameters over
    the 60 layers of Qwen3.5-397B-A17B) is left out of the counts and the cost.
    """
    moe_dims = None
    ffn = [FfnKind.DENSE] * layers
    dense_size = common["intermediate_size"]
    if moe:
        expert_size = _int(config, "moe_intermediate_size")
        shared_size = _int(config, "shared_expert_intermediate_size", default=0)
        dense_only = set(config.get("mlp_only_layers") or [])
        step = max(_int(config, "decoder_sparse_step", default=1), 1)
        ffn = [
            FfnKind.MOE if (i not in dense_only and (i + 1) % step == 0) else FfnKind.DENSE
            for i in range(layers)
        ]
        if FfnKind.DENSE in ffn:
            dense_size = _int(config, "intermediate_size")
        else:
            # No dense layer: the dense width only sizes activations; the expert width stands in.
            dense_size = dense_size or expert_size
        moe_dims = MoeDims(
            num_experts=_int(config, "num_experts"),
            experts_per_token=_int(config, "num_experts_per_tok"),
            expert_intermediate_size=expert_size,
            num_shared_experts=1 if shared_size else 0,
            shared_intermediate_size=shared_size,
        )
    head_dim = common["head_dim"]
    factor = _rope_config(config).get("partial_rotary_factor", config.get("partial_rotary_factor"))
    rotary_dim = common["rotary_dim"]
    if isinstance(factor, int | float) and not isinstance(factor, bool) and 0 < factor <= 1:
        rotary_dim = int(head_dim * factor)
    common = {
        **common,
        "intermediate_size": dense_size,
        "rotary_dim": rotary_dim,
        "qk_norm": True,  # q_norm / k_norm per head in the full-attention layers
    }
    return ModelArchitecture(
        **common,
        moe=moe_dims,
        layer_groups=_groups(ffn, [None] * layers, _mixers(config, layers)),
        num_mtp_layers=_int(config, "mtp_num_hidden_layers", default=0),
        attn_output_gate=_bool(config, "attn_output_gate", False),
        linear_attention=_linear_attention_dims(config),
    )


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
    indexer = None
    if any(key in config for key in _SPARSE_INDEXER_KEYS):
        indexer = SparseIndexerDims(
            topk=_int(config, "index_topk"),
            n_heads=_int(config, "index_n_heads"),
            head_dim=_int(config, "index_head_dim"),
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
        sparse_indexer=indexer,
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
            max_context_tokens=context_limit(config),
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
        max_context_tokens=context_limit(config),
    )
