"""Fit the runner's MoE and collective terms to AIConfigurator's measured kernels (issue 30).

    python -m scripts.fit_kernels_moe --kernels kernels/wheel \
        [--moe-out app/core/runner/data/kernel_fit_moe.json] \
        [--comm-out app/core/runner/data/kernel_fit_comm.json]

MoE (``moe_perf``): per (system, engine, MoE dtype, engine version; the newest is the runner's
``default``), on the TRAIN split (``split_of``) of the
``balanced`` rows, the terms of :mod:`app.core.runner.kernel_fit_moe`: a compute efficiency
over tokens-per-expert x expert-weight knots, a memory efficiency over the weight knots, a
fixed cost per grouped GEMM, a cost per touched expert and the routing passes per routed
token. The flops, bytes, routes and touched experts of a point are the runner's own
(``expert_load`` and ``ForwardBuilder.moe_experts``' byte counts on the plan ``validate
--kernels`` builds); only the efficiencies and costs are free. Skewed (``power_law_*``) rows are
never fitted: their held-out error against the balanced curve is reported apart.

Collectives (``nccl_perf``, ``custom_allreduce_perf``): per (system, library, engine, op, GPUs,
launch mode) the alpha-beta curve of :mod:`app.core.runner.kernel_fit_comm`.

The loss is the mean absolute log error, minimised by coordinate descent over bounded grids
that narrow each round (as ``scripts.fit_kernels``). Train and test residuals (median absolute
% error) go into the file beside each curve. Needs pyarrow and numpy; never imported by ``app``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from packaging.version import Version

from app.core.catalog.devices import get_device
from app.core.catalog.hardware import BYTES_PER_GB
from app.core.catalog.quantization import LinearQuantAction, Quantization
from app.core.runner.kernel_fit import S_PER_US
from app.core.runner.kernel_fit_comm import (
    CUSTOM,
    EAGER,
    GRAPH,
    KERNEL_FIT_COMM_FORMAT,
    KERNEL_FIT_COMM_PATH,
    NCCL,
    NCCL_ENGINE,
)
from app.core.runner.kernel_fit_moe import (
    GROUPED_GEMMS,
    KERNEL_FIT_MOE_FORMAT,
    KERNEL_FIT_MOE_PATH,
    MXFP4_MARLIN_MOE_LABEL,
    MXFP4_MOE_LABELS,
    moe_table_label,
    served_moe_kernels,
)
from app.core.runner.layers import FLOPS_PER_MAC
from app.core.runner.plan import ACTIVATION_BYTES, FLOPS_PER_TFLOP, GEMM_INPUT_BYTES, _compute_paths
from app.core.validation.kernels import (
    _ELEMENT_BYTES,
    _NCCL_OPS,
    _NONGATED,
    KEY_COLUMNS,
    MIN_LATENCY_MOE,
    NONGATED_MOE,
    SYSTEM_DEVICES,
    KernelFamily,
    split_of,
)
from app.services.kernels import _read, _shape_text, find_data_dir, list_tables
from scripts.fit_kernels import (
    MIN_POINTS,
    PERCENT,
    _grid,
    _thin,
    _weights,
    _wheel_version,
)

#: Tokens per touched expert (the M of each expert's GEMMs).
TPE_KNOTS = (1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0)
#: One expert's weight elements on a device (all its matrices): more tiles per expert.
WEIGHT_KNOTS = (2.0**19, 2.0**23, 2.0**27)
#: Message sizes (bytes) of the collectives' bandwidth curve.
MESSAGE_KNOTS = tuple(2.0**e for e in (10, 14, 17, 20, 23, 26, 29))
#: The smallest calls (tokens per call, all ranks) whose measured latency, less the curve's
#: per-expert and per-byte terms, is an unfused MoE call's floor in a captured graph
#: (``graph_call_floor_us``): the floor is what is left as the work goes to zero.
SMALL_CALL_TOKENS = 8
#: The unfused kernels (of :data:`SERVED_MOE_KERNELS` / ``SERVED_MOE_KERNELS_ON``, on a device
#: where they run more than the grouped GEMMs) whose in-graph call floor is written:
#: vLLM's INT4 ``compressed-tensors`` WNA16 experts on Marlin, measured (vLLM 0.24) at the
#: served checkpoint's own shape (Kimi-K2.5: 7168 x 2048, 384 experts, top-8) on every SM90 /
#: SM100 system. Not MXFP4 on Marlin: there the SM90 / SM100 tables hold one other shape
#: (Kimi-K3's 896 experts, top-16; 65-70 µs per small call, where L40S and RTX PRO 6000
#: measure gpt-oss's shape at 19-26 µs), a floor that does not transfer (docs/kernels.md,
#: "vLLM's INT4 Marlin experts in a captured graph"). TensorRT-LLM's MXFP4 x BF16 experts on
#: H100 / H200: the TRITON MoE the collector pins on SM90 at gpt-oss's own shape (2880 x 2880,
#: 128 / 32 experts, top-4), the served kernels (docs/kernels.md, "TensorRT-LLM's TRITON MoE on
#: Hopper in a captured graph").
CALL_FLOOR_KERNELS = frozenset({("vllm", "int4_wo"), ("trtllm", "w4a16_mxfp4")})
#: measured MoE dtype -> (runner action, MXFP4 activations).
MOE_ACTIONS: dict[str, tuple[LinearQuantAction, str]] = {
    "bfloat16": (LinearQuantAction.DISABLED, "fp4"),
    "fp8": (LinearQuantAction.FP8, "fp4"),
    "fp8_block": (LinearQuantAction.FP8, "fp4"),
    "int4_wo": (LinearQuantAction.W4A16, "fp4"),
    "nvfp4": (LinearQuantAction.NVFP4, "fp4"),
    **{label: (LinearQuantAction.MXFP4, act) for act, label in MXFP4_MOE_LABELS.items()},
    MXFP4_MARLIN_MOE_LABEL: (LinearQuantAction.MXFP4, "bf16"),
}
BALANCED = "balanced"
GATED_IN_MATRICES = 2  # gate + up (a non-gated expert has one input matrix)
ROUNDS = 4
MOE_BOUNDS = {
    "compute": (0.002, 1.0),
    "memory": (0.02, 1.0),
    "fixed": (0.0, 300.0 * S_PER_US),
    "expert": (0.0, 20.0 * S_PER_US),
    "passes": (0.0, 40.0),
}
COMM_BOUNDS = {
    "latency": (0.5 * S_PER_US, 200.0 * S_PER_US),
    "bandwidth": (0.01, 2000.0),
}


# -- generic coordinate descent ------------------------------------------------------------------
def _coordinate_descent(
    loss: Callable[[], float],
    slots: list[tuple[np.ndarray, Any, tuple[float, float]]],
    span: float = 8.0,
) -> None:
    """Each slot ``(array, index, bounds)`` in turn set to its grid value of least loss."""
    for _ in range(ROUNDS):
        for array, index, (low, high) in slots:
            value = float(array[index])
            if value <= 0:  # a zero start: search upwards from a small share of the bound
                value = high / 1e3
            grid = _grid(value, max(low, 1e-30), high, span)
            if low == 0:
                grid = np.append(grid, 0.0)
            best, best_loss = array[index], math.inf
            for v in grid:
                array[index] = v
                current = loss()
                if current < best_loss:
                    best, best_loss = v, current
            array[index] = best
        span = math.sqrt(span)


def _median_abs_pct(predicted: np.ndarray, measured: np.ndarray) -> float:
    if not len(measured):
        return math.nan
    return round(float(np.median(np.abs(predicted / measured - 1))) * PERCENT, 2)


# -- MoE -----------------------------------------------------------------------------------------
#: The validator's MoE key columns num_tokens .. moe_ep_size (the shape), and the latency.
_MOE_SHAPE = KEY_COLUMNS[KernelFamily.MOE][1:8]
_MOE_COLUMNS = (*_MOE_SHAPE, "latency")


#: The wheel's declaration that a version's table reuses an older version's rows for the
#: shapes it did not collect again (``reuse.yaml`` beside the table: ``table``,
#: ``from_version``); e.g. TensorRT-LLM 1.3.0rc23's Blackwell ``moe_perf`` collected the DSV4
#: shapes only and declares every other shape (gpt-oss's among them) the 1.3.0rc20 rows.
REUSE_FILE = "reuse.yaml"


def _with_reused_rows(path: Path, data: Any) -> Any:
    """``data`` (the table at ``path``) plus the rows of the versions its ``reuse.yaml``
    declares reused, for the (dtype, kernel, shape, distribution) keys it has not collected."""
    declaration = path.parent / REUSE_FILE
    if not declaration.is_file():
        return data
    import pyarrow as pa
    import yaml

    key_columns = ("moe_dtype", "kernel_source", *_MOE_SHAPE, "distribution")

    def keys(t: Any) -> list[tuple[Any, ...]]:
        return list(zip(*(t.column(c).to_pylist() for c in key_columns), strict=True))

    table_name = path.stem
    for item in yaml.safe_load(declaration.read_text(encoding="utf-8")).get("reuse") or ():
        if item.get("table") != table_name:
            continue
        older = _read(path.parent.parent / str(item["from_version"]) / path.name)
        have = set(keys(data))
        mask = pa.array([k not in have for k in keys(older)])
        shared = [c for c in data.column_names if c in older.column_names]
        data = data.select(shared)
        extra = older.filter(mask).select(shared).cast(data.schema)
        data = pa.concat_tables([data, extra])
    return data


def _collect_moe(root: Path) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    """Every usable MoE point by (system, engine, dtype, engine version): columns, split,
    distribution, gating."""
    parts: dict[tuple[str, str, str, str], dict[str, list[np.ndarray]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for table in list_tables(find_data_dir(root), None, None):
        if table.table != "moe_perf" or table.system not in SYSTEM_DEVICES:
            continue
        data = _with_reused_rows(table.path, _read(table.path))
        splits = np.array([split_of(s or "") == "train" for s in _shape_text(data).to_pylist()])
        kernels = [k or "" for k in data.column("kernel_source").to_pylist()]
        dtypes = np.array(
            [
                moe_table_label(d or "", k)
                for d, k in zip(data.column("moe_dtype").to_pylist(), kernels, strict=True)
            ],
            dtype=object,
        )
        dist = np.array(data.column("distribution").to_pylist(), dtype=object)
        min_latency = np.array([MIN_LATENCY_MOE in k for k in kernels])
        nongated = np.array([_NONGATED in k for k in kernels])
        cols = {c: data.column(c).to_numpy(zero_copy_only=False) for c in _MOE_COLUMNS}
        for label in set(dtypes) & set(MOE_ACTIONS):
            keep = (dtypes == label) & np.isfinite(cols["latency"]) & (cols["latency"] > 0)
            keep &= (cols["topk"] <= cols["num_experts"]) & ~min_latency  # reported apart
            shapes = zip(
                *(cols[c][keep].tolist() for c in ("hidden_size", "inter_size", "topk")),
                cols["num_experts"][keep].tolist(),
                strict=True,
            )
            group = parts[(table.system, table.engine, label, table.version)]
            group["train"].append(splits[keep])
            group["dist"].append(dist[keep])
            group["gated"].append(
                ~nongated[keep]
                & np.array([tuple(x) not in NONGATED_MOE for x in shapes], dtype=bool)
            )
            for c in _MOE_COLUMNS:
                group[c].append(cols[c][keep].astype(float))
    return {key: {c: np.concatenate(v) for c, v in g.items()} for key, g in parts.items()}


def _moe_terms(system: str, label: str) -> tuple[float, float, float, float, float]:
    """Weight bytes per element, GEMM input bytes, matrix peak flops/s, HBM peak bytes/s and
    the graph launch floor (s): the plan's paths for ``label`` experts on ``system``."""
    device = get_device(SYSTEM_DEVICES[system])
    action, activation = MOE_ACTIONS[label]
    quantization = Quantization(linear=action)
    matrix, *_ = _compute_paths(device, quantization, activation, [])  # type: ignore[arg-type]
    peak = (device.peak_tflops(matrix) or device.peak_bf16_tflops) * FLOPS_PER_TFLOP
    return (
        quantization.linear_format.weight_bytes_per_param,
        GEMM_INPUT_BYTES[matrix],
        peak,
        device.hbm_bandwidth_gb_s * BYTES_PER_GB,
        device.graph_kernel_launch_us * S_PER_US,
    )


def _moe_arrays(raw: dict[str, Any], keep: np.ndarray, system: str, label: str) -> dict[str, Any]:
    """The runner's per-point terms (``ForwardBuilder.moe_experts`` on the validator's plan:
    TP = moe_tp x moe_ep devices, EP = moe_ep, every device's tokens in one expert group)."""
    wbytes, in_bytes, peak, bw, floor = _moe_terms(system, label)
    tokens, h, inter, k, e, tp, ep = (raw[c][keep] for c in _MOE_SHAPE)
    routes = tokens * k / ep
    touched = e / ep * (1.0 - (1.0 - k / e) ** tokens)
    width = inter / tp
    in_matrices = np.where(raw["gated"][keep], GATED_IN_MATRICES, 1)
    up_n = in_matrices * width
    weights = (in_matrices + 1) * h * width
    return {
        "m": routes / touched,  # tokens per touched expert (``_thin`` counts points by it)
        "tpe_at": _weights(routes / touched, TPE_KNOTS),
        "w_at": _weights(_weight_variable(touched, weights), WEIGHT_KNOTS),
        "flops_up": FLOPS_PER_MAC * routes * h * up_n,
        "flops_down": FLOPS_PER_MAC * routes * width * h,
        "bytes_up": touched * h * up_n * wbytes
        + routes * h * in_bytes
        + routes * up_n * ACTIVATION_BYTES,
        "bytes_down": touched * width * h * wbytes
        + routes * width * in_bytes
        + routes * h * ACTIVATION_BYTES,
        "touched": touched,
        "route_bytes": routes * h * ACTIVATION_BYTES,
        "measured": raw["latency"][keep] / 1e3,  # ms -> s
        "dist": raw["dist"][keep],
        "peak": peak,
        "bw": bw,
        "floor": floor,
    }


def _weight_variable(touched: np.ndarray, weights: np.ndarray) -> np.ndarray:
    return weights


def _nearest(filled: list[int], i: int) -> int:
    """The filled knot nearest to knot ``i``."""
    return min(filled, key=lambda j: abs(j - i))


def _moe_predict(p: dict[str, Any], q: dict[str, np.ndarray]) -> np.ndarray:
    i, t = p["tpe_at"]
    j, u = p["w_at"]
    table = q["compute"]
    ce = (
        table[i, j] * (1 - t) * (1 - u)
        + table[i + 1, j] * t * (1 - u)
        + table[i, j + 1] * (1 - t) * u
        + table[i + 1, j + 1] * t * u
    )
    mem = q["memory"][j] * (1 - u) + q["memory"][j + 1] * u
    rate, bandwidth = p["peak"] * ce, p["bw"] * mem
    launch = max(float(q["fixed"][0]), p["floor"]) + p["touched"] * q["expert"][0]
    up = np.maximum(p["flops_up"] / rate, p["bytes_up"] / bandwidth)
    down = np.maximum(p["flops_down"] / rate, p["bytes_down"] / bandwidth)
    seconds: np.ndarray = up + down + 2 * launch + q["passes"][0] * p["route_bytes"] / p["bw"]
    return seconds


def _fit_moe(p: dict[str, Any]) -> dict[str, np.ndarray]:
    q = {
        "compute": np.full((len(TPE_KNOTS), len(WEIGHT_KNOTS)), 0.3),
        "memory": np.full(len(WEIGHT_KNOTS), 0.6),
        "fixed": np.array([max(p["floor"], 5 * S_PER_US)]),
        "expert": np.array([0.1 * S_PER_US]),
        "passes": np.array([2.0]),
    }
    slots: list[tuple[np.ndarray, Any, tuple[float, float]]] = [
        (q["fixed"], 0, MOE_BOUNDS["fixed"]),
        (q["expert"], 0, MOE_BOUNDS["expert"]),
        (q["passes"], 0, MOE_BOUNDS["passes"]),
        *((q["memory"], j, MOE_BOUNDS["memory"]) for j in range(len(WEIGHT_KNOTS))),
        *(
            (q["compute"], (i, j), MOE_BOUNDS["compute"])
            for i in range(len(TPE_KNOTS))
            for j in range(len(WEIGHT_KNOTS))
        ),
    ]

    def loss() -> float:
        return float(np.mean(np.abs(np.log(_moe_predict(p, q) / p["measured"]))))

    _coordinate_descent(loss, slots)
    return q


def _graph_call_floor_us(
    raw: dict[str, Any], balanced: np.ndarray, q: dict[str, np.ndarray], key: tuple[str, ...]
) -> float:
    """An unfused MoE call's floor in a captured graph (µs): the median, over the balanced
    train rows of at most :data:`SMALL_CALL_TOKENS` tokens, of the measured latency less the
    curve's per-expert and per-byte terms. The collectors graph-replay the call
    (``benchmark_with_power``), and for an engine of :data:`SERVED_MOE_KERNELS` the served
    graph runs the same kernels, so this is a served cost, not a per-op host or layout cost."""
    system, _, label, _ = key
    p = _moe_arrays(
        raw, balanced & raw["train"] & (raw["num_tokens"] <= SMALL_CALL_TOKENS), system, label
    )
    if len(p["measured"]) == 0:
        raise SystemExit(f"fit_kernels_moe: no rows of <= {SMALL_CALL_TOKENS} tokens for {key}")
    floors = 2 * max(float(q["fixed"][0]), p["floor"])
    variable = _moe_predict(p, q) - floors
    return round(float(np.median(p["measured"] - variable)) / S_PER_US, 3)


def _moe_entries(root: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    points = _collect_moe(root)
    entries, skewed = [], []
    for (system, engine, label, version), raw in sorted(points.items()):
        balanced = raw["dist"] == BALANCED
        train = _moe_arrays(raw, balanced & raw["train"], system, label)
        if len(train["measured"]) < MIN_POINTS:
            continue
        q = _fit_moe(_thin(train))
        entry = {
            "device": SYSTEM_DEVICES[system],
            "system": system,
            "engine": engine,
            "engine_version": version,
            "default": False,
            "quantization": label,
            "tpe_knots": list(TPE_KNOTS),
            "weight_knots": list(WEIGHT_KNOTS),
            "compute_efficiency": [[round(float(e), 4) for e in row] for row in q["compute"]],
            "memory_efficiency": [round(float(e), 4) for e in q["memory"]],
            "fixed_us": round(max(float(q["fixed"][0]), train["floor"]) / S_PER_US, 3),
            "expert_us": round(float(q["expert"][0]) / S_PER_US, 4),
            "route_passes": round(float(q["passes"][0]), 3),
        }
        rounded = {
            "compute": np.array(entry["compute_efficiency"]),
            "memory": np.array(entry["memory_efficiency"]),
            "fixed": np.array([entry["fixed_us"] * S_PER_US]),
            "expert": np.array([entry["expert_us"] * S_PER_US]),
            "passes": np.array([entry["route_passes"]]),
        }
        served = served_moe_kernels(SYSTEM_DEVICES[system], engine, label)
        if (engine, label) in CALL_FLOOR_KERNELS and served > GROUPED_GEMMS:
            entry["graph_call_floor_us"] = _graph_call_floor_us(
                raw, balanced, rounded, (system, engine, label, version)
            )
        for split, mask in (("train", raw["train"]), ("test", ~raw["train"])):
            p = _moe_arrays(raw, balanced & mask, system, label)
            entry[split] = {
                "points": len(p["measured"]),
                "median_abs_error_pct": _median_abs_pct(_moe_predict(p, rounded), p["measured"]),
            }
        for split, mask in (("train", raw["train"]), ("test", ~raw["train"])):
            p = _moe_arrays(raw, ~balanced & mask, system, label)
            skewed.append(
                {
                    "key": (SYSTEM_DEVICES[system], system, engine),
                    "split": split,
                    "dist": p["dist"],
                    "m": p["m"],
                    "ratio": p["measured"] / _moe_predict(p, rounded),
                }
            )
        entries.append(entry)
        print(
            f"moe {system} {engine} {label} {version}: {entry['train']} {entry['test']}",
            file=sys.stderr,
        )
    newest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for entry in entries:  # the runner prices with each group's newest engine version
        group = (entry["device"], entry["engine"], entry["quantization"])
        best = newest.get(group)
        if best is None or Version(entry["engine_version"]) > Version(best["engine_version"]):
            newest[group] = entry
    for entry in newest.values():
        entry["default"] = True
    return entries, _skew_entries(skewed)


def _skew_entries(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (device, engine, skewed distribution): the median ratio of the measured latency to
    the balanced curve's prediction, per tokens-per-expert knot (the train rows nearest each
    knot in log2; a knot with too few rows takes its nearest neighbour's), over every dtype
    and version of the engine on the device; and the corrected rows' residuals per split."""
    grouped: dict[tuple[Any, ...], dict[str, list[np.ndarray]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for part in parts:
        for dist in set(part["dist"]):
            sel = part["dist"] == dist
            group = grouped[(*part["key"], dist)]
            group[part["split"] + "_m"].append(part["m"][sel])
            group[part["split"] + "_ratio"].append(part["ratio"][sel])
    log_knots = np.log2(np.array(TPE_KNOTS))
    entries = []
    for (device, system, engine, dist), group in sorted(grouped.items()):
        m = np.concatenate(group["train_m"])
        ratio = np.concatenate(group["train_ratio"])
        nearest = np.abs(np.log2(m)[:, None] - log_knots[None, :]).argmin(axis=1)
        factors: list[float | None] = [
            float(np.median(ratio[nearest == i])) if (nearest == i).sum() >= MIN_POINTS else None
            for i in range(len(TPE_KNOTS))
        ]
        filled = [i for i, f in enumerate(factors) if f is not None]
        if not filled:
            continue
        factor = [round(factors[_nearest(filled, i)] or 1.0, 4) for i in range(len(TPE_KNOTS))]
        entry: dict[str, Any] = {
            "device": device,
            "system": system,
            "engine": engine,
            "distribution": dist,
            "tpe_knots": list(TPE_KNOTS),
            "factor": factor,
        }
        for split in ("train", "test"):
            m = np.concatenate(group[split + "_m"]) if group[split + "_m"] else np.array([])
            ratio = (
                np.concatenate(group[split + "_ratio"]) if group[split + "_ratio"] else np.array([])
            )
            corrected = np.interp(np.log2(np.maximum(m, 1e-9)), log_knots, factor)
            entry[split] = {
                "points": len(m),
                "median_abs_error_pct": _median_abs_pct(corrected, ratio),
                "uncorrected_median_abs_error_pct": _median_abs_pct(np.ones(len(m)), ratio),
            }
        entries.append(entry)
    return entries


# -- collectives ---------------------------------------------------------------------------------
def _collect_comm(
    root: Path,
) -> tuple[dict[tuple[Any, ...], dict[str, list[Any]]], dict[tuple[str, str], set[str]]]:
    """Every collective point by (system, library, engine, op, GPUs, mode)."""
    points: dict[tuple[Any, ...], dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    versions: dict[tuple[str, str], set[str]] = defaultdict(set)
    for table in list_tables(find_data_dir(root), None, None):
        if table.table not in ("nccl_perf", "custom_allreduce_perf"):
            continue
        if table.system not in SYSTEM_DEVICES:
            continue
        data = _read(table.path)
        nccl = table.table == "nccl_perf"
        library, engine = (NCCL, NCCL_ENGINE) if nccl else (CUSTOM, table.engine)
        versions[(table.system, f"{library}:{engine}")].add(table.version)
        shapes = _shape_text(data).to_pylist()
        dtype_col = "nccl_dtype" if nccl else "allreduce_dtype"
        dtypes = data.column(dtype_col).to_pylist()
        ops = data.column("op_name").to_pylist() if nccl else ["all_reduce"] * data.num_rows
        backend = (
            data.column("backend").to_pylist()
            if "backend" in data.column_names
            else [""] * data.num_rows
        )
        gpus = data.column("num_gpus").to_pylist()
        sizes = data.column("message_size").to_pylist()
        latency = data.column("latency").to_pylist()
        for i, op in enumerate(ops):
            kind = _NCCL_OPS.get(op)
            element = _ELEMENT_BYTES.get(dtypes[i])
            if kind is None or element is None or latency[i] is None or latency[i] <= 0:
                continue
            mode = EAGER if (backend[i] or "").endswith("_eager") else GRAPH
            group = points[(table.system, library, engine, kind.value, int(gpus[i]), mode)]
            group["train"].append(split_of(shapes[i] or "") == "train")
            group["bytes"].append(float(sizes[i]) * element)
            group["measured"].append(latency[i] / 1e3)
    return points, versions


def _comm_predict(x: np.ndarray, at: Any, latency: float, bandwidth: np.ndarray) -> np.ndarray:
    j, u = at
    seconds: np.ndarray = latency + x / (
        (bandwidth[j] * (1 - u) + bandwidth[j + 1] * u) * BYTES_PER_GB
    )
    return seconds


def _comm_entries(root: Path) -> list[dict[str, Any]]:
    points, versions = _collect_comm(root)
    entries = []
    for (system, library, engine, op, gpus, mode), raw in sorted(points.items()):
        x, measured = np.array(raw["bytes"]), np.array(raw["measured"])
        train = np.array(raw["train"])
        if train.sum() < len(MESSAGE_KNOTS) + 1:
            continue
        at = _weights(x, MESSAGE_KNOTS)
        at_train = (at[0][train], at[1][train])
        latency = np.array([float(np.min(measured[train])) * 0.8])
        bandwidth = np.full(
            len(MESSAGE_KNOTS), float(np.median(x[train] / measured[train])) / BYTES_PER_GB
        )

        def loss(
            latency: np.ndarray = latency,
            bandwidth: np.ndarray = bandwidth,
            at_train: Any = at_train,
            x_train: np.ndarray = x[train],
            m_train: np.ndarray = measured[train],
        ) -> float:
            predicted = _comm_predict(x_train, at_train, float(latency[0]), bandwidth)
            return float(np.mean(np.abs(np.log(predicted / m_train))))

        # Not monotone on purpose: the kernels switch algorithm with the message (one-shot to
        # two-shot all-reduce, NCCL's LL / LL128 / Simple protocols), and the bandwidth dips.
        _coordinate_descent(
            loss,
            [
                (latency, 0, COMM_BOUNDS["latency"]),
                *((bandwidth, j, COMM_BOUNDS["bandwidth"]) for j in range(len(MESSAGE_KNOTS))),
            ],
        )
        entry = {
            "device": SYSTEM_DEVICES[system],
            "system": system,
            "library": library,
            "engine": engine,
            "versions": sorted(versions[(system, f"{library}:{engine}")]),
            "op": op,
            "num_gpus": gpus,
            "mode": mode,
            "message_knots": [int(k) for k in MESSAGE_KNOTS],
            "bandwidth_gb_s": [round(float(b), 3) for b in bandwidth],
            "latency_us": round(float(latency[0]) / S_PER_US, 3),
        }
        rounded_bw = np.array(entry["bandwidth_gb_s"])
        rounded_latency = entry["latency_us"] * S_PER_US
        for split, mask in (("train", train), ("test", ~train)):
            predicted = _comm_predict(
                x[mask], (at[0][mask], at[1][mask]), rounded_latency, rounded_bw
            )
            entry[split] = {
                "points": int(mask.sum()),
                "median_abs_error_pct": _median_abs_pct(predicted, measured[mask]),
            }
        entries.append(entry)
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=Path, required=True, help="the unpacked wheel")
    parser.add_argument("--moe-out", type=Path, default=KERNEL_FIT_MOE_PATH)
    parser.add_argument("--comm-out", type=Path, default=KERNEL_FIT_COMM_PATH)
    parser.add_argument("--only", choices=("moe", "comm"), help="refit one of the two files")
    args = parser.parse_args(argv)
    source: dict[str, Any] = {
        "package": "aiconfigurator-core",
        "version": _wheel_version(args.kernels),
        "licence": "Apache-2.0 (see NOTICE)",
        "split": "train: crc32(shape text) % 4 != 0 (app.core.validation.kernels.split_of)",
        "script": "python -m scripts.fit_kernels_moe",
    }
    body: dict[str, Any]
    if args.only in (None, "comm"):
        body = {
            "format": KERNEL_FIT_COMM_FORMAT,
            "source": {
                **source,
                "model": "latency_us + message_bytes / bandwidth(message_bytes); bandwidth "
                "linear in log2(message) between message_knots (clamped)",
            },
            "collectives": _comm_entries(args.kernels),
        }
        args.comm_out.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
    if args.only in (None, "moe"):
        entries, skewed = _moe_entries(args.kernels)
        body = {
            "format": KERNEL_FIT_MOE_FORMAT,
            "source": {
                **source,
                "distribution": "curves: balanced rows only; 'skew': per (device, engine, "
                "distribution) the median measured / balanced-curve ratio of the skewed train "
                "rows at each tokens-per-expert knot (linear in log2 between them)",
                "model": "per grouped GEMM (up, down): max(flops / (peak * "
                "compute_efficiency(tpe, W)), bytes / (hbm * memory_efficiency(W))) + fixed_us "
                "+ touched * expert_us; plus route_passes * routes * hidden * 2 B / hbm",
            },
            "moe": entries,
            "skew": skewed,
        }
        args.moe_out.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
