"""Quantization of linear layers and of the attention / KV cache.

Names follow msmodeling's ``--quantize-linear-action`` and ``--quantize-attention-action``
values, plus ``W4A16`` and ``NVFP4``. A linear action fixes the stored weight dtype and the
dtype the matrix units compute in; an attention action fixes the KV-cache dtype (and, for FP8,
the attention compute dtype).

Only what changes latency or memory is modelled: bytes per weight element (scales included
as an average overhead) and the compute dtype whose peak the device offers.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypeVar

from app.core.errors import InvalidParameterError


class DType(enum.StrEnum):
    """Numeric formats the latency model distinguishes."""

    BF16 = "bf16"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"
    FP4 = "fp4"


# Storage cost per element, including the average cost of per-block scales.
_MXFP4_BLOCK = 32  # one 8-bit shared exponent per 32 elements
_NVFP4_BLOCK = 16  # one fp8 scale per 16 elements
_INT4_GROUP = 128  # one 16-bit scale per 128 elements (GPTQ/AWQ-style groups)
BYTES_16BIT = 2.0
BYTES_8BIT = 1.0
BYTES_FP4_MX = 0.5 + 1.0 / _MXFP4_BLOCK
BYTES_FP4_NV = 0.5 + 1.0 / _NVFP4_BLOCK
BYTES_INT4 = 0.5 + BYTES_16BIT / _INT4_GROUP


class LinearQuantAction(enum.StrEnum):
    """Linear-layer quantization (msmodeling ``--quantize-linear-action`` names)."""

    DISABLED = "DISABLED"
    W8A16_STATIC = "W8A16_STATIC"
    W8A16_DYNAMIC = "W8A16_DYNAMIC"
    W8A8_STATIC = "W8A8_STATIC"
    W8A8_DYNAMIC = "W8A8_DYNAMIC"
    W4A8_STATIC = "W4A8_STATIC"
    W4A8_DYNAMIC = "W4A8_DYNAMIC"
    W4A16 = "W4A16"
    FP8 = "FP8"
    MXFP4 = "MXFP4"
    NVFP4 = "NVFP4"


class AttentionQuantAction(enum.StrEnum):
    """KV-cache / attention quantization (``--quantize-attention-action`` names)."""

    DISABLED = "DISABLED"
    INT8 = "INT8"
    FP8 = "FP8"


@dataclass(frozen=True, slots=True, kw_only=True)
class LinearFormat:
    """How one linear action stores weights and which dtype its GEMMs compute in."""

    weight_dtype: DType
    weight_bytes_per_param: float
    compute_dtype: DType


LINEAR_FORMATS: dict[LinearQuantAction, LinearFormat] = {
    LinearQuantAction.DISABLED: LinearFormat(
        weight_dtype=DType.BF16, weight_bytes_per_param=BYTES_16BIT, compute_dtype=DType.BF16
    ),
    LinearQuantAction.W8A16_STATIC: LinearFormat(
        weight_dtype=DType.INT8, weight_bytes_per_param=BYTES_8BIT, compute_dtype=DType.BF16
    ),
    LinearQuantAction.W8A16_DYNAMIC: LinearFormat(
        weight_dtype=DType.INT8, weight_bytes_per_param=BYTES_8BIT, compute_dtype=DType.BF16
    ),
    LinearQuantAction.W8A8_STATIC: LinearFormat(
        weight_dtype=DType.INT8, weight_bytes_per_param=BYTES_8BIT, compute_dtype=DType.INT8
    ),
    LinearQuantAction.W8A8_DYNAMIC: LinearFormat(
        weight_dtype=DType.INT8, weight_bytes_per_param=BYTES_8BIT, compute_dtype=DType.INT8
    ),
    LinearQuantAction.W4A8_STATIC: LinearFormat(
        weight_dtype=DType.INT4, weight_bytes_per_param=BYTES_INT4, compute_dtype=DType.INT8
    ),
    LinearQuantAction.W4A8_DYNAMIC: LinearFormat(
        weight_dtype=DType.INT4, weight_bytes_per_param=BYTES_INT4, compute_dtype=DType.INT8
    ),
    LinearQuantAction.W4A16: LinearFormat(
        weight_dtype=DType.INT4, weight_bytes_per_param=BYTES_INT4, compute_dtype=DType.BF16
    ),
    LinearQuantAction.FP8: LinearFormat(
        weight_dtype=DType.FP8, weight_bytes_per_param=BYTES_8BIT, compute_dtype=DType.FP8
    ),
    LinearQuantAction.MXFP4: LinearFormat(
        weight_dtype=DType.FP4, weight_bytes_per_param=BYTES_FP4_MX, compute_dtype=DType.FP4
    ),
    LinearQuantAction.NVFP4: LinearFormat(
        weight_dtype=DType.FP4, weight_bytes_per_param=BYTES_FP4_NV, compute_dtype=DType.FP4
    ),
}

# KV-cache element size per attention action (DISABLED = the model's 16-bit dtype).
KV_BYTES_PER_ELEMENT: dict[AttentionQuantAction, float] = {
    AttentionQuantAction.DISABLED: BYTES_16BIT,
    AttentionQuantAction.INT8: BYTES_8BIT,
    AttentionQuantAction.FP8: BYTES_8BIT,
}

# Where a compute dtype goes when a device has no peak for it (nearest first). A weight-only
# fallback keeps the stored weight bytes and dequantizes into the fallback compute dtype.
COMPUTE_FALLBACKS: dict[DType, tuple[DType, ...]] = {
    DType.FP4: (DType.FP8, DType.INT8, DType.BF16),
    DType.FP8: (DType.INT8, DType.BF16),
    DType.INT8: (DType.BF16,),
    DType.INT4: (DType.INT8, DType.BF16),
    DType.BF16: (),
}


_E = TypeVar("_E", bound=enum.StrEnum)


def _parse_enum(kind: type[_E], field: str, value: str | _E) -> _E:
    if isinstance(value, kind):
        return value
    text = str(value).strip().upper()
    try:
        return kind(text)
    except ValueError:
        valid = ", ".join(member.value for member in kind)
        raise InvalidParameterError(field, value, f"one of {valid}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class Quantization:
    """A deployment's quantization: linear layers and attention / KV cache."""

    linear: LinearQuantAction = LinearQuantAction.DISABLED
    attention: AttentionQuantAction = AttentionQuantAction.DISABLED

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "linear", _parse_enum(LinearQuantAction, "quantize_linear_action", self.linear)
        )
        object.__setattr__(
            self,
            "attention",
            _parse_enum(AttentionQuantAction, "quantize_attention_action", self.attention),
        )

    @property
    def linear_format(self) -> LinearFormat:
        return LINEAR_FORMATS[self.linear]

    @property
    def kv_bytes_per_element(self) -> float:
        return KV_BYTES_PER_ELEMENT[self.attention]

    @property
    def label(self) -> str:
        return f"linear={self.linear.value} attention={self.attention.value}"

    def to_dict(self) -> dict[str, str]:
        return {
            "quantize_linear_action": self.linear.value,
            "quantize_attention_action": self.attention.value,
        }


def parse_quantization(
    linear: str | LinearQuantAction | None = None,
    attention: str | AttentionQuantAction | None = None,
) -> Quantization:
    """Build a :class:`Quantization` from user strings (case-insensitive; ``None`` = DISABLED)."""
    return Quantization(
        linear=_parse_enum(
            LinearQuantAction, "quantize_linear_action", linear or LinearQuantAction.DISABLED
        ),
        attention=_parse_enum(
            AttentionQuantAction,
            "quantize_attention_action",
            attention or AttentionQuantAction.DISABLED,
        ),
    )


def linear_actions() -> list[str]:
    return [member.value for member in LinearQuantAction]


def attention_actions() -> list[str]:
    return [member.value for member in AttentionQuantAction]
