"""Fit the runner's GEMM efficiency curves to AIConfigurator's measured kernels (issue 30).

    python -m scripts.fit_kernels --kernels kernels/wheel \
        [--out app/core/runner/data/kernel_fit.json]

Per (system, engine, GEMM quantization) it fits, on the TRAIN split only (``split_of``: the
shape text's CRC-32 not 0 mod 4), the terms of the runner's GEMM roofline
(:mod:`app.core.runner.kernel_fit`): a compute efficiency table over ``log2(M)`` x
``log2(K x N)`` knots, a memory efficiency over the ``log2(K x N)`` knots, a fixed cost and
the share of the compute exposed to wave quantization (the ``M x N`` output's 128 x 128 tiles
over the device's SMs; :data:`TILE_ROWS`), then the shape efficiency over ``log2(M)``,
``log2(N)``, ``log2(K)`` (:func:`_fit_shape`: a regularised least-absolute-log fit of the
time the fitted curve leaves unexplained, solved in closed form).
The flops and bytes of every point are the runner's own (``ForwardBuilder.gemm`` on the same
plan ``validate --kernels`` builds); only the efficiencies are free. The loss is the mean
absolute log error (a robust stand-in for the median relative error), minimised by coordinate
descent over bounded grids that narrow each round. Train and test residuals (median absolute %
error) go into the file beside each curve.

Needs pyarrow and numpy (``pip install 'chunkwise[kernels]'``); never imported by ``app``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from app.core.catalog.device_table import sm_count
from app.core.catalog.devices import get_device
from app.core.catalog.hardware import BYTES_PER_GB
from app.core.catalog.quantization import LinearQuantAction, Quantization
from app.core.parallel import ParallelLayout
from app.core.runner.kernel_fit import (
    FP8_BLOCK,
    KERNEL_FIT_FORMAT,
    KERNEL_FIT_PATH,
    S_PER_US,
)
from app.core.runner.layers import FLOPS_PER_MAC
from app.core.runner.plan import ACTIVATION_BYTES, FLOPS_PER_TFLOP, build_plan
from app.core.validation.kernels import SYSTEM_DEVICES, split_of
from app.services.kernels import _read, _shape_text, find_data_dir, list_tables

#: Knots of the compute-efficiency curve (rows M): a tile-count ramp per factor of four.
M_KNOTS = (1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0)
#: Knots of the weight size K x N (elements): more output tiles fill more of the device.
NK_KNOTS = (2.0**20, 2.0**24, 2.0**28)
#: Measured GEMM dtype -> runner action (the fitted labels: ``kernel_fit.gemm_label``'s range).
FIT_LABELS = {
    "bfloat16": LinearQuantAction.DISABLED,
    "fp8": LinearQuantAction.FP8,
    FP8_BLOCK: LinearQuantAction.FP8,
    "int8_wo": LinearQuantAction.W8A16_STATIC,
    "int4_wo": LinearQuantAction.W4A16,
    "sq": LinearQuantAction.W8A8_STATIC,
    "nvfp4": LinearQuantAction.NVFP4,
}
#: The output tile per SM of the wave term, rows (M) x columns (N): the large-M default of the
#: engines' CUTLASS GEMMs on every measured architecture. vLLM csrc/quantization/cutlass_w8a8:
#: ``sm90_fp8_config_default`` (M > 128) TileShape 128 x 128 x 128, ``sm100_fp8_config_default``
#: (M > 256) 256 x 128 x 128 on a 2 x 2 cluster (a 2-SM MMA: 128 x 128 per SM),
#: ``sm120_fp8_config_default`` 128 x 128 x 128, the SM89 dispatch 128 x 128 x 64 (N <= 4096);
#: CUTLASS's Hopper warp-specialized GEMM examples use 128 x 128 as well. Smaller-M kernels
#: (64-row tiles, swap-AB, split-K, DeepGEMM's wave-minimising block N) hide part of the tail
#: wave: that is what the fitted ``wave_share`` measures, per curve.
TILE_ROWS, TILE_COLS = 128.0, 128.0
#: Candidate wave shares per descent round (a share in [0, 1], linear).
WAVE_SHARES = tuple(i / 20 for i in range(21))
#: Knots of the shape efficiency, a factor of two apart over the measured range (M 1-32,768,
#: N and K 32-65,536 on every system of the wheel); clamped outside.
SHAPE_M_KNOTS = tuple(2.0**i for i in range(16))
SHAPE_NK_KNOTS = tuple(2.0**i for i in range(5, 17))
#: Weight of the shape table's smoothness (second differences along each axis), per point
#: per table value; a larger value pulls it toward a plane in log-log. 0.015 (i.e. 0.3 x
#: 0.05) kept the train and held-out errors within a few tenths of a point of each other on
#: H100 vLLM and L40S TensorRT-LLM, where 0.15 cost 0.5-1.5 points on both.
SHAPE_SMOOTHNESS = 0.015
#: Weight of the pull toward a factor of 1 (the curve alone), per point per table value:
#: where no point weighs (a corner of the knots the wheel did not measure, or shapes whose time
#: is all fixed cost) the table stays near 1 instead of extrapolating the second differences.
#: 1e-3 bounded the fitted factors to 0.01-25 on H100 vLLM FP8 and GB300 vLLM block FP8 at a
#: cost of 0.0-0.1 points of held-out error (1e-6 let them run to 0 and 10^5).
SHAPE_RIDGE = 1e-3
#: Reweighting rounds of the least-absolute fit (the first is least squares).
SHAPE_ROUNDS = 6
#: Residuals below this (log) weigh as this much in the least-absolute reweighting.
SHAPE_RESIDUAL_FLOOR = 0.02
#: The share of a point's time the shape factor must explain at least (a point whose time is
#: almost all fixed cost says nothing about the rates).
SHAPE_MIN_SHARE = 0.05
MIN_POINTS = 20
MAX_FIT_POINTS = 8_000  # train points per group the optimiser sees (every k-th, deterministic)
ROUNDS = 5
GRID = 15
BOUNDS = {"compute": (0.002, 1.0), "memory": (0.05, 1.0)}
MAX_FIXED_US = 300.0
PERCENT = 100.0


def _terms(system: str, label: str) -> tuple[float, float, float, float, float]:
    """Weight bytes per element, input bytes per element, peak flops/s, peak HBM bytes/s and
    the graph launch floor (s) of ``label`` GEMMs on ``system``'s device (the runner's plan)."""
    device = get_device(SYSTEM_DEVICES[system])
    action = FIT_LABELS[label]
    from app.core.validation.kernels import _GEMM_MODEL  # the one-layer GEMM model

    plan = build_plan(_GEMM_MODEL, device, ParallelLayout(), Quantization(linear=action))
    fmt = plan.quantization.linear_format
    peak = (device.peak_tflops(fmt.compute_dtype) or device.peak_bf16_tflops) * FLOPS_PER_TFLOP
    return (
        plan.weight_bytes_per_param,
        plan.gemm_input_bytes,
        peak,
        device.hbm_bandwidth_gb_s * BYTES_PER_GB,
        device.graph_kernel_launch_us * S_PER_US,
    )


def _weights(x: np.ndarray, knots: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Lower knot index and the share of the upper knot, linear in log2 (clamped)."""
    pos = np.interp(np.log2(x), np.log2(np.array(knots)), np.arange(len(knots), dtype=float))
    low = np.minimum(np.floor(pos).astype(int), len(knots) - 2)
    return low, pos - low


def _efficiency(p: dict[str, Any], table: np.ndarray) -> np.ndarray:
    """The curve of :class:`~app.core.runner.kernel_fit.GemmCurve` (bilinear, vectorised)."""
    i, t = p["m_at"]
    j, u = p["nk_at"]
    curve: np.ndarray = (
        table[i, j] * (1 - t) * (1 - u)
        + table[i + 1, j] * t * (1 - u)
        + table[i, j + 1] * (1 - t) * u
        + table[i + 1, j + 1] * t * u
    )
    return curve


Params = tuple[np.ndarray, np.ndarray, float, float]  # compute table, memory, fixed s, wave share


def _predict_s(p: dict[str, Any], params: Params) -> np.ndarray:
    table, mem, fixed_s, share = params
    waves = (1 - share) + share / p["wave"]
    compute = p["flops"] * waves / (p["peak"] * _efficiency(p, table))
    j, u = p["nk_at"]
    memory = p["bytes"] / (p["bw"] * (mem[j] * (1 - u) + mem[j + 1] * u))
    seconds: np.ndarray = np.maximum(compute, memory) + fixed_s
    return seconds


def _loss(p: dict[str, Any], params: Params) -> float:
    return float(np.mean(np.abs(np.log(_predict_s(p, params) / p["measured"]))))


def _grid(value: float, low: float, high: float, span: float) -> np.ndarray:
    lo, hi = max(low, value / span), min(high, value * span)
    return np.unique(np.append(np.geomspace(lo, hi, GRID), value))


def _descend(
    p: dict[str, Any], params: list[Any], array: np.ndarray, index: Any, bounds: Any, span: float
) -> None:
    """Set ``array[index]`` to the grid value of least loss (the other parameters fixed)."""
    best, best_loss = array[index], math.inf
    low, high = bounds
    for v in _grid(float(array[index]), low, high, span):
        array[index] = v
        table, mem, fixed, share = params
        loss = _loss(p, (table, mem, float(fixed[0]), float(share[0])))
        if loss < best_loss:
            best, best_loss = v, loss
    array[index] = best


def _fit(p: dict[str, Any], floor_s: float, waves: bool) -> Params:
    """The fitted terms; ``waves``: the device has an SM count. The curve without a wave term
    is nested in the one with it, so both are descended and the lower train loss kept (the
    descent is local: from a wave share of 0.5 it can settle above the share-0 optimum)."""
    plain = _descend_all(p, floor_s, waves=False)
    if not waves:
        return plain
    wavy = _descend_all(p, floor_s, waves=True)
    return wavy if _loss(p, wavy) < _loss(p, plain) else plain


def _descend_all(p: dict[str, Any], floor_s: float, *, waves: bool) -> Params:
    table = np.full((len(M_KNOTS), len(NK_KNOTS)), 0.5)
    mem = np.full(len(NK_KNOTS), 0.7)
    fixed = np.array([max(floor_s, 5 * S_PER_US)])
    share = np.array([0.5 if waves else 0.0])
    span = 8.0
    for _ in range(ROUNDS):
        params: list[Any] = [table, mem, fixed, share]
        _descend_fixed(p, params, floor_s, span)
        if waves:
            share[0] = min(
                WAVE_SHARES, key=lambda v: _loss(p, (table, mem, float(fixed[0]), float(v)))
            )
        for j in range(len(NK_KNOTS)):
            _descend(p, params, mem, j, BOUNDS["memory"], span)
        for i in range(len(M_KNOTS)):
            for j in range(len(NK_KNOTS)):
                _descend(p, params, table, (i, j), BOUNDS["compute"], span)
        span = math.sqrt(span)
    return table, mem, float(fixed[0]), float(share[0])


def _descend_fixed(p: dict[str, Any], params: list[Any], floor_s: float, span: float) -> None:
    table, mem, fixed, share = params
    grid = _grid(float(fixed[0]), floor_s, MAX_FIXED_US * S_PER_US, span)
    fixed[0] = min(grid, key=lambda v: _loss(p, (table, mem, float(v), float(share[0]))))


def _wave_efficiency(m: np.ndarray, n: np.ndarray, sms: int | None) -> np.ndarray:
    """``tiles / (ceil(tiles / SMs) x SMs)`` of each ``m x n`` output (1 without an SM count):
    :meth:`app.core.runner.kernel_fit.GemmCurve.wave_factor`'s efficiency, vectorised."""
    if sms is None:
        return np.ones_like(m)
    tiles = np.ceil(m / TILE_ROWS) * np.ceil(n / TILE_COLS)
    waves: np.ndarray = tiles / (np.ceil(tiles / sms) * sms)
    return waves


def _shape_design(p: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Each point's eight shape-table corners (flat [m][n][k] indices) and their trilinear
    weights in ``log2(M)``, ``log2(N)``, ``log2(K)``."""
    (i, t), (j, u), (h, v) = (
        _weights(p[axis], knots)
        for axis, knots in (("m", SHAPE_M_KNOTS), ("n", SHAPE_NK_KNOTS), ("k", SHAPE_NK_KNOTS))
    )
    nn = nk = len(SHAPE_NK_KNOTS)
    index, weight = [], []
    for a, wa in ((i, 1 - t), (i + 1, t)):
        for b, wb in ((j, 1 - u), (j + 1, u)):
            for c, wc in ((h, 1 - v), (h + 1, v)):
                index.append((a * nn + b) * nk + c)
                weight.append(wa * wb * wc)
    return np.stack(index, 1), np.stack(weight, 1)


def _second_differences(shape: tuple[int, ...]) -> np.ndarray:
    """``D.T @ D`` of the second differences of a table of ``shape`` along each axis."""
    size = int(np.prod(shape))
    flat = np.arange(size).reshape(shape)
    rows: list[tuple[int, int, int]] = []
    for axis in range(len(shape)):
        n = shape[axis]
        for lo in range(n - 2):
            a, b, c = (np.take(flat, lo + d, axis=axis).ravel() for d in range(3))
            rows.extend(zip(a, b, c, strict=True))
    d = np.zeros((len(rows), size))
    for r, (a, b, c) in enumerate(rows):
        d[r, a] += 1
        d[r, b] -= 2
        d[r, c] += 1
    gram: np.ndarray = d.T @ d
    return gram


def _rates_s(p: dict[str, Any], params: Params) -> tuple[np.ndarray, np.ndarray]:
    """Each point's compute and memory time (s) on the curve ``params``, before the shape
    efficiency."""
    table, mem, _, share = params
    waves = (1 - share) + share / p["wave"]
    compute = p["flops"] * waves / (p["peak"] * _efficiency(p, table))
    j, u = p["nk_at"]
    memory = p["bytes"] / (p["bw"] * (mem[j] * (1 - u) + mem[j + 1] * u))
    return compute, memory


def _fit_shape(p: dict[str, Any], params: Params, gram: np.ndarray) -> np.ndarray:
    """The shape efficiency (flat [m][n][k]) on the curve ``params``: the log time factor
    ``theta`` (efficiency ``exp(-theta)``) that best explains ``measured - fixed`` over the
    curve's ``max(compute, memory)``, trilinear between the knots; least absolute log error by
    reweighted least squares, each point weighted by the squared share of its time the rates
    make (the rest is the fixed cost), with a second-difference smoothness and a small ridge
    toward 1 (:data:`SHAPE_RIDGE`) where the data are thin."""
    compute, memory = _rates_s(p, params)
    rates = np.maximum(compute, memory)
    fixed = params[2]
    target = np.log(np.maximum(p["measured"] - fixed, SHAPE_MIN_SHARE * rates) / rates)
    weight = (rates / (rates + fixed)) ** 2
    index, corner = _shape_design(p)
    size = gram.shape[0]
    pairs = (index[:, :, None] * size + index[:, None, :]).ravel()
    per_value = len(target) / size
    regular = SHAPE_SMOOTHNESS * per_value * gram + SHAPE_RIDGE * per_value * np.eye(size)
    theta = np.zeros(size)
    for round_ in range(SHAPE_ROUNDS):
        residual = target - (theta[index] * corner).sum(1)
        w = weight / np.maximum(np.abs(residual), SHAPE_RESIDUAL_FLOOR) if round_ else weight
        gram_w = np.bincount(
            pairs, (w[:, None, None] * corner[:, :, None] * corner[:, None, :]).ravel(), size**2
        ).reshape(size, size)
        rhs = np.bincount(index.ravel(), (w[:, None] * corner * target[:, None]).ravel(), size)
        theta = np.linalg.solve(gram_w + regular, rhs)
    efficiency: np.ndarray = np.exp(-theta)
    return efficiency


def _predict_shaped_s(p: dict[str, Any], params: Params, shape: np.ndarray) -> np.ndarray:
    """The runner's time of each point (``FittedGemm.rates``): both efficiencies times the
    shape efficiency (geometric between corners), each capped at 1."""
    table, mem, fixed_s, share = params
    index, corner = _shape_design(p)
    factor = np.exp((np.log(shape)[index] * corner).sum(1))
    waves = (1 - share) + share / p["wave"]
    compute = p["flops"] * waves / (p["peak"] * np.minimum(1.0, _efficiency(p, table) * factor))
    j, u = p["nk_at"]
    memory_eff = np.minimum(1.0, (mem[j] * (1 - u) + mem[j + 1] * u) * factor)
    seconds: np.ndarray = np.maximum(compute, p["bytes"] / (p["bw"] * memory_eff)) + fixed_s
    return seconds


def _median_abs_pct(p: dict[str, Any], params: Params, shape: np.ndarray) -> float:
    if not len(p["m"]):
        return math.nan
    err = (_predict_shaped_s(p, params, shape) - p["measured"]) / p["measured"]
    return round(float(np.median(np.abs(err))) * PERCENT, 2)


def _collect(
    root: Path,
) -> tuple[dict[tuple[str, str, str], dict[str, list[Any]]], dict[tuple[str, str], set[str]]]:
    """Every usable GEMM point by (system, engine, label), with its split and engine version."""
    points: dict[tuple[str, str, str], dict[str, list[Any]]] = defaultdict(
        lambda: defaultdict(list)
    )
    versions: dict[tuple[str, str], set[str]] = defaultdict(set)
    for table in list_tables(find_data_dir(root), None, None):
        if table.table != "gemm_perf" or table.system not in SYSTEM_DEVICES:
            continue
        data = _read(table.path)
        shapes = _shape_text(data).to_pylist()
        cols = {c: data.column(c).to_pylist() for c in ("gemm_dtype", "m", "n", "k", "latency")}
        versions[(table.system, table.engine)].add(table.version)
        for i, label in enumerate(cols["gemm_dtype"]):
            latency = cols["latency"][i]
            if label not in FIT_LABELS or latency is None or latency <= 0:
                continue
            group = points[(table.system, table.engine, label)]
            group["split"].append(split_of(shapes[i] or ""))
            for c in ("m", "n", "k"):
                group[c].append(float(cols[c][i]))
            group["measured"].append(latency / 1e3)  # ms -> s
    return points, versions


def _arrays(raw: dict[str, list[Any]], system: str, label: str, split: str) -> dict[str, Any]:
    wbytes, in_bytes, peak, bw, _ = _terms(system, label)
    keep = np.array([s == split for s in raw["split"]])
    m, n, k = (np.array(raw[c])[keep] for c in ("m", "n", "k"))
    return {
        "m": m,
        "n": n,
        "k": k,
        "m_at": _weights(m, M_KNOTS),
        "nk_at": _weights(n * k, NK_KNOTS),
        "flops": FLOPS_PER_MAC * m * n * k,
        "bytes": k * n * wbytes + m * k * in_bytes + m * n * ACTIVATION_BYTES,
        "wave": _wave_efficiency(m, n, sm_count(SYSTEM_DEVICES[system])),
        "measured": np.array(raw["measured"])[keep],
        "peak": peak,
        "bw": bw,
    }


def _thin(p: dict[str, Any], limit: int = MAX_FIT_POINTS) -> dict[str, Any]:
    """Every k-th point of ``p`` (deterministic), at most about ``limit``."""
    step = max(1, len(p["measured"]) // limit)

    def thin(v: Any) -> Any:
        if isinstance(v, tuple):
            return tuple(thin(x) for x in v)
        return v[::step] if isinstance(v, np.ndarray) else v

    return {key: thin(v) for key, v in p.items()}


def _wheel_version(root: Path) -> str:
    """The wheel's version from its ``*.dist-info/METADATA``, beside ``root`` or above it
    (``--kernels`` may name the unpacked wheel or its ``aiconfigurator_core/systems/data``)."""
    folder = root.resolve()
    metas = [
        m for f in (folder, *folder.parents[:3]) for m in sorted(f.glob("*.dist-info/METADATA"))
    ]
    for meta in metas:
        found = re.search(r"^Version: (\S+)", meta.read_text(encoding="utf-8"), re.M)
        if found:
            return found.group(1)
    return "unknown"


def _source(root: Path, script: str, model: str) -> dict[str, str]:
    """A fitted table's provenance: the wheel, its licence, the split, the script, the form."""
    return {
        "package": "aiconfigurator-core",
        "version": _wheel_version(root),
        "licence": "Apache-2.0 (see NOTICE)",
        "split": "train: crc32(shape text) % 4 != 0 (app.core.validation.kernels.split_of)",
        "script": script,
        "model": model,
    }


def fit_arguments(doc: str | None, default_out: Path, argv: list[str] | None) -> argparse.Namespace:
    """A fit script's command line: ``--kernels`` (the unpacked wheel) and ``--out`` (the
    fitted table, by default the packaged one); ``doc``: the script's docstring."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--kernels", type=Path, required=True, help="the unpacked wheel")
    parser.add_argument("--out", type=Path, default=default_out)
    return parser.parse_args(argv)


def write_fit(
    args: argparse.Namespace, *, fmt: str, script: str, model: str, key: str, entries: list[Any]
) -> None:
    """Write a fitted table to ``args.out``: its format, its provenance (:func:`_source`) and
    its ``entries`` under ``key``."""
    body = {"format": fmt, "source": _source(args.kernels, script, model), key: entries}
    args.out.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    args = fit_arguments(__doc__, KERNEL_FIT_PATH, argv)
    points, versions = _collect(args.kernels)
    gram = _second_differences((len(SHAPE_M_KNOTS), len(SHAPE_NK_KNOTS), len(SHAPE_NK_KNOTS)))
    entries: list[dict[str, Any]] = []
    for (system, engine, label), raw in sorted(points.items()):
        train = _arrays(raw, system, label, "train")
        test = _arrays(raw, system, label, "test")
        if len(train["m"]) < MIN_POINTS:
            continue
        waves = sm_count(SYSTEM_DEVICES[system]) is not None
        effs, mem, fixed_s, share = _fit(_thin(train), _terms(system, label)[4], waves)
        shape = _fit_shape(train, (effs, mem, fixed_s, share), gram)
        planes = shape.reshape(len(SHAPE_M_KNOTS), len(SHAPE_NK_KNOTS), len(SHAPE_NK_KNOTS))
        entries.append(
            {
                "device": SYSTEM_DEVICES[system],
                "system": system,
                "engine": engine,
                "engine_versions": sorted(versions[(system, engine)]),
                "quantization": label,
                "m_knots": list(M_KNOTS),
                "nk_knots": list(NK_KNOTS),
                "compute_efficiency": [[round(float(e), 4) for e in row] for row in effs],
                "memory_efficiency": [round(float(e), 4) for e in mem],
                "fixed_us": round(fixed_s / S_PER_US, 3),
                "tile_rows": TILE_ROWS,
                "tile_cols": TILE_COLS,
                "wave_share": round(share, 3),
                "shape_m_knots": list(SHAPE_M_KNOTS),
                "shape_n_knots": list(SHAPE_NK_KNOTS),
                "shape_k_knots": list(SHAPE_NK_KNOTS),
                "shape_efficiency": [
                    [[float(f"{e:.4g}") for e in row] for row in plane] for plane in planes
                ],
                "train": {"points": len(train["m"]), "median_abs_error_pct": 0.0},
                "test": {"points": len(test["m"]), "median_abs_error_pct": 0.0},
            }
        )
        rounded = (
            np.array(entries[-1]["compute_efficiency"]),
            np.array(entries[-1]["memory_efficiency"]),
            entries[-1]["fixed_us"] * S_PER_US,
            entries[-1]["wave_share"],
        )
        rounded_shape = np.array(entries[-1]["shape_efficiency"]).ravel()
        for split, p in (("train", train), ("test", test)):
            entries[-1][split]["median_abs_error_pct"] = _median_abs_pct(p, rounded, rounded_shape)
        print(
            f"{system} {engine} {label}: train {entries[-1]['train']} test {entries[-1]['test']}",
            file=sys.stderr,
        )
    write_fit(
        args,
        fmt=KERNEL_FIT_FORMAT,
        script="python -m scripts.fit_kernels",
        model="max(flops / (peak * compute_efficiency(M, K*N)) * ((1 - wave_share) + "
        "wave_share / wave_efficiency(M, N)), bytes / (hbm * memory_efficiency(K*N))) + "
        "fixed_us; bilinear in log2(M), log2(K*N) between knots; wave_efficiency = tiles / "
        "(ceil(tiles / SMs) * SMs), tiles = ceil(M / tile_rows) * ceil(N / tile_cols); "
        "both efficiencies times shape_efficiency(M, N, K) (each capped at 1): trilinear in "
        "log2(M), log2(N), log2(K) and in the log of the factor between the shape knots",
        key="gemm",
        entries=entries,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
