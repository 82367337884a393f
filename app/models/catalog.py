"""GET /v1/models and GET /v1/devices."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ModelInfo(BaseModel):
    name: str = Field(description="Hugging Face id; case-insensitive, -Instruct/-FP8 variants too")
    model_type: str
    num_params: int
    num_active_params: int
    num_layers: int
    hidden_size: int
    architecture: dict[str, Any] = Field(description="every number the latency model reads")


class ModelList(BaseModel):
    models: list[ModelInfo]
    quantize_linear_actions: list[str]
    quantize_attention_actions: list[str]
    supported_model_types: list[str]


class DeviceInfo(BaseModel):
    name: str
    vendor: str
    description: str
    peak_bf16_tflops: float
    peak_fp8_tflops: float | None
    peak_int8_tops: float | None
    peak_fp4_tflops: float | None
    hbm_capacity_gb: float
    hbm_bandwidth_gb_s: float
    numbers: dict[str, Any] = Field(description="every field, as a custom device accepts them")


class DeviceList(BaseModel):
    devices: list[DeviceInfo]
