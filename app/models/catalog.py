"""GET /v1/models and GET /v1/devices."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from app.models import texts


class ModelInfo(BaseModel):
    name: str = Field(description="Hugging Face id; case-insensitive, -Instruct/-FP8 variants too")
    model_type: str = Field(description="the Hugging Face config's model_type, e.g. qwen3")
    num_params: int = Field(
        description="parameters of the main model (embedding, layers, final norm, lm_head)"
    )
    num_active_params: int = Field(
        description="parameters one token touches (MoE: the routed top-k experts only)"
    )
    num_layers: int = Field(description="decoder layers")
    hidden_size: int = Field(description="width of the hidden state, elements per token")
    architecture: dict[str, Any] = Field(
        description="every number the latency model reads, and max_context_tokens: the most "
        "tokens one request may hold (input + output; null: the config states no limit)"
    )


class ModelList(BaseModel):
    models: list[ModelInfo] = Field(description="the built-in models")
    quantize_linear_actions: list[str] = Field(
        description="the values quantize_linear_action accepts"
    )
    quantize_attention_actions: list[str] = Field(
        description="the values quantize_attention_action accepts"
    )
    supported_model_types: list[str] = Field(
        description="the Hugging Face model_type values an inline config may have"
    )


class DeviceInfo(BaseModel):
    name: str = Field(description="the catalog name (a request's device)")
    vendor: str = Field(description="the vendor, e.g. nvidia")
    description: str = Field(description="what the device is")
    peak_bf16_tflops: float = Field(
        description="peak BF16 matrix throughput of one device, TFLOPS (10^12 FLOP/s)"
    )
    peak_fp8_tflops: float | None = Field(
        description="peak FP8 matrix throughput, TFLOPS (null: no FP8 units)"
    )
    peak_int8_tops: float | None = Field(
        description="peak INT8 matrix throughput, TOPS (10^12 op/s; null: no INT8 units)"
    )
    peak_fp4_tflops: float | None = Field(
        description="peak FP4 matrix throughput, TFLOPS (null: no FP4 units)"
    )
    hbm_capacity_gb: float = Field(
        description=f"HBM of one device, {texts.GB}: the total its runtime reports (nvidia-smi, "
        "rocm-smi: an H100 SXM sold as 80 GB reports 81,559 MiB = 85.5 GB), else its vendor "
        "capacity in GiB (the README's rule; the catalog's data names the source per device)"
    )
    hbm_bandwidth_gb_s: float = Field(
        description="HBM bandwidth of one device, decimal GB/s (10^9 bytes/s)"
    )
    numbers: dict[str, Any] = Field(description="every field, as a custom device accepts them")


class DeviceList(BaseModel):
    devices: list[DeviceInfo] = Field(description="the built-in devices")
