"""Launch configurations of result rows (issue 16)."""

from __future__ import annotations

from functools import partial
from typing import Annotated

from fastapi import APIRouter, Query

from app.api.deps import GateDep
from app.api.errors import PROBLEM_RESPONSES
from app.models.deploy import DeployQuery, DeployRequest, DeployResponse
from app.services.deploy import deploy as deploy_row

router = APIRouter(prefix="/v1", tags=["deploy"], responses=PROBLEM_RESPONSES)


@router.post("/deploy", response_model=DeployResponse)
async def deploy(request: DeployRequest, gate: GateDep) -> DeployResponse:
    """The engine launch of a row of POST /v1/optimize: the vLLM, SGLang or TensorRT-LLM
    command and config file, the replica count, a Kubernetes Deployment and Service and a
    docker-compose service. An unknown engine is a 422 naming the valid ones."""
    return await gate.run(partial(deploy_row, request), light=True)


@router.get("/deploy", response_model=DeployResponse)
async def deploy_get(query: Annotated[DeployQuery, Query()], gate: GateDep) -> DeployResponse:
    """POST /v1/deploy as a link: the same fields as query parameters (a catalog device name;
    engine_options only in the POST body), e.g.
    /v1/deploy?engine=vllm&model=Qwen/Qwen3-32B&device=NVIDIA_H100_SXM_80G&num_devices=8&tp=4&dp=2"""
    request = DeployRequest.model_validate(query.model_dump())
    return await gate.run(partial(deploy_row, request), light=True)
