"""Data-parallel replicas as one result: the one way results of replicas combine.

Parts are ``[(one replica's result, how many replicas like it)]``. Throughputs and counts add
over replicas; latencies are means weighted by the requests each replica measured.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.core.engine.plan import SimulationResult
from app.core.errors import InvalidParameterError


def weighted_mean(parts: Sequence[tuple[object, int]], attribute: str, weight: str) -> float:
    """``attribute`` averaged over every replica, each weighted by its ``weight``."""
    total: int = sum(getattr(r, weight) * n for r, n in parts)
    weighted: float = sum(float(getattr(r, attribute)) * getattr(r, weight) * n for r, n in parts)
    return weighted / total


def replica_total(parts: Sequence[tuple[object, int]], attribute: str) -> float:
    """``attribute`` summed over every replica."""
    return sum(float(getattr(r, attribute)) * n for r, n in parts)


def combine_replicas(parts: Sequence[tuple[SimulationResult, int]]) -> SimulationResult:
    """Burst results of replicas as one.

    Throughputs, requests and steps add; TTFT and TPOT are request-weighted means; the makespan
    is the slowest replica's; the timeline is the first part's (one replica's steps).
    """
    if not parts:
        raise InvalidParameterError("parts", parts, "at least one replica result")
    first = parts[0][0]
    if len(parts) == 1 and parts[0][1] == 1:
        return first
    return SimulationResult(
        method=first.method,
        concurrency=sum(r.concurrency * n for r, n in parts),
        ttft_ms=weighted_mean(parts, "ttft_ms", "concurrency"),
        tpot_ms=weighted_mean(parts, "tpot_ms", "concurrency"),
        makespan_ms=max(r.makespan_ms for r, _ in parts),
        throughput_tokens_s=replica_total(parts, "throughput_tokens_s"),
        request_throughput=replica_total(parts, "request_throughput"),
        prefill_num_chunks=first.prefill_num_chunks,
        steps=sum(r.steps * n for r, n in parts),
        forward_evaluations=sum(r.forward_evaluations for r, _ in parts),
        timeline=first.timeline,
    )
