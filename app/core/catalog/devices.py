"""Accelerator look-ups: the built-in devices by name, and custom devices from a mapping.

The profiles are the table in :mod:`app.core.catalog.device_table`; the value types are in
:mod:`app.core.catalog.hardware`.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from typing import Any

from app.core.catalog.device_table import BUILTIN_DEVICES
from app.core.catalog.hardware import Device, InterconnectTier
from app.core.errors import InvalidParameterError, UnknownDeviceError

DEVICES: Mapping[str, Device] = types.MappingProxyType({d.name: d for d in BUILTIN_DEVICES})


def list_devices() -> list[Device]:
    """Built-in devices in catalog order."""
    return list(BUILTIN_DEVICES)


def device_names() -> list[str]:
    return [d.name for d in BUILTIN_DEVICES]


def get_device(name: str) -> Device:
    """A built-in device by name (case-insensitive); :class:`UnknownDeviceError` otherwise."""
    key = str(name).strip().upper()
    device = DEVICES.get(key)
    if device is None:
        raise UnknownDeviceError(str(name), device_names())
    return device


_DEVICE_FIELDS = {f.name for f in dataclasses.fields(Device)}
_TIER_FIELDS = {f.name for f in dataclasses.fields(InterconnectTier)}


def device_from_dict(data: Mapping[str, Any]) -> Device:
    """A custom device from a mapping with :class:`Device` field names.

    ``base`` (optional) names a built-in device whose values fill every field not given, so
    ``{"base": "NVIDIA_H100_SXM_80G", "name": "H100_96G", "hbm_capacity_gb": 96}`` works.
    ``interconnect`` is a list of tier mappings. Unknown keys are rejected.
    """
    if not isinstance(data, Mapping):
        raise InvalidParameterError("device", data, "a mapping of device fields")
    fields = dict(data)
    base_name = fields.pop("base", None)
    unknown = sorted(set(fields) - _DEVICE_FIELDS)
    if unknown:
        raise InvalidParameterError(
            "device", unknown, f"known fields only: {', '.join(sorted(_DEVICE_FIELDS))}"
        )
    merged: dict[str, Any] = {}
    if base_name is not None:
        base = get_device(str(base_name))
        merged = {f.name: getattr(base, f.name) for f in dataclasses.fields(Device)}
    merged.update(fields)
    tiers = merged.get("interconnect")
    if isinstance(tiers, list | tuple):
        merged["interconnect"] = tuple(_tier_from(t) for t in tiers)
    missing = sorted(
        f.name
        for f in dataclasses.fields(Device)
        if f.name not in merged
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    )
    if missing:
        raise InvalidParameterError("device", missing, "all required fields (or a 'base' device)")
    try:
        return Device(**merged)
    except TypeError as exc:
        raise InvalidParameterError("device", dict(data), str(exc)) from None


def _tier_from(item: Any) -> InterconnectTier:
    if isinstance(item, InterconnectTier):
        return item
    if not isinstance(item, Mapping) or set(item) - _TIER_FIELDS:
        raise InvalidParameterError(
            "interconnect", item, f"a mapping with fields {', '.join(sorted(_TIER_FIELDS))}"
        )
    try:
        return InterconnectTier(**item)
    except TypeError as exc:
        raise InvalidParameterError("interconnect", dict(item), str(exc)) from None
