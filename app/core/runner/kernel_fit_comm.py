"""Collective latencies fitted to measured kernels (``data/kernel_fit_comm.json``).

Written by ``python -m scripts.fit_kernels_moe`` from NVIDIA AIConfigurator's measured
``nccl_perf`` and ``custom_allreduce_perf`` tables (``aiconfigurator-core``, Apache-2.0;
``NOTICE``, ``docs/kernels.md``), on the train split only. Per (catalog device, library, engine,
collective, number of GPUs, launch mode) an alpha-beta curve::

    time = latency_us + message_bytes / bandwidth(message_bytes)

``message_bytes`` is the buffer one device holds (the runner's collective argument);
``bandwidth`` the algorithm bandwidth (bytes of that buffer per second) at the
``message_knots``, linear in ``log2`` of the message between them (clamped): small messages
never fill the links (protocol and synchronisation costs per chunk), large ones reach the
links' sustained rate. The latency term holds the kernel's launch and the ranks' handshakes.

``library`` is ``nccl`` (NCCL's collectives, pooled over the engine folders that measured them)
or ``custom`` (the engine's own all-reduce: TensorRT-LLM's, vLLM's and SGLang's custom
all-reduce kernels, per ``engine``); ``mode`` is ``graph`` or ``eager`` (how the collector
launched it). A run with a kernel engine prices an all-reduce with its engine's custom kernel
where measured, else with NCCL, and every other collective with NCCL; a group larger than one
node, or a GPU count without a curve, keeps the tier model (:mod:`app.core.runner.comm`).
A missing or malformed file raises :class:`~app.core.runner.fit_tables.KernelFitError`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, cast

from app.core.catalog.hardware import BYTES_PER_GB
from app.core.runner.comm import Collective
from app.core.runner.fit_tables import (
    KernelFitError,
    add_curve,
    check_knots,
    document_entries,
    memo_position,
    number,
    numbers,
    read_fit_json,
)
from app.core.runner.kernel_fit import FITTED_SOURCE_PREFIX, S_PER_US

KERNEL_FIT_COMM_PATH = Path(__file__).resolve().parent / "data" / "kernel_fit_comm.json"
KERNEL_FIT_COMM_FORMAT = "chunkwise-kernel-fit-comm/1"
NCCL = "nccl"
CUSTOM = "custom"
LIBRARIES = (NCCL, CUSTOM)
GRAPH = "graph"
EAGER = "eager"
MODES = (GRAPH, EAGER)
#: ``engine`` of the pooled NCCL curves (and the ``validate --kernels`` engine of NCCL tables).
NCCL_ENGINE = NCCL


@dataclass(frozen=True, slots=True, kw_only=True)
class CommCurve:
    """One collective's fitted alpha-beta curve (see the module doc)."""

    message_knots: tuple[float, ...]  # bytes
    bandwidth_gb_s: tuple[float, ...]  # algorithm bandwidth at each knot
    latency_us: float
    #: Knot positions already found (not part of the curve's value).
    _by_message: dict[float, tuple[int, float]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        check_knots("message_knots", self.message_knots)
        if len(self.bandwidth_gb_s) != len(self.message_knots):
            raise ValueError("bandwidth_gb_s needs one value per message knot")
        if not all(math.isfinite(b) and b > 0 for b in self.bandwidth_gb_s):
            raise ValueError("bandwidths must be positive")
        if not (math.isfinite(self.latency_us) and self.latency_us >= 0):
            raise ValueError("latency_us must be a number >= 0")

    def time_s(self, message_bytes: float) -> float:
        j, u = memo_position(self._by_message, message_bytes, self.message_knots)
        bandwidth = (1 - u) * self.bandwidth_gb_s[j] + u * self.bandwidth_gb_s[j + 1]
        return self.latency_us * S_PER_US + message_bytes / (bandwidth * BYTES_PER_GB)


@dataclass(frozen=True, slots=True, kw_only=True)
class FittedCollective:
    curve: CommCurve
    source: str  # ``fitted:<engine>`` (the engine's custom kernel) or ``fitted:nccl``


#: (device, library, engine, op, num_gpus, mode) -> curve.
CommKey = tuple[str, str, str, str, int, str]


def _comm_curve(entry: Mapping[str, Any], key: object) -> CommCurve:
    return CommCurve(
        message_knots=numbers(entry, "message_knots"),
        bandwidth_gb_s=numbers(entry, "bandwidth_gb_s"),
        latency_us=number(entry, "latency_us"),
    )


def parse_kernel_fit_comm(body: Any) -> Mapping[CommKey, CommCurve]:
    """The curves of the decoded json (raises :class:`KernelFitError`)."""
    what = "kernel fit"
    _, entries = document_entries(
        body, what=what, document=KERNEL_FIT_COMM_FORMAT, entries="collectives"
    )
    ops = {c.value for c in Collective}
    curves: dict[CommKey, CommCurve] = {}
    for entry in entries:
        names = (entry.get(name) for name in ("device", "library", "engine", "op", "mode"))
        device, library, engine, op, mode = names
        gpus = entry.get("num_gpus")
        key = (device, library, engine, op, gpus, mode)
        if not (
            isinstance(device, str)
            and device
            and library in LIBRARIES
            and isinstance(engine, str)
            and engine
            and op in ops
            and mode in MODES
            and isinstance(gpus, int)
            and not isinstance(gpus, bool)
            and gpus >= 2
        ):
            raise KernelFitError(f"kernel fit: a collective entry with a bad key: {key}")
        add_curve(curves, cast(CommKey, key), _comm_curve, entry, what)
    return curves


def load_kernel_fit_comm(path: Path = KERNEL_FIT_COMM_PATH) -> Mapping[CommKey, CommCurve]:
    """Read and check the fitted collectives at ``path`` (raises :class:`KernelFitError`)."""
    return parse_kernel_fit_comm(read_fit_json(path, "collective fit"))


@cache
def kernel_fit_comm() -> Mapping[CommKey, CommCurve]:
    """The packaged table, read once on first use."""
    return load_kernel_fit_comm()


@dataclass(frozen=True, slots=True, kw_only=True)
class FittedComm:
    """The collectives one plan prices with fitted curves: by (collective, GPUs, graph mode)."""

    curves: Mapping[tuple[Collective, int, bool], FittedCollective]

    def get(self, kind: Collective, gpus: int, graph: bool) -> FittedCollective | None:
        return self.curves.get((kind, gpus, graph)) or self.curves.get((kind, gpus, not graph))


@cache
def _measured_engines() -> frozenset[str]:
    """The engines with a custom all-reduce curve on some device, and NCCL."""
    return frozenset({NCCL_ENGINE} | {key[2] for key in kernel_fit_comm() if key[1] == CUSTOM})


#: Pairs (device, engine) whose chosen collectives a process keeps: every built-in device with
#: every engine (25 x a few); a custom device's name is the client's, so the memo is bounded.
FITTED_COMM_MEMO = 256


@lru_cache(maxsize=FITTED_COMM_MEMO)
def fitted_comm(device: str, engine: str | None) -> FittedComm | None:
    """The collectives ``engine`` runs on ``device`` with a fitted curve (None: none).

    An all-reduce takes the engine's custom kernel where measured, else NCCL's; the other
    collectives NCCL's. ``engine`` :data:`NCCL_ENGINE` prices every collective with NCCL; an
    engine without a custom all-reduce curve on any device gets none."""
    if engine is None or engine not in _measured_engines():
        return None  # an engine the wheel never measured (its NCCL use is unknown)
    chosen: dict[tuple[Collective, int, bool], FittedCollective] = {}
    for (dev, library, curve_engine, op, gpus, mode), curve in kernel_fit_comm().items():
        if dev != device:
            continue
        kind = Collective(op)
        slot = (kind, gpus, mode == GRAPH)
        if library == CUSTOM and curve_engine == engine and kind is Collective.ALL_REDUCE:
            chosen[slot] = FittedCollective(curve=curve, source=FITTED_SOURCE_PREFIX + engine)
        elif library == NCCL and slot not in chosen:
            chosen[slot] = FittedCollective(curve=curve, source=FITTED_SOURCE_PREFIX + NCCL)
    return FittedComm(curves=chosen) if chosen else None
