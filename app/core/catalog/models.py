"""The built-in model catalog: Hugging Face ids -> architectures.

The catalog ships the configs under ``model_configs/`` (see its SOURCES.md) and answers to their
Hugging Face ids case-insensitively; ``-Instruct``/``-FP8``/``-Base``/... variants resolve to
the base architecture. A local directory or ``config.json`` path is read too (the CLI's use).
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

from app.core.catalog.architecture import ModelArchitecture
from app.core.catalog.hf_config import model_from_config
from app.core.errors import InvalidParameterError, UnknownModelError

CONFIG_DIR = Path(__file__).resolve().parent / "model_configs"
CONFIG_FILE_NAME = "config.json"


BUILTIN_MODEL_FILES: dict[str, str] = {
    "Qwen/Qwen3-0.6B": "qwen3_dense_0_6b.json",
    "Qwen/Qwen3-8B": "qwen3_dense_8b.json",
    "Qwen/Qwen3-14B": "qwen3_dense_14b.json",
    "Qwen/Qwen3-32B": "qwen3_dense_32b.json",
    "Qwen/Qwen3-30B-A3B": "qwen3_moe_30b_a3b.json",
    "Qwen/Qwen3-235B-A22B": "qwen3_moe_235b_a22b.json",
    "Qwen/Qwen3.5-397B-A17B": "qwen3.5-397b-a17b.json",
    "Qwen/Qwen2.5-7B-Instruct": "qwen2.5-7b-instruct.json",
    "Qwen/Qwen2.5-14B-Instruct": "qwen2.5-14b-instruct.json",
    "Qwen/Qwen2.5-32B": "qwen2.5-32b.json",
    "Qwen/Qwen2.5-72B-Instruct": "qwen2.5-72b-instruct.json",
    "Qwen/Qwen3.5-4B": "qwen3.5-4b.json",
    "Qwen/Qwen3-Omni-30B-A3B-Thinking": "qwen3-omni-30b-a3b-thinking.json",
    "tencent/Hunyuan-A13B-Instruct": "hunyuan-a13b-instruct.json",
    "internlm/internlm2-20b": "internlm2-20b.json",
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
    "zai-org/GLM-5": "glm-5.json",
}

#: Models whose configs ship so that their names resolve and are refused with the feature that
#: is not modelled (see :func:`_refuse_unmodelled_features`), instead of "unknown model".
UNSUPPORTED_MODEL_FILES: dict[str, str] = {
    "zai-org/GLM-5": "glm-5.json",
    "Qwen/Qwen3.5-397B-A17B": "qwen3.5-397b-a17b.json",
}

#: Other names of a built-in architecture (model_configs/SOURCES.md, "Aliases", says why each
#: has the same architecture): Meta's repositories before the rename to ``Llama-3.1-*``,
#: post-trained or chat checkpoints of a shipped base, and later checkpoints of a shipped
#: architecture.
MODEL_ALIASES: dict[str, str] = {
    "meta-llama/Meta-Llama-3.1-8B": "meta-llama/Llama-3.1-8B",
    "meta-llama/Meta-Llama-3.1-70B": "meta-llama/Llama-3.1-70B",
    "meta-llama/Meta-Llama-3.1-405B": "meta-llama/Llama-3.1-405B",
    "Qwen/QwQ-32B": "Qwen/Qwen2.5-32B",
    "internlm/internlm2-chat-20b": "internlm/internlm2-20b",
    "deepseek-ai/DeepSeek-V3.1": "deepseek-ai/DeepSeek-V3",
    "moonshotai/Kimi-K2.6": "moonshotai/Kimi-K2.5",
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
    for other, hf_id in MODEL_ALIASES.items():
        for alias in (other, other.split("/", 1)[1]):
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
