"""Attention kernel terms fitted to measured kernels (``data/kernel_fit_attention.json``).

The file is written by ``python -m scripts.fit_kernels_attention`` from NVIDIA AIConfigurator's
measured attention tables (``aiconfigurator-core``, Apache-2.0; ``NOTICE``, ``docs/kernels.md``),
on the train split only. Per (catalog device, engine, attention family, dtype label) it holds the
terms of one attention kernel's time, as shape-dependent curves rather than latencies::

    time = max(flops / (peak_flops * compute_eff(rows, context) * head_factor(head_dim)),
               hbm_bytes / (peak_bw * memory_eff(rows, context) * head_factor(head_dim)),
               rows * row_ns) + fixed_us

The flops and bytes are the runner's own (``ForwardBuilder.gqa_attention_kernel`` and
``mla_attention_kernel``). ``rows`` is the kernel's query rows (new tokens x local query heads:
its parallel work), ``context`` the KV positions one request reads. ``compute_eff`` and
``memory_eff`` are bilinear in ``log2(rows)`` and ``log2(context)`` between the knots (clamped
outside them), each knot free in (0, 1]. The attention tables are not held non-decreasing: the
engines switch kernels and tile shapes with the shape (H100 TensorRT-LLM FP8 prefill reaches a
higher share of the runner's flops at 128-256 positions than at 1-2k), and a running maximum
along both axes priced those bands 20-37 % slow and the 1-2k band 12-15 % fast (held out);
freed, 12.5 -> 7.2 %. The Gated DeltaNet and DSA tables in this form stay non-decreasing (their
loader refuses a table that decreases). ``head_factor`` (``head_dim_factor`` at the
``head_dim_knots``, every head width the tables measure, linear in ``log2`` between them) is the
share of both rates a head width reaches: the engines pick their kernel by head width (FA3,
Triton or FlashInfer in one engine's table), so it is a per-width level. ``row_ns`` is the
per-query-row floor (softmax state, output write, scheduling of each (request, head)): it sets a
decode at a short context, where neither the matrix work nor the KV stream does. ``fixed_us`` is
the kernel's floor.

GQA curves (``context_attention`` / ``generation_attention``) also carry two levels per query
group (query heads per KV head, ``group_knots``, linear in ``log2`` between them):
``group_factor``, the share of both rates a group size reaches (it multiplies ``head_factor``),
and ``group_row_factor``, which scales ``row_ns``. The engines' decode kernels give one CTA a
(request, KV head) and its group's query rows (TensorRT-LLM's XQA on H100, 2,048 requests at 2
positions: 166 µs at 8 query / 8 KV heads, 595 µs at 32 / 8, 617 µs at 64 / 8, 158 µs at
16 / 2), so a row's cost is not one number across group sizes. Curves without them (MLA, and
the Gated DeltaNet and DSA tables in this form) have one group level of 1.

Families: ``context_attention`` / ``generation_attention`` (GQA / MHA, sliding windows included)
and ``context_mla`` / ``generation_mla`` (DeepSeek MLA, prefill / absorbed decode). Labels are the
measured ``<compute dtype>/kv <KV dtype>`` (:func:`attention_labels`). A device, engine, family or
label without a curve keeps the runner's defaults; every op says which priced it
(``OpCost.source``). A missing or malformed file raises
:class:`~app.core.runner.fit_tables.KernelFitError` on first use, never a silent default.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, cast

from app.core.catalog.quantization import AttentionQuantAction
from app.core.runner.fit_tables import (
    KernelFitError,
    add_curve,
    check_knots,
    document_entries,
    memo_position,
    number,
    number_rows,
    numbers,
    read_fit_json,
    string_key,
)
from app.core.runner.kernel_fit import FITTED_SOURCE_PREFIX, S_PER_US

ATTENTION_FIT_PATH = Path(__file__).resolve().parent / "data" / "kernel_fit_attention.json"
ATTENTION_FIT_FORMAT = "chunkwise-attention-fit/2"
S_PER_NS = 1e-9
CONTEXT_ATTENTION = "context_attention"
GENERATION_ATTENTION = "generation_attention"
CONTEXT_MLA = "context_mla"
GENERATION_MLA = "generation_mla"
FAMILIES = (CONTEXT_ATTENTION, GENERATION_ATTENTION, CONTEXT_MLA, GENERATION_MLA)
#: One group level of 1 (a curve without group terms).
UNGROUPED_KNOTS = (1.0, 2.0)
UNGROUPED_LEVELS = (1.0, 1.0)
BF16_KV_BF16 = "bfloat16/kv bfloat16"
BF16_KV_FP8 = "bfloat16/kv fp8"
FP8_KV_FP8 = "fp8/kv fp8"

#: Runner attention action -> the measured labels that price it, in order of preference. FP8
#: attention falls back to 16-bit math over an FP8 cache: the engines' decode kernels measured
#: with an FP8 cache (TensorRT-LLM's XQA, FlashInfer) dequantize to 16 bits, and the KV bytes,
#: which set a decode's time, are the same. INT8 (an 8-bit cache read at the 16-bit rate) is
#: the 16-bit kernel over an 8-bit cache.
_LABELS: Mapping[AttentionQuantAction, tuple[str, ...]] = {
    AttentionQuantAction.DISABLED: (BF16_KV_BF16,),
    AttentionQuantAction.FP8: (FP8_KV_FP8, BF16_KV_FP8),
    AttentionQuantAction.INT8: (BF16_KV_FP8,),
}


def attention_labels(action: AttentionQuantAction) -> tuple[str, ...]:
    """The measured labels whose curves may price ``action``'s attention (first found wins)."""
    return _LABELS.get(action, ())


def label_is_fp8_compute(label: str) -> bool:
    """Whether ``label``'s kernel computes in FP8 (its peak is the FP8 one)."""
    return label.startswith("fp8/")


def _monotone(name: str, table: tuple[tuple[float, ...], ...]) -> None:
    rows_ok = all(b >= a for row in table for a, b in itertools.pairwise(row))
    cols_ok = all(b >= a for col in zip(*table, strict=True) for a, b in itertools.pairwise(col))
    if not (rows_ok and cols_ok):
        raise ValueError(f"{name} must not decrease along rows or context")


def _monotone_curve(entry: Mapping[str, Any], key: object) -> AttentionCurve:
    """An ungrouped curve whose efficiencies do not decrease along rows or context (the
    Gated DeltaNet and DSA tables are fitted so)."""
    curve = attention_curve(entry, key)
    _monotone("compute_efficiency", curve.compute_efficiency)
    _monotone("memory_efficiency", curve.memory_efficiency)
    return curve


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionCurve:
    """One (device, engine, family, label)'s fitted attention terms (see the module doc)."""

    row_knots: tuple[float, ...]
    context_knots: tuple[float, ...]
    head_dim_knots: tuple[float, ...]
    compute_efficiency: tuple[tuple[float, ...], ...]  # [row knot][context knot]
    memory_efficiency: tuple[tuple[float, ...], ...]  # [row knot][context knot]
    head_dim_factor: tuple[float, ...]  # [head_dim knot]
    row_ns: float
    fixed_us: float
    #: Query heads per KV head: the levels of both rates and of ``row_ns`` by group size.
    group_knots: tuple[float, ...] = UNGROUPED_KNOTS
    group_factor: tuple[float, ...] = UNGROUPED_LEVELS  # [group knot], in (0, 1]
    group_row_factor: tuple[float, ...] = UNGROUPED_LEVELS  # [group knot], > 0
    #: Knot positions already found, per axis (not part of the curve's value).
    _by_rows: dict[float, tuple[int, float]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _by_context: dict[float, tuple[int, float]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _by_head_dim: dict[float, tuple[int, float]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _by_group: dict[float, tuple[int, float]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        check_knots("row_knots", self.row_knots)
        check_knots("context_knots", self.context_knots)
        check_knots("head_dim_knots", self.head_dim_knots)
        for name in ("compute_efficiency", "memory_efficiency"):
            table = getattr(self, name)
            if len(table) != len(self.row_knots) or any(
                len(r) != len(self.context_knots) for r in table
            ):
                raise ValueError(f"{name} needs one row per row knot, one value per context knot")
            if not all(0 < e <= 1 for r in table for e in r):
                raise ValueError(f"{name} must lie in (0, 1]")
        if len(self.head_dim_factor) != len(self.head_dim_knots):
            raise ValueError("head_dim_factor needs one value per head_dim knot")
        if not all(0 < e <= 1 for e in self.head_dim_factor):
            raise ValueError("head_dim_factor must lie in (0, 1]")
        check_knots("group_knots", self.group_knots)
        for name in ("group_factor", "group_row_factor"):
            if len(getattr(self, name)) != len(self.group_knots):
                raise ValueError(f"{name} needs one value per group knot")
        if not all(0 < e <= 1 for e in self.group_factor):
            raise ValueError("group_factor must lie in (0, 1]")
        if not all(0 < e < float("inf") for e in self.group_row_factor):
            raise ValueError("group_row_factor must be a positive number")
        for name in ("row_ns", "fixed_us"):
            value = getattr(self, name)
            if not (value >= 0 and value != float("inf")):
                raise ValueError(f"{name} must be a number >= 0")

    def efficiencies_at(
        self, rows: float, context: float, head_dim: float, group: float = 1.0
    ) -> tuple[float, float]:
        """``(compute, memory)``: the shares of the matrix and HBM peaks at ``rows`` query rows
        over ``context`` positions of ``head_dim``-wide heads, ``group`` query heads per KV
        head."""
        i, t = memo_position(self._by_rows, rows, self.row_knots)
        j, u = memo_position(self._by_context, context, self.context_knots)
        head = self.head_factor_at(head_dim) * self.group_factor_at(group)
        shares = []
        for table in (self.compute_efficiency, self.memory_efficiency):
            low, high = table[i], table[i + 1]
            shares.append(
                head
                * (
                    (1 - t) * ((1 - u) * low[j] + u * low[j + 1])
                    + t * ((1 - u) * high[j] + u * high[j + 1])
                )
            )
        return shares[0], shares[1]

    def head_factor_at(self, head_dim: float) -> float:
        """The share of both rates a ``head_dim``-wide head reaches (linear in ``log2``)."""
        j, u = memo_position(self._by_head_dim, head_dim, self.head_dim_knots)
        return (1 - u) * self.head_dim_factor[j] + u * self.head_dim_factor[j + 1]

    def _group_level(self, levels: tuple[float, ...], group: float) -> float:
        j, u = memo_position(self._by_group, group, self.group_knots)
        return (1 - u) * levels[j] + u * levels[j + 1]

    def group_factor_at(self, group: float) -> float:
        """The share of both rates ``group`` query heads per KV head reach."""
        return self._group_level(self.group_factor, group)

    def row_factor_at(self, group: float) -> float:
        """The multiple of ``row_ns`` a query row costs at ``group`` query heads per KV head."""
        return self._group_level(self.group_row_factor, group)

    def compute_efficiency_at(self, rows: float, context: float, head_dim: float) -> float:
        """The share of the matrix peak at ``rows`` query rows over ``context`` positions."""
        return self.efficiencies_at(rows, context, head_dim)[0]

    def memory_efficiency_at(self, rows: float, context: float, head_dim: float) -> float:
        """The share of the HBM peak at ``rows`` query rows over ``context`` positions."""
        return self.efficiencies_at(rows, context, head_dim)[1]


@dataclass(frozen=True, slots=True, kw_only=True)
class FittedAttention:
    """A fitted curve on one plan's path: absolute peaks, resolved once in the plan."""

    curve: AttentionCurve
    peak_flops_per_s: float
    peak_hbm_bytes_per_s: float
    fixed_s: float
    #: The floor inside a served captured graph (``kernel_fit``'s ``IN_GRAPH_FLOOR_US``;
    #: ``fixed_s`` where the kernel is priced as measured).
    graph_fixed_s: float
    row_s: float
    source: str  # ``fitted:<engine>``

    def rates(
        self, flops: float, rows: float, context: float, head_dim: float, group: float = 1.0
    ) -> tuple[float, float]:
        """``(flops_per_s, hbm_bytes_per_s)`` of a kernel of ``flops`` at this shape (``group``
        query heads per KV head): the compute time is the larger of the matrix work and the
        per-row floor, expressed as a rate so the op's roofline stays ``max(compute, memory) +
        fixed``."""
        compute, memory = self.curve.efficiencies_at(rows, context, head_dim, group)
        rate = self.peak_flops_per_s * compute
        floor_s = rows * self.row_s * self.curve.row_factor_at(group)
        if flops > 0 and floor_s * rate > flops:
            rate = flops / floor_s
        return rate, self.peak_hbm_bytes_per_s * memory


#: (device name, engine, family, label).
AttentionKey = tuple[str, str, str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionFit:
    """The whole fitted table: curves by (device name, engine, family, label)."""

    curves: Mapping[AttentionKey, AttentionCurve]
    source: Mapping[str, Any]

    def curve(self, device: str, engine: str, family: str, label: str) -> AttentionCurve | None:
        return self.curves.get((device, engine, family, label))


def attention_curve(
    entry: Mapping[str, Any], key: object, *, grouped: bool = False
) -> AttentionCurve:
    """The :class:`AttentionCurve` of one decoded entry (``key`` names it in errors;
    ``grouped``: the entry must carry the group levels, else it has none)."""
    groups = (
        {name: numbers(entry, name) for name in ("group_knots", "group_factor", "group_row_factor")}
        if grouped
        else {}
    )
    return AttentionCurve(
        row_knots=numbers(entry, "row_knots"),
        context_knots=numbers(entry, "context_knots"),
        head_dim_knots=numbers(entry, "head_dim_knots"),
        compute_efficiency=number_rows(entry, "compute_efficiency", key, "attention fit"),
        memory_efficiency=number_rows(entry, "memory_efficiency", key, "attention fit"),
        head_dim_factor=numbers(entry, "head_dim_factor"),
        row_ns=number(entry, "row_ns"),
        fixed_us=number(entry, "fixed_us"),
        **groups,
    )


def _grouped_curve(entry: Mapping[str, Any], key: object) -> AttentionCurve:
    return attention_curve(entry, key, grouped=True)


def parse_attention_fit(body: Any) -> AttentionFit:
    """An :class:`AttentionFit` from the decoded json (raises ``KernelFitError``)."""
    what = "attention fit"
    source, entries = document_entries(
        body, what=what, document=ATTENTION_FIT_FORMAT, entries="attention"
    )
    curves: dict[AttentionKey, AttentionCurve] = {}
    for entry in entries:
        names = ("device", "engine", "family", "label")
        key = cast(AttentionKey, string_key(entry, names, what))
        if key[2] not in FAMILIES:
            raise KernelFitError(f"attention fit: unknown family {key[2]!r}")
        add_curve(curves, key, _grouped_curve, entry, what)
    return AttentionFit(curves=curves, source=source)


def load_attention_fit(path: Path = ATTENTION_FIT_PATH) -> AttentionFit:
    """Read and check the fitted table at ``path`` (raises ``KernelFitError``)."""
    return parse_attention_fit(read_fit_json(path, "attention fit"))


@cache
def attention_fit() -> AttentionFit:
    """The packaged table, read once on first use."""
    return load_attention_fit()


def fitted_attention(
    *,
    device: str,
    engine: str | None,
    family: str,
    labels: tuple[str, ...],
    peak_flops_per_s: Mapping[bool, float],
    peak_hbm_bytes_per_s: float,
    graph_launch_s: float,
    in_graph_s: float | None = None,
) -> FittedAttention | None:
    """The fitted ``family`` kernel of ``engine`` on ``device`` for the first of ``labels`` with
    a curve (None: the defaults). ``peak_flops_per_s``: the matrix peak by FP8 compute (True)
    or 16-bit (False). The fitted floor never undercuts the graph launch cost it stands in for;
    ``in_graph_s``: the floor inside a served captured graph (None: the fitted floor there)."""
    if engine is None:
        return None
    table = attention_fit()
    for label in labels:
        curve = table.curve(device, engine, family, label)
        if curve is not None:
            return fitted_curve(
                curve,
                engine=engine,
                peak_flops_per_s=peak_flops_per_s[label_is_fp8_compute(label)],
                peak_hbm_bytes_per_s=peak_hbm_bytes_per_s,
                graph_launch_s=graph_launch_s,
                in_graph_s=in_graph_s,
            )
    return None


def fitted_curve(
    curve: AttentionCurve,
    *,
    engine: str,
    peak_flops_per_s: float,
    peak_hbm_bytes_per_s: float,
    graph_launch_s: float,
    in_graph_s: float | None,
) -> FittedAttention:
    """``curve`` of ``engine`` on a plan's path (the floors as for :func:`fitted_attention`)."""
    fixed_s = max(curve.fixed_us * S_PER_US, graph_launch_s)
    return FittedAttention(
        curve=curve,
        peak_flops_per_s=peak_flops_per_s,
        peak_hbm_bytes_per_s=peak_hbm_bytes_per_s,
        fixed_s=fixed_s,
        graph_fixed_s=fixed_s if in_graph_s is None else in_graph_s,
        row_s=curve.row_ns * S_PER_NS,
        source=FITTED_SOURCE_PREFIX + engine,
    )


def parse_kernel_curves(
    body: Any, *, what: str, document: str, entries: str, kernels: tuple[str, ...]
) -> tuple[dict[tuple[str, str, str], AttentionCurve], dict[str, Any]]:
    """The curves by (device, engine, kernel) and the ``source`` of a per-kernel table in the
    attention form (Gated DeltaNet, DSA): ``document`` entries under ``entries``, each kernel
    one of ``kernels`` (raises ``KernelFitError`` naming ``what``)."""
    source, listed = document_entries(body, what=what, document=document, entries=entries)
    curves: dict[tuple[str, str, str], AttentionCurve] = {}
    for entry in listed:
        key = cast(tuple[str, str, str], string_key(entry, ("device", "engine", "kernel"), what))
        if key[2] not in kernels:
            raise KernelFitError(f"{what}: unknown kernel {key[2]!r}")
        add_curve(curves, key, _monotone_curve, entry, what)
    return curves, source


def fitted_kernels(
    curves: Mapping[tuple[str, str, str], AttentionCurve],
    *,
    device: str,
    engine: str,
    kernels: tuple[str, ...],
    peak_flops_per_s: Mapping[str, float],
    peak_hbm_bytes_per_s: float,
    graph_launch_s: float,
    in_graph_s: float | None,
) -> dict[str, FittedAttention | None] | None:
    """Each of ``kernels``' fitted curve of ``engine`` on ``device`` at its matrix peak
    (``peak_flops_per_s`` by kernel; None: that kernel has no curve), or None if none has one;
    the floors as for :func:`fitted_attention`."""
    found = {kernel: curves.get((device, engine, kernel)) for kernel in kernels}
    if all(curve is None for curve in found.values()):
        return None
    return {
        kernel: None
        if curve is None
        else fitted_curve(
            curve,
            engine=engine,
            peak_flops_per_s=peak_flops_per_s[kernel],
            peak_hbm_bytes_per_s=peak_hbm_bytes_per_s,
            graph_launch_s=graph_launch_s,
            in_graph_s=in_graph_s,
        )
        for kernel, curve in found.items()
    }
