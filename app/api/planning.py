"""Chunk plans, simulations and the throughput optimizer.

Handlers are thin: validate (pydantic), run the service function in a worker thread, return.
"""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter

from app.api.deps import ContextDep, GateDep
from app.api.errors import PROBLEM_RESPONSES
from app.models.capacity import PlanRequest, PlanResponse
from app.models.optimize import DisaggOptimizeResponse, OptimizeRequest, OptimizeResponse
from app.models.plan import ChunkPlanRequest, ChunkPlanResponse
from app.models.simulate import DisaggSimulateResponse, SimulateRequest, SimulateResponse
from app.services import chunk_plan as chunk_plan_service
from app.services import optimize as optimize_service
from app.services import simulate as simulate_service
from app.services import sizing

router = APIRouter(prefix="/v1", tags=["planning"], responses=PROBLEM_RESPONSES)


@router.post("/chunk-plan", response_model=ChunkPlanResponse)
async def chunk_plan(request: ChunkPlanRequest, gate: GateDep) -> ChunkPlanResponse:
    """The prefill chunk plan and the effective (uncached) input length."""
    return await gate.run(partial(chunk_plan_service.chunk_plan, request), light=True)


@router.post("/simulate", response_model=SimulateResponse | DisaggSimulateResponse)
async def simulate(
    request: SimulateRequest, context: ContextDep, gate: GateDep
) -> SimulateResponse | DisaggSimulateResponse:
    """One configuration at a given concurrency: TTFT, TPOT, throughput, optionally the steps
    (``mode: "disagg"``: a prefill pool and a decode pool; the pools, the P:D split, the KV
    transfer and the binding pool).

    An infeasible configuration (memory, limits) is a 200 with ``feasible: false``.
    """
    light = sizing.is_light_simulation(request)
    return await gate.run_service(
        "simulate", simulate_service.simulate, context, request, light=light
    )


@router.post("/optimize", response_model=OptimizeResponse | DisaggOptimizeResponse)
async def optimize(
    request: OptimizeRequest, context: ContextDep, gate: GateDep
) -> OptimizeResponse | DisaggOptimizeResponse:
    """The throughput optimizer: best concurrency per parallel layout, ranked (``mode:
    "disagg"``: the best prefill and decode worker layouts, counts and concurrency).

    Every feasible probe is returned for plots (``include_probes``). Bounds: see README.
    """
    if gate.processes is not None:  # a response-cache hit never queues for the child
        hit = await gate.run(
            partial(optimize_service.cached_optimize, context, request), light=True
        )
        if hit is not None:
            return hit
    return await gate.run_service("optimize", optimize_service.optimize, context, request)


@router.post("/plan", response_model=PlanResponse)
async def capacity_plan(request: PlanRequest, context: ContextDep, gate: GateDep) -> PlanResponse:
    """Replicas and devices a target traffic needs under an SLA (mean or percentile TTFT /
    TPOT from Poisson arrivals), with the headroom, and the costs from a price per
    device-hour. A layout that cannot meet the SLA even idle is a 200 with the reason."""
    from app.services.capacity import plan

    return await gate.run_service("plan", plan, context, request)
