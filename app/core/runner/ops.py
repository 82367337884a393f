"""Per-operator cost: roofline time, launch cost, and the bound that dominated.

Every op of a forward becomes one :class:`OpCost` whose terms are all visible:
``time = max(flops / rate, hbm_bytes / bandwidth, comm_time) + launch`` per instance, and
``total_ms = count * time_ms`` (identical layers are costed once and multiplied).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from app.core.runner.kernel_fit import DEFAULT_SOURCE

MS_PER_S = 1e3


class OpCategory(enum.StrEnum):
    GEMM = "gemm"
    ATTENTION = "attention"
    MOE = "moe"
    COMMUNICATION = "communication"
    ELEMENTWISE = "elementwise"
    LM_HEAD = "lm_head"
    OVERHEAD = "overhead"


class Bound(enum.StrEnum):
    COMPUTE = "compute"
    MEMORY = "memory"
    COMMUNICATION = "communication"
    OVERHEAD = "overhead"


@dataclass(frozen=True, slots=True, kw_only=True)
class OpCost:
    """One operator, costed per instance; ``count`` instances run per forward."""

    name: str
    category: OpCategory
    scope: str
    count: int
    flops: float
    hbm_bytes: float
    comm_bytes: float
    compute_ms: float
    memory_ms: float
    comm_ms: float
    launch_ms: float
    time_ms: float
    total_ms: float
    bound: Bound
    #: What priced it: ``default`` (the physics-derived rates) or ``fitted:<engine>`` (the
    #: engine's measured-kernel curves, :mod:`app.core.runner.kernel_fit`).
    source: str = DEFAULT_SOURCE

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "category": self.category.value,
            "scope": self.scope,
            "count": self.count,
            "flops": self.flops,
            "hbm_bytes": self.hbm_bytes,
            "comm_bytes": self.comm_bytes,
            "compute_ms": self.compute_ms,
            "memory_ms": self.memory_ms,
            "comm_ms": self.comm_ms,
            "launch_ms": self.launch_ms,
            "time_ms": self.time_ms,
            "total_ms": self.total_ms,
            "bound": self.bound.value,
            "source": self.source,
        }


def roofline_ms(
    flops: float, hbm_bytes: float, flops_per_s: float, hbm_bytes_per_s: float, launch_s: float
) -> float:
    """One instance's time (ms) of :func:`roofline`, alone."""
    compute_s = flops / flops_per_s
    memory_s = hbm_bytes / hbm_bytes_per_s
    return ((compute_s if compute_s >= memory_s else memory_s) + launch_s) * MS_PER_S


def roofline(
    *,
    name: str,
    category: OpCategory,
    scope: str,
    count: int,
    flops: float,
    hbm_bytes: float,
    flops_per_s: float,
    hbm_bytes_per_s: float,
    launch_s: float,
    source: str = DEFAULT_SOURCE,
) -> OpCost:
    """A compute op: ``max(flops / flops_per_s, hbm_bytes / hbm_bytes_per_s) + launch_s``."""
    compute_s = flops / flops_per_s
    memory_s = hbm_bytes / hbm_bytes_per_s
    body_s = compute_s if compute_s >= memory_s else memory_s
    time_ms = roofline_ms(flops, hbm_bytes, flops_per_s, hbm_bytes_per_s, launch_s)
    if launch_s > body_s:
        bound = Bound.OVERHEAD
    elif compute_s >= memory_s:
        bound = Bound.COMPUTE
    else:
        bound = Bound.MEMORY
    return OpCost(
        name=name,
        category=category,
        scope=scope,
        count=count,
        flops=flops,
        hbm_bytes=hbm_bytes,
        comm_bytes=0.0,
        compute_ms=compute_s * MS_PER_S,
        memory_ms=memory_s * MS_PER_S,
        comm_ms=0.0,
        launch_ms=launch_s * MS_PER_S,
        time_ms=time_ms,
        total_ms=time_ms * count,
        bound=bound,
        source=source,
    )


def communication_ms(comm_s: float, launch_s: float) -> float:
    """One instance's time (ms) of :func:`communication`, alone."""
    return (comm_s + launch_s) * MS_PER_S


def communication(
    *,
    name: str,
    scope: str,
    count: int,
    comm_bytes: float,
    comm_s: float,
    launch_s: float,
    source: str = DEFAULT_SOURCE,
) -> OpCost:
    """A collective whose time ``comm_s`` the interconnect model computed."""
    time_ms = communication_ms(comm_s, launch_s)
    return OpCost(
        name=name,
        category=OpCategory.COMMUNICATION,
        scope=scope,
        count=count,
        flops=0.0,
        hbm_bytes=0.0,
        comm_bytes=comm_bytes,
        compute_ms=0.0,
        memory_ms=0.0,
        comm_ms=comm_s * MS_PER_S,
        launch_ms=launch_s * MS_PER_S,
        time_ms=time_ms,
        total_ms=time_ms * count,
        bound=Bound.COMMUNICATION if comm_s >= launch_s else Bound.OVERHEAD,
        source=source,
    )


def fixed(*, name: str, scope: str, time_s: float) -> OpCost:
    """A fixed per-forward cost (host scheduling, sampling sync)."""
    time_ms = time_s * MS_PER_S
    return OpCost(
        name=name,
        category=OpCategory.OVERHEAD,
        scope=scope,
        count=1,
        flops=0.0,
        hbm_bytes=0.0,
        comm_bytes=0.0,
        compute_ms=0.0,
        memory_ms=0.0,
        comm_ms=0.0,
        launch_ms=time_ms,
        time_ms=time_ms,
        total_ms=time_ms,
        bound=Bound.OVERHEAD,
    )
