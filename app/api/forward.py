"""One forward pass."""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter

from app.api.deps import ContextDep, GateDep
from app.api.errors import PROBLEM_RESPONSES
from app.models.forward import ForwardRequest, ForwardResponse
from app.services import forward as forward_service

router = APIRouter(prefix="/v1", tags=["forward"], responses=PROBLEM_RESPONSES)


@router.post("/forward", response_model=ForwardResponse)
async def forward(request: ForwardRequest, context: ContextDep, gate: GateDep) -> ForwardResponse:
    """Latency with a per-operator breakdown and the memory picture of one forward."""
    return await gate.run(partial(forward_service.forward, context, request), light=True)
