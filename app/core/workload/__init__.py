"""Serving workloads over the engine: burst, closed loop, Poisson arrivals, KV admission."""

from app.core.workload.serving import (
    DEFAULT_POISSON_REQUESTS,
    DEFAULT_POISSON_SEED,
    DEFAULT_REQUESTS_PER_CLIENT,
    MAX_SEED,
    WORKLOADS,
    ServingResult,
    Window,
    Workload,
    plan_closed_loop,
    plan_poisson,
    poisson_arrivals_ms,
    poisson_shares,
    simulate_closed_loop,
    simulate_poisson,
    simulate_poisson_serving,
    simulate_serving,
)

__all__ = [
    "DEFAULT_POISSON_REQUESTS",
    "DEFAULT_POISSON_SEED",
    "DEFAULT_REQUESTS_PER_CLIENT",
    "MAX_SEED",
    "WORKLOADS",
    "ServingResult",
    "Window",
    "Workload",
    "plan_closed_loop",
    "plan_poisson",
    "poisson_arrivals_ms",
    "poisson_shares",
    "simulate_closed_loop",
    "simulate_poisson",
    "simulate_poisson_serving",
    "simulate_serving",
]
