"""Annotated dependencies: handlers receive the service context and the compute gate."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.api.compute import ComputeGate
from app.services.context import ServiceContext


def get_context(request: Request) -> ServiceContext:
    context: ServiceContext = request.state.context
    return context


def get_gate(request: Request) -> ComputeGate:
    gate: ComputeGate = request.state.gate
    return gate


ContextDep = Annotated[ServiceContext, Depends(get_context)]
GateDep = Annotated[ComputeGate, Depends(get_gate)]
