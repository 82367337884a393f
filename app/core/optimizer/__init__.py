"""Throughput optimizers: aggregated, disaggregated prefill/decode, and the P:D ratio."""

from app.core.optimizer.agg import optimize_agg
from app.core.optimizer.common import (
    DEFAULT_MAX_BATCH_SIZE,
    Deployment,
    MemoLatency,
    OptimizeResult,
    Probe,
    ResultRow,
    ServingFactory,
    enumerate_layouts,
    limit_margin,
    search_batch_sizes,
)
from app.core.optimizer.disagg import (
    PrefillWavesResult,
    optimize_disagg_decode,
    optimize_disagg_prefill,
    prefill_chunk_waves,
)
from app.core.optimizer.pareto import ParetoPoint, pareto_front
from app.core.optimizer.pd_ratio import (
    InstanceSplit,
    PdRatioResult,
    decode_qps,
    optimize_pd_ratio,
    prefill_qps,
    split_instances,
)

__all__ = [
    "DEFAULT_MAX_BATCH_SIZE",
    "Deployment",
    "InstanceSplit",
    "MemoLatency",
    "OptimizeResult",
    "ParetoPoint",
    "PdRatioResult",
    "PrefillWavesResult",
    "Probe",
    "ResultRow",
    "ServingFactory",
    "decode_qps",
    "enumerate_layouts",
    "limit_margin",
    "optimize_agg",
    "optimize_disagg_decode",
    "optimize_disagg_prefill",
    "optimize_pd_ratio",
    "pareto_front",
    "prefill_chunk_waves",
    "prefill_qps",
    "search_batch_sizes",
    "split_instances",
]
