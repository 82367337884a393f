"""The built-in catalogs, with their numbers."""

from __future__ import annotations

from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Path, Request, Response

from app.api.errors import PROBLEM_JSON, PROBLEM_RESPONSES, problem_response
from app.core.errors import UnknownNameError
from app.models.catalog import DeviceInfo, DeviceList, ModelInfo, ModelList
from app.models.common import Problem
from app.services import catalog as services

router = APIRouter(prefix="/v1", tags=["catalog"])
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": Problem, "content": {PROBLEM_JSON: {}}, "description": "unknown name"},
    422: PROBLEM_RESPONSES[422],  # the path parameter's validation, as problem+json
}

ModelName = Annotated[
    str, Path(description="a built-in model's Hugging Face id or alias (see GET /v1/models)")
]
DeviceName = Annotated[str, Path(description="a built-in device's name (see GET /v1/devices)")]


def _not_found(request: Request, exc: UnknownNameError) -> Response:
    return problem_response(
        request, 404, f"Unknown {exc.kind}", str(exc), kind=f"unknown-{exc.kind}", valid=exc.valid
    )


@router.get("/models", response_model=ModelList)
async def models() -> ModelList:
    """Built-in model architectures and the accepted quantization actions."""
    return await anyio.to_thread.run_sync(services.list_models)


@router.get("/devices", response_model=DeviceList)
async def devices() -> DeviceList:
    """Built-in devices with peaks, memory, bandwidth, efficiencies and interconnect tiers."""
    return await anyio.to_thread.run_sync(services.list_devices)


@router.get("/models/{name:path}", response_model=ModelInfo, responses=NOT_FOUND)
async def model(name: ModelName, request: Request) -> ModelInfo | Response:
    """One built-in model by Hugging Face id or alias (404 with the valid names otherwise)."""
    try:
        return await anyio.to_thread.run_sync(services.get_model_info, name)
    except UnknownNameError as exc:
        return _not_found(request, exc)


@router.get("/devices/{name}", response_model=DeviceInfo, responses=NOT_FOUND)
async def device(name: DeviceName, request: Request) -> DeviceInfo | Response:
    """One built-in device (404 with the valid names otherwise)."""
    try:
        return await anyio.to_thread.run_sync(services.get_device_info, name)
    except UnknownNameError as exc:
        return _not_found(request, exc)
