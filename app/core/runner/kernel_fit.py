"""Kernel efficiencies fitted to measured kernels (``data/kernel_fit.json``), read with json.

The file is written by ``python -m scripts.fit_kernels`` from NVIDIA AIConfigurator's measured
kernel tables (``aiconfigurator-core``, Apache-2.0; ``NOTICE``, ``docs/kernels.md``), on the train
split only. Per (catalog device, engine, GEMM quantization) it holds the terms of the runner's own
GEMM roofline, as shape-dependent curves rather than latencies::

    time = max(flops / (peak_flops * compute_efficiency(M, K x N)),
               hbm_bytes / (peak_bw * memory_eff(K x N))) + fixed_us

``compute_efficiency(M, K x N)`` is bilinear in ``log2(M)`` and ``log2(K x N)`` between the
``m_knots`` and ``nk_knots`` (clamped outside them): the tile-occupancy ramp of a GEMM as the
token count and the weight (the output tiles) grow. ``memory_eff(K x N)`` is the share of the
HBM peak the weight stream reaches (a small weight does not fill the memory pipes), linear in
``log2(K x N)``; ``fixed_us`` the kernel's floor (prologue, epilogue, a wave's minimum; it
stands in for the captured-graph launch cost).

The compute term also pays **wave quantization**: the ``ceil(M / tile_rows) x ceil(N /
tile_cols)`` output tiles run in waves of one tile per SM (the device's ``sm_count``,
:func:`app.core.catalog.device_table.sm_count`), so a last, partial wave leaves SMs idle. The
wave efficiency ``tiles / (ceil(tiles / SMs) x SMs)`` divides the compute rate for the fitted
``wave_share`` of the work (the rest is spread over the idle SMs by split-K, stream-K or a
smaller tile the engine picks for that shape)::

    compute_s = flops / (peak_flops * compute_efficiency(M, K x N))
                * ((1 - wave_share) + wave_share / wave_efficiency(M, N))

Both rates then take the **shape efficiency** ``shape_efficiency(M, N, K)``
(:class:`ShapeEfficiency`): a table over ``log2(M)``, ``log2(N)`` and ``log2(K)`` (knots a
factor of two apart), trilinear in the log of the factor, that holds what the smooth curve
cannot: the tile, split-K and kernel choices the engines make per N and K (cuBLAS heuristics,
CUTLASS configurations by N and K band, DeepGEMM's block sizes), which the ``K x N`` product
merges. Each rate stays at or below its peak (``compute_efficiency x shape_efficiency <= 1``,
``memory_eff x shape_efficiency <= 1``)::

    time = max(compute_s, memory_s) / shape_efficiency(M, N, K) + fixed_us

A device, engine or quantization the file has no curve for keeps the runner's physics-derived
defaults (:mod:`app.core.runner.plan`); every op says which priced it (``OpCost.source``). A
missing or malformed file raises :class:`~app.core.runner.fit_tables.KernelFitError` on first
use, never a silent default.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import Any, cast

from app.core.catalog.device_table import sm_count
from app.core.catalog.quantization import LinearQuantAction, Quantization
from app.core.runner.fit_tables import (
    POSITION_MEMO_LIMIT,
    KernelFitError,
    add_curve,
    check_knots,
    document_entries,
    memo_position,
    number,
    number_rows,
    numbers,
    position,
    read_fit_json,
    string_key,
)

KERNEL_FIT_PATH = Path(__file__).resolve().parent / "data" / "kernel_fit.json"
KERNEL_FIT_FORMAT = "chunkwise-kernel-fit/3"
#: ``OpCost.source`` of an op priced by the physics-derived defaults.
DEFAULT_SOURCE = "default"
FITTED_SOURCE_PREFIX = "fitted:"
#: The 16-bit GEMM's table label (the path of unquantized and 16-bit-kept layers).
GEMM_16BIT = "bfloat16"
S_PER_US = 1e-6

#: Runner linear action -> the measured GEMM table's ``gemm_dtype``. FP8 is split by the
#: checkpoint: a DeepSeek-style ``quant_method: fp8`` config (``native_linear`` FP8) carries
#: 128 x 128 block scales (``fp8_block``), any other FP8 run per-tensor scales (``fp8``).
#: W8A8 runs the SmoothQuant INT8 kernels (``sq``); MXFP4 and W4A8 have no measured GEMM table.
_GEMM_LABELS: Mapping[LinearQuantAction, str] = {
    LinearQuantAction.DISABLED: GEMM_16BIT,
    LinearQuantAction.FP8: "fp8",
    LinearQuantAction.W8A16_STATIC: "int8_wo",
    LinearQuantAction.W8A16_DYNAMIC: "int8_wo",
    LinearQuantAction.W4A16: "int4_wo",
    LinearQuantAction.W8A8_STATIC: "sq",
    LinearQuantAction.W8A8_DYNAMIC: "sq",
    LinearQuantAction.NVFP4: "nvfp4",
}
FP8_BLOCK = "fp8_block"

#: The floor (µs) of one measured kernel inside a served decode forward that the engine replays
#: as one captured CUDA graph, per kernel engine: it replaces the kernel's fitted ``fixed_us``
#: there (docs/kernels.md, "In-graph floors"). A fitted floor is what the collectors timed for
#: one op on its own: besides the kernel's launch and ramp it holds the op's other kernels and
#: host work that a served forward does not repeat per op (an unfused activation quantization,
#: per-call scale layouts, attention metadata). Inside the served graph each kernel pays its
#: graph node: the NVIDIA stack's captured-graph kernel cost (``graph_kernel_launch_us``, 3 µs;
#: the collectors' smallest graph-replayed BF16 GEMMs take 1.7-2.5 µs, H100 to B200). Equal for
#: the three engines: each replays decode as CUDA graphs with the same kernel-node launch, and
#: programmatic dependent launch (TensorRT-LLM's default on SM90+, ``TRTLLM_ENABLE_PDL``) was on
#: in its collector too, so it is already inside the measured floors it would lower.
IN_GRAPH_FLOOR_US: Mapping[str, float] = {"trtllm": 3.0, "vllm": 3.0, "sglang": 3.0}
#: The vendor whose engines replay decode as CUDA graphs (the floors above are theirs).
CUDA_GRAPH_VENDOR = "nvidia"


def in_graph_floor_s(engine: str | None, vendor: str) -> float | None:
    """A measured kernel's floor (s) inside ``engine``'s served captured graphs on a ``vendor``
    device (None: no in-graph floor, the fitted floors stand)."""
    if engine is None or vendor != CUDA_GRAPH_VENDOR:
        return None
    floor_us = IN_GRAPH_FLOOR_US.get(engine)
    return None if floor_us is None else floor_us * S_PER_US


def gemm_label(quantization: Quantization, native_linear: str | None) -> str | None:
    """The measured GEMM table a run's quantized GEMMs are priced from (None: no table)."""
    action = quantization.linear
    if action is LinearQuantAction.FP8 and native_linear == LinearQuantAction.FP8.value:
        return FP8_BLOCK
    return _GEMM_LABELS.get(action)


@dataclass(frozen=True, slots=True, kw_only=True)
class ShapeEfficiency:
    """A GEMM curve's shape efficiency (module doc): a factor on both rates per (M, N, K),
    trilinear in ``log2`` of each between its knots (clamped outside them) and in the log of
    the factor (a geometric mean of the eight corners, as the fit solved it)."""

    m_knots: tuple[float, ...]
    n_knots: tuple[float, ...]
    k_knots: tuple[float, ...]
    #: The factors, flat in [m][n][k] order (each > 0).
    efficiency: tuple[float, ...]
    #: Per (N, K) seen: the log factor at each M knot (bilinear in N and K; a forward asks for
    #: the same few weights at many token counts), and per M its knot interval and share.
    _by_nk: dict[tuple[float, float], tuple[float, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _by_m: dict[float, tuple[int, float]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        for name in ("m_knots", "n_knots", "k_knots"):
            check_knots(f"shape {name}", getattr(self, name))
        size = len(self.m_knots) * len(self.n_knots) * len(self.k_knots)
        if len(self.efficiency) != size:
            raise ValueError("shape_efficiency needs one value per (m, n, k) knot")
        if not (all(map(math.isfinite, self.efficiency)) and min(self.efficiency) > 0):
            raise ValueError("shape_efficiency values must be numbers > 0")

    def _column(self, n: float, k: float) -> tuple[float, ...]:
        """The log factor at each M knot for an ``n x k`` weight (bilinear in log2 N, K)."""
        j, u = position(n, self.n_knots)
        h, v = position(k, self.k_knots)
        nn, nk, values = len(self.n_knots), len(self.k_knots), self.efficiency
        column = []
        for a in range(len(self.m_knots)):
            total = 0.0
            for b, wb in ((j, 1 - u), (j + 1, u)):
                row = (a * nn + b) * nk + h
                total += wb * ((1 - v) * math.log(values[row]) + v * math.log(values[row + 1]))
            column.append(total)
        return tuple(column)

    def at(self, m: float, n: float, k: float) -> float:
        """The factor of an ``m x k`` times ``k x n`` GEMM."""
        column = self._by_nk.get((n, k))
        if column is None:
            if len(self._by_nk) >= POSITION_MEMO_LIMIT:
                self._by_nk.clear()
            column = self._by_nk[(n, k)] = self._column(n, k)
        i, t = memo_position(self._by_m, m, self.m_knots)
        return math.exp((1 - t) * column[i] + t * column[i + 1])


@dataclass(frozen=True, slots=True, kw_only=True)
class GemmCurve:
    """One (device, engine, quantization)'s fitted GEMM terms (see the module doc): the
    compute efficiency per (M knot, K x N knot), the memory efficiency per K x N knot."""

    m_knots: tuple[float, ...]
    nk_knots: tuple[float, ...]
    compute_efficiency: tuple[tuple[float, ...], ...]  # [m knot][nk knot]
    memory_efficiency: tuple[float, ...]  # [nk knot]
    fixed_us: float
    #: The wave term (module doc): the output tile per SM, rows x columns, and the share of
    #: the compute that waits for the last partial wave (0: no wave term, as the MoE curves).
    tile_rows: float = 128.0
    tile_cols: float = 128.0
    wave_share: float = 0.0
    #: The shape efficiency on both rates (module doc; None: none, as the MoE curves).
    shape: ShapeEfficiency | None = None
    #: Per weight size seen: its nk interval, share and memory efficiency (a forward asks for
    #: the same few weights again and again; not part of the curve's value).
    _by_nk: dict[float, tuple[int, float, float]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _by_m: dict[float, tuple[int, float]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        check_knots("m_knots", self.m_knots)
        check_knots("nk_knots", self.nk_knots)
        rows = self.compute_efficiency
        if len(rows) != len(self.m_knots) or any(len(r) != len(self.nk_knots) for r in rows):
            raise ValueError("compute_efficiency needs one row per m knot, one value per nk knot")
        if len(self.memory_efficiency) != len(self.nk_knots):
            raise ValueError("memory_efficiency needs one value per nk knot")
        if not all(0 < e <= 1 for e in (*(e for r in rows for e in r), *self.memory_efficiency)):
            raise ValueError("efficiencies must lie in (0, 1]")
        if not (math.isfinite(self.fixed_us) and self.fixed_us >= 0):
            raise ValueError("fixed_us must be a number >= 0")
        if not all(math.isfinite(t) and t >= 1 for t in (self.tile_rows, self.tile_cols)):
            raise ValueError("tile_rows and tile_cols must be numbers >= 1")
        if not 0 <= self.wave_share <= 1:
            raise ValueError("wave_share must lie in [0, 1]")

    def _nk_terms(self, nk: float) -> tuple[int, float, float]:
        """``nk``'s knot interval and share, and the memory efficiency there (remembered)."""
        found = self._by_nk.get(nk)
        if found is None:
            j, u = position(nk, self.nk_knots)
            memory = (1 - u) * self.memory_efficiency[j] + u * self.memory_efficiency[j + 1]
            found = self._by_nk[nk] = (j, u, memory)
        return found

    def compute_efficiency_at(self, m: float, nk: float) -> float:
        """The compute efficiency at ``m`` rows of a ``nk``-element weight (bilinear in
        ``log2``)."""
        i, t = memo_position(self._by_m, m, self.m_knots)
        j, u, _ = self._nk_terms(nk)
        low, high = self.compute_efficiency[i], self.compute_efficiency[i + 1]
        return (1 - t) * ((1 - u) * low[j] + u * low[j + 1]) + t * (
            (1 - u) * high[j] + u * high[j + 1]
        )

    def memory_efficiency_at(self, nk: float) -> float:
        """The memory efficiency of a ``nk``-element weight (linear in ``log2``)."""
        return self._nk_terms(nk)[2]

    def wave_factor(self, m: float, n: float, sms: int | None) -> float:
        """The share of the compute rate left after wave quantization of an ``m x n`` output
        on ``sms`` SMs (1: no wave term, or no SM count)."""
        share = self.wave_share
        if share == 0 or sms is None:
            return 1.0
        tiles = math.ceil(m / self.tile_rows) * math.ceil(n / self.tile_cols)
        if tiles <= 0:
            return 1.0
        efficiency = tiles / (math.ceil(tiles / sms) * sms)
        return 1.0 / ((1 - share) + share / efficiency)


@dataclass(frozen=True, slots=True, kw_only=True)
class FittedGemm:
    """A fitted curve on one plan's path: absolute peaks, resolved once in the plan."""

    curve: GemmCurve
    peak_flops_per_s: float
    peak_hbm_bytes_per_s: float
    fixed_s: float
    #: The floor inside a served captured graph (:data:`IN_GRAPH_FLOOR_US`; ``fixed_s`` where
    #: the kernel is priced as measured).
    graph_fixed_s: float
    source: str  # ``fitted:<engine>``
    #: The device's SMs (the wave term; None: the curve has none).
    sm_count: int | None = None

    def rates(self, m: float, k: float, n: float) -> tuple[float, float]:
        """The compute (flops/s) and HBM (bytes/s) rates of ``m x k`` times ``k x n``: the
        curve's compute efficiency at ``m`` and ``k x n`` times the wave factor of the
        ``m x n`` output, its memory efficiency at ``k x n``, both times the shape efficiency
        (each efficiency capped at 1 first)."""
        curve = self.curve
        compute = curve.compute_efficiency_at(m, k * n)
        memory = curve.memory_efficiency_at(k * n)
        if curve.shape is not None:
            factor = curve.shape.at(m, n, k)
            compute, memory = min(1.0, compute * factor), min(1.0, memory * factor)
        return (
            self.peak_flops_per_s * compute * curve.wave_factor(m, n, self.sm_count),
            self.peak_hbm_bytes_per_s * memory,
        )


#: (device name, engine, GEMM label).
GemmKey = tuple[str, str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelFit:
    """The whole fitted table: GEMM curves by (device name, engine, GEMM label)."""

    gemm: Mapping[GemmKey, GemmCurve]
    source: Mapping[str, Any]

    def gemm_curve(self, device: str, engine: str, label: str) -> GemmCurve | None:
        return self.gemm.get((device, engine, label))


def gemm_curve_of(
    entry: Mapping[str, Any],
    key: object,
    *,
    m_knots: str = "m_knots",
    nk_knots: str = "nk_knots",
    wave: bool = False,
) -> GemmCurve:
    """The :class:`GemmCurve` of a table entry (its knots under the names given, then
    ``compute_efficiency``, ``memory_efficiency``, ``fixed_us``, and with ``wave`` the wave
    term's ``tile_rows``, ``tile_cols``, ``wave_share`` and the shape efficiency's
    ``shape_m_knots``, ``shape_n_knots``, ``shape_k_knots``, ``shape_efficiency``); a
    ValueError when its numbers do not make a curve."""
    table = number_rows(entry, "compute_efficiency", key, "kernel fit")
    waves: dict[str, Any] = (
        {name: number(entry, name) for name in ("tile_rows", "tile_cols", "wave_share")}
        if wave
        else {}
    )
    if wave:
        waves["shape"] = _shape_of(entry, key)
    return GemmCurve(
        m_knots=numbers(entry, m_knots),
        nk_knots=numbers(entry, nk_knots),
        compute_efficiency=table,
        memory_efficiency=numbers(entry, "memory_efficiency"),
        fixed_us=number(entry, "fixed_us"),
        **waves,
    )


def _shape_of(entry: Mapping[str, Any], key: object) -> ShapeEfficiency:
    """The shape efficiency of a GEMM entry: ``shape_efficiency`` nested [m][n][k] (checked in
    one pass over its values: a table holds thousands)."""
    planes = entry.get("shape_efficiency")
    m_knots, n_knots, k_knots = (numbers(entry, f"shape_{axis}_knots") for axis in ("m", "n", "k"))
    if not (
        isinstance(planes, list)
        and len(planes) == len(m_knots)
        and all(isinstance(p, list) and len(p) == len(n_knots) for p in planes)
        and all(isinstance(r, list) and len(r) == len(k_knots) for p in planes for r in p)
    ):
        raise KernelFitError(f"kernel fit: 'shape_efficiency' is not [m][n][k] knots in {key}")
    flat = [v for p in planes for r in p for v in r]
    if not set(map(type, flat)) <= {float, int}:
        raise KernelFitError(f"kernel fit: 'shape_efficiency' holds a non-number in {key}")
    return ShapeEfficiency(
        m_knots=m_knots, n_knots=n_knots, k_knots=k_knots, efficiency=tuple(map(float, flat))
    )


def parse_kernel_fit(body: Any) -> KernelFit:
    """A :class:`KernelFit` from the decoded json (raises :class:`KernelFitError`)."""
    what = "kernel fit"
    source, entries = document_entries(body, what=what, document=KERNEL_FIT_FORMAT, entries="gemm")
    curves: dict[tuple[str, str, str], GemmCurve] = {}
    for entry in entries:
        key = cast(GemmKey, string_key(entry, ("device", "engine", "quantization"), what))
        add_curve(curves, key, partial(gemm_curve_of, wave=True), entry, what)
    return KernelFit(gemm=curves, source=source)


def load_kernel_fit(path: Path = KERNEL_FIT_PATH) -> KernelFit:
    """Read and check the fitted table at ``path`` (raises :class:`KernelFitError`)."""
    return parse_kernel_fit(read_fit_json(path, "kernel fit"))


@cache
def kernel_fit() -> KernelFit:
    """The packaged table, read once on first use."""
    return load_kernel_fit()


def fitted_gemm(
    *,
    device: str,
    engine: str | None,
    label: str | None,
    peak_flops_per_s: float,
    peak_hbm_bytes_per_s: float,
    graph_launch_s: float,
    in_graph_s: float | None = None,
    fixed_cap_s: float | None = None,
) -> FittedGemm | None:
    """The fitted GEMM of ``engine``'s ``label`` kernels on ``device`` (None: the defaults).

    The fitted floor never undercuts the captured-graph launch cost it stands in for, nor
    exceeds ``fixed_cap_s`` (a served quantized GEMM: its 16-bit twin's floor, the activation
    quantization being fused upstream); ``in_graph_s``: its floor inside a served captured
    graph (None: the fitted floor there too)."""
    if engine is None or label is None:
        return None
    curve = kernel_fit().gemm_curve(device, engine, label)
    if curve is None:
        return None
    sms = sm_count(device)
    if curve.wave_share > 0 and sms is None:
        raise KernelFitError(f"kernel fit: a wave term on {device}, which has no SM count")
    fixed_s = max(curve.fixed_us * S_PER_US, graph_launch_s)
    if fixed_cap_s is not None:
        fixed_s = min(fixed_s, fixed_cap_s)
    return FittedGemm(
        curve=curve,
        peak_flops_per_s=peak_flops_per_s,
        peak_hbm_bytes_per_s=peak_hbm_bytes_per_s,
        fixed_s=fixed_s,
        graph_fixed_s=fixed_s if in_graph_s is None else in_graph_s,
        source=FITTED_SOURCE_PREFIX + engine,
        sm_count=sms,
    )
