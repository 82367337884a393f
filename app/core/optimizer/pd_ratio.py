"""Prefill:decode instance ratio of a disaggregated deployment (RFC §3.1.6, DIGEST).

``P_QPS = p_concurrency / chunked_prefill_ttft * 1000``,
``D_QPS = d_concurrency / (tpot * max(O - 1, 1)) * 1000``, ``pd_ratio = D_QPS / P_QPS``;
the instance counts are the integer split of a device budget that maximises the balanced QPS
``min(n_p * P_QPS, n_d * D_QPS)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from app.core.chunking import require_int
from app.core.engine import MS_PER_S
from app.core.errors import InvalidParameterError
from app.core.optimizer.common import (
    DEFAULT_MAX_BATCH_SIZE,
    Deployment,
    OptimizeResult,
    Probe,
    ResultRow,
    ServingFactory,
    make_row,
)
from app.core.optimizer.disagg import optimize_disagg_decode, optimize_disagg_prefill
from app.core.parallel import ParallelLayout
from app.core.spec import WorkloadSpec

#: Relative slack when rounding an instance count up (floating-point noise, not policy).
_QPS_EPSILON = 1e-9


def prefill_qps(p_concurrency: int, ttft_ms: float) -> float:
    """Requests per second one prefill instance completes at that concurrency and TTFT."""
    if ttft_ms <= 0:
        raise InvalidParameterError("ttft_ms", ttft_ms, "> 0")
    return p_concurrency / ttft_ms * MS_PER_S


def decode_qps(d_concurrency: int, tpot_ms: float, output_length: int) -> float:
    """Requests per second one decode instance completes at that concurrency and TPOT."""
    if tpot_ms <= 0:
        raise InvalidParameterError("tpot_ms", tpot_ms, "> 0")
    return d_concurrency / (tpot_ms * max(output_length - 1, 1)) * MS_PER_S


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceSplit:
    prefill_instances: int
    decode_instances: int
    devices_used: int
    balanced_qps: float


def split_instances(
    p_qps: float,
    d_qps: float,
    prefill_devices_per_instance: int,
    decode_devices_per_instance: int,
    device_budget: int,
) -> InstanceSplit | None:
    """The integer instance counts within the budget that maximise ``min(nP*P, nD*D)``.

    Ties go to fewer devices. ``None`` when the budget cannot hold one instance of each.
    """
    best: InstanceSplit | None = None
    for n_p in range(1, device_budget // prefill_devices_per_instance + 1):
        left = device_budget - n_p * prefill_devices_per_instance
        n_d = left // decode_devices_per_instance
        if n_d < 1:
            break
        balanced = min(n_p * p_qps, n_d * d_qps)
        # Fewest decode instances that still reach the balanced QPS.
        n_d_used = min(n_d, max(1, math.ceil(balanced / d_qps - _QPS_EPSILON)))
        used = n_p * prefill_devices_per_instance + n_d_used * decode_devices_per_instance
        candidate = InstanceSplit(
            prefill_instances=n_p,
            decode_instances=n_d_used,
            devices_used=used,
            balanced_qps=balanced,
        )
        if best is None or (balanced, -used) > (best.balanced_qps, -best.devices_used):
            best = candidate
    return best


def binding_side(split: InstanceSplit, p_qps: float, d_qps: float) -> Literal["prefill", "decode"]:
    """The side whose instances cap the balanced QPS (the one to grow): prefill when its
    instances complete no more requests than the decode instances could."""
    prefill_cap = split.prefill_instances * p_qps
    decode_cap = split.decode_instances * d_qps
    return "prefill" if prefill_cap <= decode_cap else "decode"


@dataclass(frozen=True, slots=True, kw_only=True)
class PdRatioResult:
    prefill: OptimizeResult
    decode: OptimizeResult
    prefill_row: ResultRow | None
    decode_row: ResultRow | None
    p_qps: float | None
    d_qps: float | None
    pd_ratio: float | None
    split: InstanceSplit | None
    throughput_tokens_s: float
    throughput_per_device: float
    reason: str | None
    #: The side whose instances cap the balanced QPS (``None`` without a split).
    binding_pool: Literal["prefill", "decode"] | None = None


def _best_by_qps(probes: Sequence[Probe], qps: dict[int, float]) -> Probe | None:
    feasible = [p for p in probes if p.feasible]
    return max(feasible, key=lambda p: (qps[id(p)], -p.layout.tp)) if feasible else None


def _best_prefill(prefill: OptimizeResult) -> tuple[Probe | None, float]:
    """The feasible prefill probe with the most QPS per instance, and that QPS."""
    qps_of = {
        id(p): prefill_qps(p.concurrency, p.ttft_ms)
        for p in prefill.probes
        if p.feasible and p.ttft_ms
    }
    best = _best_by_qps([p for p in prefill.probes if id(p) in qps_of], qps_of)
    return best, qps_of[id(best)] if best is not None else 0.0


def _best_decode(decode: OptimizeResult, output_length: int) -> tuple[Probe | None, float]:
    """The feasible decode probe with the most QPS per instance, and that QPS."""
    qps_of = {
        id(p): decode_qps(p.concurrency, p.tpot_ms, output_length)
        for p in decode.probes
        if p.feasible and p.tpot_ms
    }
    best = _best_by_qps([p for p in decode.probes if id(p) in qps_of], qps_of)
    return best, qps_of[id(best)] if best is not None else 0.0


def _infeasible(prefill: OptimizeResult, decode: OptimizeResult, reason: str) -> PdRatioResult:
    return PdRatioResult(
        prefill=prefill,
        decode=decode,
        prefill_row=None,
        decode_row=None,
        p_qps=None,
        d_qps=None,
        pd_ratio=None,
        split=None,
        throughput_tokens_s=0.0,
        throughput_per_device=0.0,
        reason=reason,
    )


def optimize_pd_ratio(
    data: WorkloadSpec,
    prefill_layouts: Sequence[ParallelLayout],
    decode_layouts: Sequence[ParallelLayout],
    prefill_serving_for: ServingFactory,
    decode_serving_for: ServingFactory,
    prefill_deployment: Deployment,
    decode_deployment: Deployment,
    *,
    device_budget: int,
    serving_overhead_ms: float = 0.0,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
) -> PdRatioResult:
    """Best prefill and decode instance configurations, their QPS ratio and instance split."""
    require_int("num_devices", device_budget, 2, None)
    prefill = optimize_disagg_prefill(
        data,
        prefill_layouts,
        prefill_serving_for,
        prefill_deployment,
        serving_overhead_ms=serving_overhead_ms,
        max_batch_size=max_batch_size,
    )
    decode = optimize_disagg_decode(
        data, decode_layouts, decode_serving_for, decode_deployment, max_batch_size=max_batch_size
    )
    p_best, p_qps = _best_prefill(prefill)
    d_best, d_qps = _best_decode(decode, data.output_length)
    if p_best is None or d_best is None:
        side = "prefill" if p_best is None else "decode"
        return _infeasible(prefill, decode, f"no feasible {side} configuration")
    split = split_instances(
        p_qps,
        d_qps,
        p_best.layout.num_devices,
        d_best.layout.num_devices,
        device_budget,
    )
    throughput = split.balanced_qps * data.output_length if split else 0.0
    return PdRatioResult(
        prefill=prefill,
        decode=decode,
        prefill_row=make_row(data, prefill_deployment, p_best, {}, "input"),
        decode_row=make_row(data, decode_deployment, d_best, {}, "output"),
        p_qps=p_qps,
        d_qps=d_qps,
        pd_ratio=d_qps / p_qps,
        split=split,
        throughput_tokens_s=throughput,
        throughput_per_device=throughput / split.devices_used if split else 0.0,
        reason=None
        if split
        else f"num_devices={device_budget} cannot hold one prefill and one decode instance",
        binding_pool=binding_side(split, p_qps, d_qps) if split else None,
    )
