"""The built-in catalog: model architectures, devices and quantization formats.

Public entry points::

    get_model(name_or_hf_id_or_path) -> ModelArchitecture   list_models() / model_names()
    model_from_config(config_json_mapping, name=None)       (inline HF config.json)
    get_device(name) -> Device                               list_devices() / device_names()
    device_from_dict(mapping)                                (custom device, optional "base")
    parse_quantization(linear, attention) -> Quantization

Unknown names raise :class:`~app.core.errors.UnknownModelError` /
:class:`~app.core.errors.UnknownDeviceError` (with the valid names); malformed values raise
:class:`~app.core.errors.InvalidParameterError`; unsupported architectures raise
:class:`~app.core.errors.UnsupportedError`.
"""

from app.core.catalog.architecture import (
    AttentionKind,
    FfnKind,
    LayerGroup,
    MlaDims,
    ModelArchitecture,
    MoeDims,
)
from app.core.catalog.devices import device_from_dict, device_names, get_device, list_devices
from app.core.catalog.hardware import Device, InterconnectTier
from app.core.catalog.hf_config import SUPPORTED_MODEL_TYPES, model_from_config
from app.core.catalog.models import (
    get_model,
    list_models,
    model_from_path,
    model_names,
    resolve_model_name,
)
from app.core.catalog.quantization import (
    AttentionQuantAction,
    DType,
    LinearQuantAction,
    Quantization,
    attention_actions,
    linear_actions,
    parse_quantization,
)

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "AttentionKind",
    "AttentionQuantAction",
    "DType",
    "Device",
    "FfnKind",
    "InterconnectTier",
    "LayerGroup",
    "LinearQuantAction",
    "MlaDims",
    "ModelArchitecture",
    "MoeDims",
    "Quantization",
    "attention_actions",
    "device_from_dict",
    "device_names",
    "get_device",
    "get_model",
    "linear_actions",
    "list_devices",
    "list_models",
    "model_from_config",
    "model_from_path",
    "model_names",
    "parse_quantization",
    "resolve_model_name",
]
