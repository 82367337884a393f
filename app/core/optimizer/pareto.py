"""The Pareto front of a search: tokens/s per device against tokens/s per user.

A capacity planner trades the two: more concurrency per device raises the device's throughput
and slows every user's stream. A probe is on the front when no other evaluated probe is at
least as good on both axes and strictly better on one. Tokens/s per user is ``1000 / TPOT``
(TPOT already counts the tokens an MTP step emits), so only probes with a decode step (the
aggregated and decode searches) and a finite positive TPOT are candidates; a probe that ran out
of memory has no TPOT and is never on the front. SLA-infeasible probes are candidates too: the
front shows what the hardware can do, the SLA region (drawn from the limits) shows what the
request allows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from app.core.engine import MS_PER_S
from app.core.optimizer.common import Probe


@dataclass(frozen=True, slots=True)
class ParetoPoint:
    """A probe on the front with its two coordinates."""

    probe: Probe
    tpot_ms: float
    user_tokens_s: float
    device_tokens_s: float


def _point(probe: Probe) -> ParetoPoint | None:
    tpot_ms = probe.tpot_ms
    if tpot_ms is None or not math.isfinite(tpot_ms) or tpot_ms <= 0.0:
        return None
    per_device = probe.throughput_per_device
    if not math.isfinite(per_device) or per_device <= 0.0:
        return None
    return ParetoPoint(
        probe=probe,
        tpot_ms=tpot_ms,
        user_tokens_s=MS_PER_S / tpot_ms,
        device_tokens_s=per_device,
    )


def pareto_front(probes: Iterable[Probe]) -> tuple[ParetoPoint, ...]:
    """The non-dominated probes, ordered by tokens/s per user ascending (so tokens/s per device
    descending). Of probes with equal coordinates the first one given is kept."""
    points = [p for p in map(_point, probes) if p is not None]
    # Best per-user first; among equal per-user, best per-device first; ties keep input order.
    order = sorted(
        range(len(points)),
        key=lambda i: (-points[i].user_tokens_s, -points[i].device_tokens_s, i),
    )
    front: list[ParetoPoint] = []
    best_device = -math.inf
    for i in order:
        point = points[i]
        if point.device_tokens_s > best_device:
            front.append(point)
            best_device = point.device_tokens_s
    front.reverse()
    return tuple(front)
