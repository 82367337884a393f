"""Service functions: request model -> domain call (through the latency cache) -> response model.

The API and the CLI are thin adapters over these functions. Every function here is synchronous
and CPU-bound; the API runs them in a worker thread (``anyio.to_thread.run_sync``).

One module per job:

    context      ServiceContext (settings, cache, counters, runner memo), create_context
    resolve      model / device / quantization / scheduler resolution, inline-config checks
    sizing       the engine budget, the request's WorkloadSpec, simulation-size bounds
    cost_model   the cache-backed latency model (ForwardRecord, CachedServingModel, ModelFactory)
    chunk_plan   POST /v1/chunk-plan
    simulate     POST /v1/simulate
    disagg_simulate  POST /v1/simulate with mode disagg (a prefill pool and a decode pool)
    optimize     POST /v1/optimize
    forward      POST /v1/forward and chunkwise forward (one path: plan_forward / run_forward)
    validate     chunkwise validate (the replay of measured data)
    catalog      GET /v1/models, GET /v1/devices
"""

from app.services.catalog import get_device_info, get_model_info, list_devices, list_models
from app.services.chunk_plan import chunk_plan
from app.services.context import ServiceContext, ServiceStats, create_context
from app.services.cost_model import CachedServingModel, ForwardRecord, ModelFactory
from app.services.forward import ForwardPlan, ForwardRun, forward, plan_forward, run_forward
from app.services.optimize import cached_optimize, optimize
from app.services.resolve import ResolvedDeployment, resolve_profile
from app.services.simulate import simulate
from app.services.sizing import is_light_simulation, workload_spec
from app.services.validate import validate, validate_cases, validate_replicas, validation_kinds

__all__ = [
    "CachedServingModel",
    "ForwardPlan",
    "ForwardRecord",
    "ForwardRun",
    "ModelFactory",
    "ResolvedDeployment",
    "ServiceContext",
    "ServiceStats",
    "cached_optimize",
    "chunk_plan",
    "create_context",
    "forward",
    "get_device_info",
    "get_model_info",
    "is_light_simulation",
    "list_devices",
    "list_models",
    "optimize",
    "plan_forward",
    "resolve_profile",
    "run_forward",
    "simulate",
    "validate",
    "validate_cases",
    "validate_replicas",
    "validation_kinds",
    "workload_spec",
]
