"""``GET /v1/models``, ``GET /v1/devices``: the built-in catalog as wire models."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.core.catalog import (
    SUPPORTED_MODEL_TYPES,
    Device,
    ModelArchitecture,
    attention_actions,
    get_device,
    linear_actions,
)
from app.core.catalog import list_devices as catalog_devices
from app.core.catalog import list_models as catalog_models
from app.services.resolve import resolve_model

if TYPE_CHECKING:  # the wire models load with the first listing, not with app.services
    from app.models.catalog import DeviceInfo, DeviceList, ModelInfo, ModelList


def _model_info(arch: ModelArchitecture) -> ModelInfo:
    from app.models.catalog import ModelInfo

    return ModelInfo(
        name=arch.name,
        model_type=arch.model_type,
        num_params=arch.num_params,
        num_active_params=arch.num_active_params,
        num_layers=arch.num_layers,
        hidden_size=arch.hidden_size,
        architecture=arch.to_dict(),
    )


def _device_info(d: Device) -> DeviceInfo:
    from app.models.catalog import DeviceInfo

    return DeviceInfo(
        name=d.name,
        vendor=d.vendor,
        description=d.description,
        peak_bf16_tflops=d.peak_bf16_tflops,
        peak_fp8_tflops=d.peak_fp8_tflops,
        peak_int8_tops=d.peak_int8_tops,
        peak_fp4_tflops=d.peak_fp4_tflops,
        hbm_capacity_gb=d.hbm_capacity_gb,
        hbm_bandwidth_gb_s=d.hbm_bandwidth_gb_s,
        numbers=d.to_dict(),
    )


def get_model_info(name: str) -> ModelInfo:
    """A built-in model by id or alias (never a local path); UnknownModelError otherwise."""
    return _model_info(resolve_model(name))


def get_device_info(name: str) -> DeviceInfo:
    return _device_info(get_device(name))


def list_models() -> ModelList:
    from app.models.catalog import ModelList

    models = [_model_info(arch) for arch in catalog_models()]
    return ModelList(
        models=models,
        quantize_linear_actions=linear_actions(),
        quantize_attention_actions=attention_actions(),
        supported_model_types=list(SUPPORTED_MODEL_TYPES),
    )


def list_devices() -> DeviceList:
    from app.models.catalog import DeviceList

    return DeviceList(devices=[_device_info(d) for d in catalog_devices()])
