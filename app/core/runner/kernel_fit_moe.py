"""MoE expert-kernel terms fitted to measured kernels (``data/kernel_fit_moe.json``).

Written by ``python -m scripts.fit_kernels_moe`` from NVIDIA AIConfigurator's measured
``moe_perf`` tables (``aiconfigurator-core``, Apache-2.0; ``NOTICE``, ``docs/kernels.md``), on the
train split and the ``balanced`` token distribution only. Per (catalog device, engine, MoE
quantization, engine version) it holds the terms of the runner's fused-MoE cost
(``ForwardBuilder.moe_experts`` and ``moe_combine_sum``), as shape curves rather than
latencies::

    grouped GEMM (up, down) = max(flops / (peak_flops * compute_eff(tpe, W)),
                                  hbm_bytes / (peak_bw * memory_eff(W)))
                              + fixed_us + touched_experts * expert_us
    permute / combine       = route_passes * routes * hidden * 2 bytes / peak_bw

``tpe`` is the tokens each touched expert computes (``routes / touched``), ``W`` one expert's
weight elements (all its matrices, on this device): ``compute_eff`` is bilinear in ``log2`` of
both between the knots (a :class:`~app.core.runner.kernel_fit.GemmCurve` over ``tpe`` and
``W``), ``memory_eff`` linear in ``log2(W)``. ``expert_us`` is the per-active-expert cost (its
tile scheduling, weight-scale loads and the partial last tile), ``route_passes`` how many times
each routed token's hidden vector crosses HBM at peak in the routing, permute, un-permute and
weighted sum the engines fuse around the grouped GEMMs. The activation is fused into the up
GEMM's epilogue in every measured engine: a fitted run has no ``experts_act`` op.

Engine versions change MoE kernels (vLLM 0.19 / 0.22 ran Triton ``fused_moe``, 0.24 FlashInfer's
TensorRT-LLM kernels, up to 2.4x apart at one shape), so each version has its own curve; the
runner prices with the newest (``default``), ``validate --kernels`` each table with its own
version's. A device, engine or quantization without a curve keeps the defaults; a missing or
malformed file raises :class:`~app.core.runner.fit_tables.KernelFitError` on first use.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, cast

from app.core.catalog.quantization import LinearQuantAction, Quantization
from app.core.profiles import Mxfp4Activation
from app.core.runner.fit_tables import (
    KernelFitError,
    add_curve,
    check_knots,
    document_entries,
    number,
    numbers,
    objects,
    position,
    read_fit_json,
    string_key,
)
from app.core.runner.kernel_fit import (
    FITTED_SOURCE_PREFIX,
    FP8_BLOCK,
    GEMM_16BIT,
    S_PER_US,
    GemmCurve,
    gemm_curve_of,
)

KERNEL_FIT_MOE_PATH = Path(__file__).resolve().parent / "data" / "kernel_fit_moe.json"
KERNEL_FIT_MOE_FORMAT = "chunkwise-kernel-fit-moe/1"

#: Runner linear action -> the measured ``moe_dtype`` (MXFP4 goes by its activations).
_MOE_LABELS: Mapping[LinearQuantAction, str] = {
    LinearQuantAction.DISABLED: GEMM_16BIT,
    LinearQuantAction.FP8: "fp8",
    LinearQuantAction.W4A16: "int4_wo",
    LinearQuantAction.NVFP4: "nvfp4",
}
#: MXFP4 experts by the activations their GEMMs run with (the measured dtypes).
MXFP4_MOE_LABELS: Mapping[str, str] = {"bf16": "w4a16_mxfp4", "fp8": "w4a8_mxfp4_mxfp8"}
#: MXFP4 experts on Marlin (BF16 activations, weights dequantized in the GEMM's main loop):
#: the ``w4a16_mxfp4`` rows whose ``kernel_source`` names Marlin, fitted apart from the same
#: dtype's OAI Triton rows (about 3x slower per flop at large M on H100 / H200;
#: docs/kernels.md, "vLLM on Hopper").
MXFP4_MARLIN_MOE_LABEL = "w4a16_mxfp4_marlin"
#: The ``kernel_source`` fragment of a Marlin MoE kernel.
MARLIN_KERNEL = "marlin"
#: Kernels one MoE call launches in a served forward, where the runner's fitted MoE ops (the up
#: and down grouped GEMMs) stand for fewer: the other kernels' in-graph floors are charged to
#: ``moe_combine_sum`` in a captured decode step (eager steps keep the fitted floors, which the
#: collectors timed over the whole call). vLLM's ``fused_marlin_moe`` (MXFP4 on Marlin and the
#: INT4 ``compressed-tensors`` WNA16 experts, ``MarlinExperts``): ``moe_align_block_size``, two
#: ``moe_wna16_marlin_gemm``, the activation (``silu_and_mul`` / ``swigluoai_and_mul``) and the
#: top-k sum (``vllm/model_executor/layers/fused_moe/fused_marlin_moe.py``).
SERVED_MOE_KERNELS: Mapping[tuple[str, str], int] = {
    ("vllm", MXFP4_MARLIN_MOE_LABEL): 5,
    ("vllm", "int4_wo"): 5,
}
#: The same per device, where the engine runs another MoE kernel elsewhere: TensorRT-LLM's
#: MXFP4 experts with BF16 activations run the TRITON MoE on Hopper (the default backend there,
#: GPT-OSS deployment guide; AIConfigurator's collector pins it on SM90, ``collect_moe.py``)
#: and TRTLLM-gen's fused kernel on Blackwell. The TRITON call (``fused_moe_triton.py``,
#: ``TritonFusedMoE`` over OpenAI's ``triton_kernels``) runs the top-k, the routing metadata
#: (bitmatrix sums, token sort, the expert offsets: ``routing_from_bitmatrix``), the gate
#: gather and two ``matmul_ogs`` (gather + up + SwiGLU, down + scatter): about ten kernels,
#: three more under expert parallelism (``TritonEPRouter.prune_routing_ep``). The count only
#: splits the measured call floor (``graph_call_floor_us``) between the grouped GEMMs and the
#: others; the call's total is the floor.
SERVED_MOE_KERNELS_ON: Mapping[tuple[str, str, str], int] = {
    ("NVIDIA_H100_SXM_80G", "trtllm", "w4a16_mxfp4"): 10,
    ("NVIDIA_H200_SXM_141G", "trtllm", "w4a16_mxfp4"): 10,
}
#: The grouped GEMMs a fitted MoE prices (up, down): each pays its own floor.
GROUPED_GEMMS = 2


def served_moe_kernels(device: str, engine: str, label: str) -> int:
    """Kernels one MoE call of ``engine``'s ``label`` experts launches in a served forward on
    ``device`` (:data:`SERVED_MOE_KERNELS_ON`, then :data:`SERVED_MOE_KERNELS`; else the two
    grouped GEMMs)."""
    found = SERVED_MOE_KERNELS_ON.get((device, engine, label))
    if found is None:
        found = SERVED_MOE_KERNELS.get((engine, label), GROUPED_GEMMS)
    return found


def moe_table_label(moe_dtype: str, kernel_source: str) -> str:
    """The fit's label of a measured MoE row: its ``moe_dtype``, except MXFP4 x BF16 rows of a
    Marlin kernel (:data:`MXFP4_MARLIN_MOE_LABEL`): one dtype, two kernels, two curves."""
    if moe_dtype == MXFP4_MOE_LABELS["bf16"] and MARLIN_KERNEL in kernel_source:
        return MXFP4_MARLIN_MOE_LABEL
    return moe_dtype


def moe_label(
    quantization: Quantization, native_linear: str | None, mxfp4_activation: Mxfp4Activation
) -> str | None:
    """The measured MoE table a run's routed experts are priced from (None: no table). FP8 is
    block-scaled for a DeepSeek-style checkpoint, as for the GEMMs."""
    action = quantization.linear
    if action is LinearQuantAction.MXFP4:
        return MXFP4_MOE_LABELS.get(mxfp4_activation)
    if action is LinearQuantAction.FP8 and native_linear == LinearQuantAction.FP8.value:
        return FP8_BLOCK
    return _MOE_LABELS.get(action)


@dataclass(frozen=True, slots=True, kw_only=True)
class MoeCurve:
    """One (device, engine, quantization)'s fitted MoE terms (see the module doc)."""

    gemm: GemmCurve  # m knots: tokens per touched expert; nk knots: one expert's weights
    expert_us: float
    route_passes: float
    #: An unfused MoE call's floor in a captured graph (µs, all its kernels; None: not
    #: measured): written for the kernels of :data:`SERVED_MOE_KERNELS`, whose collected
    #: graph-replayed call runs the served kernels (``scripts.fit_kernels_moe``).
    graph_call_floor_us: float | None = None

    def __post_init__(self) -> None:
        for name in ("expert_us", "route_passes"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a number >= 0")
        floor = self.graph_call_floor_us
        if floor is not None and not (math.isfinite(floor) and floor >= 0):
            raise ValueError("graph_call_floor_us must be a number >= 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class FittedMoe:
    """A fitted MoE curve on one plan's path: absolute peaks, resolved once in the plan."""

    curve: MoeCurve
    label: str  # the measured MoE dtype
    peak_flops_per_s: float
    peak_hbm_bytes_per_s: float
    graph_launch_s: float
    source: str  # ``fitted:<engine>``
    #: Each grouped GEMM's floor inside a served captured graph (``kernel_fit``'s
    #: ``IN_GRAPH_FLOOR_US``; None: the fitted floor there too).
    in_graph_s: float | None = None
    #: Kernels one MoE call launches in the served forward (:data:`SERVED_MOE_KERNELS`).
    served_kernels: int = GROUPED_GEMMS

    @property
    def fixed_s(self) -> float:
        """Each grouped GEMM's floor: never below the captured-graph cost it stands in for."""
        return max(self.curve.gemm.fixed_us * S_PER_US, self.graph_launch_s)

    @property
    def graph_fixed_s(self) -> float:
        """Each grouped GEMM's floor inside a captured graph: the in-graph floor, or, for an
        unfused call with a measured in-graph call floor, that floor less the other kernels'
        (:attr:`graph_extra_s`) split over the grouped GEMMs, never below the in-graph floor."""
        if self.in_graph_s is None:
            return self.fixed_s
        call_floor_us = self.curve.graph_call_floor_us
        if call_floor_us is None or self.served_kernels <= GROUPED_GEMMS:
            return self.in_graph_s
        gemms_s = call_floor_us * S_PER_US - self.graph_extra_s
        return max(gemms_s / GROUPED_GEMMS, self.in_graph_s)

    @property
    def graph_extra_s(self) -> float:
        """The in-graph floors of the MoE call's kernels besides the two grouped GEMMs (0:
        none, or no in-graph floor)."""
        if self.in_graph_s is None:
            return 0.0
        return max(self.served_kernels - GROUPED_GEMMS, 0) * self.in_graph_s

    @property
    def expert_s(self) -> float:
        return self.curve.expert_us * S_PER_US

    def flops_per_s(self, tokens_per_expert: float, expert_elements: float) -> float:
        return self.peak_flops_per_s * self.curve.gemm.compute_efficiency_at(
            tokens_per_expert, expert_elements
        )

    def hbm_bytes_per_s(self, expert_elements: float) -> float:
        return self.peak_hbm_bytes_per_s * self.curve.gemm.memory_efficiency_at(expert_elements)


@dataclass(frozen=True, slots=True, kw_only=True)
class SkewCurve:
    """A skewed token distribution's latency over the balanced curve's, by tokens per touched
    expert under uniform routing (linear in ``log2`` between the knots, clamped): below one,
    a skewed batch touches fewer experts (fewer weights streamed); above one, the busiest
    expert's GEMM sets the time."""

    tpe_knots: tuple[float, ...]
    factor: tuple[float, ...]

    def __post_init__(self) -> None:
        check_knots("tpe_knots", self.tpe_knots)
        if len(self.factor) != len(self.tpe_knots):
            raise ValueError("factor needs one value per tpe knot")
        if not all(math.isfinite(f) and f > 0 for f in self.factor):
            raise ValueError("factors must be positive")

    def factor_at(self, tokens_per_expert: float) -> float:
        i, t = position(tokens_per_expert, self.tpe_knots)
        return (1 - t) * self.factor[i] + t * self.factor[i + 1]


#: (device name, engine, MoE dtype, engine version).
MoeKey = tuple[str, str, str, str]
#: (device name, engine, token distribution).
SkewKey = tuple[str, str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class MoeFit:
    """The whole MoE table: per (device, engine, MoE dtype) one curve per measured engine
    version, and the version the runner prices with (``default``: the newest); per (device,
    engine, skewed distribution) a :class:`SkewCurve` (``validate --kernels`` prices the
    measured power-law rows with it; serving routes uniformly)."""

    curves: Mapping[MoeKey, MoeCurve]
    default_versions: Mapping[tuple[str, str, str], str]
    skew: Mapping[SkewKey, SkewCurve]

    def curve(
        self, device: str, engine: str, label: str, version: str | None = None
    ) -> MoeCurve | None:
        """The curve of ``version`` (None: the default version's)."""
        if version is None:
            version = self.default_versions.get((device, engine, label))
            if version is None:
                return None
        return self.curves.get((device, engine, label, version))


def _moe_curve(entry: Mapping[str, Any], key: object) -> MoeCurve:
    return MoeCurve(
        gemm=gemm_curve_of(entry, key, m_knots="tpe_knots", nk_knots="weight_knots"),
        expert_us=number(entry, "expert_us"),
        route_passes=number(entry, "route_passes"),
        graph_call_floor_us=(
            None if "graph_call_floor_us" not in entry else number(entry, "graph_call_floor_us")
        ),
    )


def parse_kernel_fit_moe(body: Any) -> MoeFit:
    """The :class:`MoeFit` of the decoded json (raises :class:`KernelFitError`)."""
    what = "kernel fit"
    _, entries = document_entries(body, what=what, document=KERNEL_FIT_MOE_FORMAT, entries="moe")
    curves: dict[MoeKey, MoeCurve] = {}
    defaults: dict[tuple[str, str, str], str] = {}
    for entry in entries:
        names = ("device", "engine", "quantization", "engine_version")
        key = cast(MoeKey, string_key(entry, names, what))
        add_curve(curves, key, _moe_curve, entry, what)
        default = entry.get("default")
        if not isinstance(default, bool):
            raise KernelFitError(f"kernel fit: 'default' is not true or false in {key}")
        if default:
            if key[:3] in defaults:
                raise KernelFitError(f"kernel fit: two default versions of {key[:3]}")
            defaults[key[:3]] = key[3]
    missing = {key[:3] for key in curves} - set(defaults)
    if missing:
        raise KernelFitError(f"kernel fit: no default version of {sorted(missing)[0]}")
    return MoeFit(curves=curves, default_versions=defaults, skew=_parse_skew(body.get("skew")))


def _skew_curve(entry: Mapping[str, Any], key: object) -> SkewCurve:
    return SkewCurve(tpe_knots=numbers(entry, "tpe_knots"), factor=numbers(entry, "factor"))


def _parse_skew(entries: Any) -> Mapping[SkewKey, SkewCurve]:
    what = "kernel fit"
    if not isinstance(entries, list):
        raise KernelFitError("kernel fit: needs a 'skew' list")
    skew: dict[SkewKey, SkewCurve] = {}
    for entry in objects(entries, what=what, entries="skew"):
        names = ("device", "engine", "distribution")
        key = cast(SkewKey, string_key(entry, names, what, kind="skew entry"))
        add_curve(skew, key, _skew_curve, entry, what, kind="skew")
    return skew


def load_kernel_fit_moe(path: Path = KERNEL_FIT_MOE_PATH) -> MoeFit:
    """Read and check the fitted MoE table at ``path`` (raises :class:`KernelFitError`)."""
    return parse_kernel_fit_moe(read_fit_json(path, "MoE fit"))


@cache
def kernel_fit_moe() -> MoeFit:
    """The packaged table, read once on first use."""
    return load_kernel_fit_moe()


def fitted_moe(
    *,
    device: str,
    engine: str | None,
    label: str | None,
    peak_flops_per_s: float,
    peak_hbm_bytes_per_s: float,
    graph_launch_s: float,
    in_graph_s: float | None = None,
) -> FittedMoe | None:
    """The fitted MoE of ``engine``'s ``label`` kernels on ``device``, its default version
    (None: the defaults); ``in_graph_s``: each grouped GEMM's floor inside a served captured
    graph."""
    if engine is None or label is None:
        return None
    curve = kernel_fit_moe().curve(device, engine, label)
    if curve is None:
        return None
    return FittedMoe(
        curve=curve,
        label=label,
        peak_flops_per_s=peak_flops_per_s,
        peak_hbm_bytes_per_s=peak_hbm_bytes_per_s,
        graph_launch_s=graph_launch_s,
        source=FITTED_SOURCE_PREFIX + engine,
        in_graph_s=in_graph_s,
        served_kernels=served_moe_kernels(device, engine, label),
    )
