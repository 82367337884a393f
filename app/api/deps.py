"""Annotated dependencies: handlers receive the service context and settings through these."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.api.compute import ComputeGate
from app.services import ServiceContext
from app.settings import Settings


def get_context(request: Request) -> ServiceContext:
    context: ServiceContext = request.state.context
    return context


def get_gate(request: Request) -> ComputeGate:
    gate: ComputeGate = request.state.gate
    return gate


def get_app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


ContextDep = Annotated[ServiceContext, Depends(get_context)]
GateDep = Annotated[ComputeGate, Depends(get_gate)]
SettingsDep = Annotated[Settings, Depends(get_app_settings)]
