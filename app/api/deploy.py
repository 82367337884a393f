"""Launch configurations of result rows (issue 16)."""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter

from app.api.deps import GateDep
from app.api.errors import PROBLEM_RESPONSES
from app.models.deploy import DeployRequest, DeployResponse
from app.services.deploy import deploy as deploy_row

router = APIRouter(prefix="/v1", tags=["deploy"], responses=PROBLEM_RESPONSES)


@router.post("/deploy", response_model=DeployResponse)
async def deploy(request: DeployRequest, gate: GateDep) -> DeployResponse:
    """The engine launch of a row of POST /v1/optimize: the vLLM, SGLang or TensorRT-LLM
    command and config file, the replica count, a Kubernetes Deployment and Service and a
    docker-compose service. An unknown engine is a 422 naming the valid ones."""
    return await gate.run(partial(deploy_row, request), light=True)
