"""Serving workloads over the engine: closed loop, Poisson arrivals, windows, KV admission.

- :mod:`~app.core.workload.closed_loop`: ``C`` clients re-submitting (and the dp split);
- :mod:`~app.core.workload.poisson`: requests arriving at a rate, the clock's step prices;
- :mod:`~app.core.workload.admission`: the running cap (KV cache, ``max_num_seqs``, policy);
- :mod:`~app.core.workload.coupled`: data-parallel ranks that step together (attention DP + EP);
- :mod:`~app.core.workload.windows`: the ``benchmark`` and ``steady_state`` windows;
- :mod:`~app.core.workload.metrics`: the serving plan, result, replay and replica combiner.
"""

from app.core.workload.admission import kv_capacity, running_cap
from app.core.workload.closed_loop import (
    DEFAULT_REQUESTS_PER_CLIENT,
    PlanCache,
    PlanMemo,
    plan_closed_loop,
    simulate_closed_loop,
    simulate_serving,
)
from app.core.workload.coupled import BusiestRank, ranks_are_coupled
from app.core.workload.metrics import (
    DEFAULT_WORKLOAD,
    MAX_REQUESTS,
    WORKLOADS,
    ServingPlan,
    ServingResult,
    Workload,
    combine_serving,
    replay_serving,
)
from app.core.workload.poisson import (
    DEFAULT_POISSON_REQUESTS,
    DEFAULT_POISSON_SEED,
    MAX_SEED,
    StepPrices,
    plan_poisson,
    poisson_arrivals_ms,
    poisson_shares,
    simulate_poisson,
    simulate_poisson_serving,
)
from app.core.workload.windows import DEFAULT_WINDOW, WINDOWS, Window

__all__ = [
    "DEFAULT_POISSON_REQUESTS",
    "DEFAULT_POISSON_SEED",
    "DEFAULT_REQUESTS_PER_CLIENT",
    "DEFAULT_WINDOW",
    "DEFAULT_WORKLOAD",
    "MAX_REQUESTS",
    "MAX_SEED",
    "WINDOWS",
    "WORKLOADS",
    "BusiestRank",
    "PlanCache",
    "PlanMemo",
    "ServingPlan",
    "ServingResult",
    "StepPrices",
    "Window",
    "Workload",
    "combine_serving",
    "kv_capacity",
    "plan_closed_loop",
    "plan_poisson",
    "poisson_arrivals_ms",
    "poisson_shares",
    "ranks_are_coupled",
    "replay_serving",
    "running_cap",
    "simulate_closed_loop",
    "simulate_poisson",
    "simulate_poisson_serving",
    "simulate_serving",
]
