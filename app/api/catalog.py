"""The built-in catalogs, with their numbers."""

from __future__ import annotations

import anyio
from fastapi import APIRouter

from app import services
from app.models.catalog import DeviceList, ModelList

router = APIRouter(prefix="/v1", tags=["catalog"])


@router.get("/models", response_model=ModelList)
async def models() -> ModelList:
    """Built-in model architectures and the accepted quantization actions."""
    return await anyio.to_thread.run_sync(services.list_models)


@router.get("/devices", response_model=DeviceList)
async def devices() -> DeviceList:
    """Built-in devices with peaks, memory, bandwidth, efficiencies and interconnect tiers."""
    return await anyio.to_thread.run_sync(services.list_devices)
