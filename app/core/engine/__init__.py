"""The time-simulation engine: the policy-free loop over request groups, its plans and clock.

- :mod:`~app.core.engine.arrivals`: where requests come from (burst, closed loop, timed);
- :mod:`~app.core.engine.loop`: the :class:`Engine` loop;
- :mod:`~app.core.engine.decode_queue`: the round-robin decode queue of request groups;
- :mod:`~app.core.engine.plan`: runs, plans, request records and results;
- :mod:`~app.core.engine.clock`: pricing shapes and walking the clock over the runs;
- :mod:`~app.core.engine.waves`: the closed-form prefill waves;
- :mod:`~app.core.engine.replicas`: data-parallel replicas as one result;
- :mod:`~app.core.engine.simulation`: the burst entry points (plan, replay, simulate).
"""

from app.core.engine.arrivals import ArrivalSource, Burst, ClosedLoop, StepClock, TimedArrivals
from app.core.engine.clock import evaluate_shapes, run_clock
from app.core.engine.loop import Engine
from app.core.engine.plan import (
    CLOSED_FORM_WAVES,
    MAX_CONCURRENCY,
    MS_PER_S,
    TIME_SIMULATION,
    CycleCopies,
    Method,
    RequestRecords,
    SimulationPlan,
    SimulationResult,
    StepRecord,
    StepRun,
    per_s,
    prefill_shape,
)
from app.core.engine.replicas import combine_replicas, replica_total, weighted_mean
from app.core.engine.simulation import AnyPlan, plan_serving, replay, run_engine, simulate
from app.core.engine.waves import (
    WavesPlan,
    plan_waves,
    replay_waves,
    wave_completion_sum_ms,
    wave_split,
)

__all__ = [
    "CLOSED_FORM_WAVES",
    "MAX_CONCURRENCY",
    "MS_PER_S",
    "TIME_SIMULATION",
    "AnyPlan",
    "ArrivalSource",
    "Burst",
    "ClosedLoop",
    "CycleCopies",
    "Engine",
    "Method",
    "RequestRecords",
    "SimulationPlan",
    "SimulationResult",
    "StepClock",
    "StepRecord",
    "StepRun",
    "TimedArrivals",
    "WavesPlan",
    "combine_replicas",
    "evaluate_shapes",
    "per_s",
    "plan_serving",
    "plan_waves",
    "prefill_shape",
    "replay",
    "replay_waves",
    "replica_total",
    "run_clock",
    "run_engine",
    "simulate",
    "wave_completion_sum_ms",
    "wave_split",
    "weighted_mean",
]
