"""Capacity plans: how many replicas of a layout a target traffic needs under an SLA.

One replica (one instance of the layout: ``tp x dp`` devices, its ``dp`` data-parallel ranks
behind one load balancer) receives Poisson arrivals (:func:`~app.core.workload.
simulate_poisson_serving`, the open workload a production front end sees). Its **sustainable
rate** is the largest rate whose TTFT and TPOT statistic (the mean, or a percentile of the
measured requests) stays within the limits; it is found by bisection between an idle replica
(which must meet the SLA, or the plan is infeasible) and the replica's saturated closed-loop
request throughput (no open arrival stream above it is stable). The traffic, inflated by the
headroom factor, divided by that rate and rounded up, is the replica count.

Costs, when a price per device-hour is given: devices x price per hour, and per million output
tokens ``cost_per_hour / (target output tokens per hour) x 1e6``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from app.core.errors import InvalidParameterError
from app.core.workload.metrics import ServingResult

#: Bisection steps on the sustainable rate (its bracket shrinks 2**-BISECTION_STEPS).
BISECTION_STEPS = 12
#: The idle probe's rate as a share of the saturated throughput.
IDLE_SHARE = 1e-3
S_PER_HOUR = 3600.0
TOKENS_PER_MILLION = 1e6


@dataclass(frozen=True, slots=True, kw_only=True)
class Sla:
    """Limits on the TTFT and TPOT statistic (``percentile`` None: the means)."""

    ttft_limit_ms: float | None
    tpot_limit_ms: float | None
    percentile: float | None = None
    #: The per-request front-end time every reported TTFT carries (the engine profile's).
    ttft_overhead_ms: float = 0.0

    @property
    def statistic_name(self) -> str:
        return "mean" if self.percentile is None else f"p{self.percentile:g}"

    def statistic(self, result: ServingResult) -> tuple[float, float]:
        if self.percentile is None:
            return result.ttft_ms + self.ttft_overhead_ms, result.tpot_ms
        ttft = result.ttft_percentile_ms(self.percentile) + self.ttft_overhead_ms
        return ttft, result.tpot_percentile_ms(self.percentile)

    def violation(self, result: ServingResult) -> str | None:
        """Which limit ``result`` misses (None: it meets both)."""
        ttft, tpot = self.statistic(result)
        name = self.statistic_name
        if self.ttft_limit_ms is not None and ttft > self.ttft_limit_ms:
            return f"{name} TTFT {ttft:.1f} ms > {self.ttft_limit_ms:g} ms"
        if self.tpot_limit_ms is not None and tpot > self.tpot_limit_ms:
            return f"{name} TPOT {tpot:.2f} ms > {self.tpot_limit_ms:g} ms"
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityPlan:
    """The replicas a traffic needs (``replicas == 0`` with ``reason``: no rate meets the SLA)."""

    sustainable_rate: float  # requests / s one replica serves within the SLA
    replicas: int
    devices: int
    target_rate: float  # requests / s, before the headroom
    headroom: float
    utilisation: float  # target / (replicas x sustainable rate)
    at_rate: ServingResult | None  # one replica at its sustainable rate
    reason: str | None
    cost_per_hour: float | None
    cost_per_million_output_tokens: float | None


def plan_capacity(
    *,
    simulate: Callable[[float], ServingResult],
    saturated_rate: float,
    sla: Sla,
    target_rate: float,
    headroom: float,
    devices_per_replica: int,
    output_length: int,
    price_per_device_hour: float | None = None,
) -> CapacityPlan:
    """The plan of the module docstring; ``simulate(rate)`` is one replica at ``rate`` req/s
    and ``saturated_rate`` its closed-loop request throughput at its running cap."""
    if not (math.isfinite(target_rate) and target_rate > 0):
        raise InvalidParameterError("request_rate", target_rate, "a finite number > 0")
    if not (math.isfinite(headroom) and headroom >= 1):
        raise InvalidParameterError("headroom", headroom, "a number >= 1")
    if not (math.isfinite(saturated_rate) and saturated_rate > 0):
        return infeasible_plan(target_rate, headroom, "the replica completes no request")
    low, high = saturated_rate * IDLE_SHARE, saturated_rate
    idle = simulate(low)
    missed = sla.violation(idle)
    if missed is not None:
        return infeasible_plan(
            target_rate, headroom, f"even an idle replica misses the SLA: {missed}"
        )
    best, best_rate = idle, low
    top = simulate(high)
    if sla.violation(top) is None:
        best, best_rate = top, high
    else:
        for _ in range(BISECTION_STEPS):
            middle = math.sqrt(low * high)  # the bracket spans decades: bisect the log
            result = simulate(middle)
            if sla.violation(result) is None:
                low, best, best_rate = middle, result, middle
            else:
                high = middle
    replicas = max(1, math.ceil(target_rate * headroom / best_rate))
    devices = replicas * devices_per_replica
    cost_per_hour = cost_per_million = None
    if price_per_device_hour is not None:
        cost_per_hour = devices * price_per_device_hour
        tokens_per_hour = target_rate * output_length * S_PER_HOUR
        cost_per_million = cost_per_hour / tokens_per_hour * TOKENS_PER_MILLION
    return CapacityPlan(
        sustainable_rate=best_rate,
        replicas=replicas,
        devices=devices,
        target_rate=target_rate,
        headroom=headroom,
        utilisation=target_rate / (replicas * best_rate),
        at_rate=best,
        reason=None,
        cost_per_hour=cost_per_hour,
        cost_per_million_output_tokens=cost_per_million,
    )


def infeasible_plan(target_rate: float, headroom: float, reason: str) -> CapacityPlan:
    """No replica count serves the target: ``reason`` says why."""
    return CapacityPlan(
        sustainable_rate=0.0,
        replicas=0,
        devices=0,
        target_rate=target_rate,
        headroom=headroom,
        utilisation=0.0,
        at_rate=None,
        reason=reason,
        cost_per_hour=None,
        cost_per_million_output_tokens=None,
    )
