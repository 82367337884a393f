"""Fit the runner's attention kernel terms to AIConfigurator's measured kernels (issue 30).

    python -m scripts.fit_kernels_attention --kernels kernels/wheel \
        [--out app/core/runner/data/kernel_fit_attention.json]

Per (system, engine, attention family, ``<compute>/kv <KV>`` label) it fits, on the TRAIN split
only (``split_of``, as ``scripts.fit_kernels``), the terms of
:mod:`app.core.runner.kernel_fit_attention`: a compute and a memory efficiency table over
``log2(query rows)`` x ``log2(context)`` knots (each knot free in its bounds), a head-width
factor of both rates, for GQA a query-group level of both rates and of the per-row floor, a
per-query-row floor and a fixed cost. The flops and bytes of every point are the runner's
(``ForwardBuilder.gqa_attention_kernel`` / ``mla_attention_kernel``, the shapes
``validate --kernels`` builds); only the efficiencies and floors are free. Loss, optimiser,
knot interpolation and split are the GEMM fit's (``scripts.fit_kernels``). Train and test
residuals (median absolute % error) go into the file beside each curve.

Needs pyarrow and numpy (``pip install 'chunkwise[kernels]'``); never imported by ``app``.
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from app.core.catalog.architecture import KV_TENSORS
from app.core.catalog.devices import get_device
from app.core.catalog.hardware import BYTES_PER_GB
from app.core.catalog.quantization import BYTES_8BIT, BYTES_16BIT, DType
from app.core.runner.kernel_fit import S_PER_US
from app.core.runner.kernel_fit_attention import (
    ATTENTION_FIT_FORMAT,
    ATTENTION_FIT_PATH,
    CONTEXT_ATTENTION,
    CONTEXT_MLA,
    GENERATION_ATTENTION,
    GENERATION_MLA,
    S_PER_NS,
    UNGROUPED_KNOTS,
    UNGROUPED_LEVELS,
    label_is_fp8_compute,
)
from app.core.runner.layers import FLOPS_PER_MAC, Q_AND_O, attended_pairs
from app.core.runner.plan import ACTIVATION_BYTES, FLOPS_PER_TFLOP
from app.core.validation.kernels import DEEPSEEK_V3_MLA, SYSTEM_DEVICES, split_of
from app.services.kernels import _read, _shape_text, find_data_dir, list_tables
from scripts.fit_kernels import (
    MIN_POINTS,
    PERCENT,
    _grid,
    _thin,
    _weights,
    fit_arguments,
    write_fit,
)

TABLE_FAMILIES = {
    "context_attention_perf": CONTEXT_ATTENTION,
    "generation_attention_perf": GENERATION_ATTENTION,
    "context_mla_perf": CONTEXT_MLA,
    "generation_mla_perf": GENERATION_MLA,
}
#: Query rows (new tokens x local heads): a prefill's run from one short request to a large
#: batch of long ones, a decode's from one request of one head to 2,048 x 64.
PREFILL_ROW_KNOTS = (2.0**4, 2.0**8, 2.0**12, 2.0**16, 2.0**20, 2.0**24)
DECODE_ROW_KNOTS = (1.0, 2.0**3, 2.0**6, 2.0**9, 2.0**12, 2.0**15, 2.0**17)
ROW_KNOTS = {
    CONTEXT_ATTENTION: PREFILL_ROW_KNOTS,
    CONTEXT_MLA: PREFILL_ROW_KNOTS,
    GENERATION_ATTENTION: DECODE_ROW_KNOTS,
    GENERATION_MLA: DECODE_ROW_KNOTS,
}
CONTEXT_KNOTS = (1.0, 2.0**4, 2.0**7, 2.0**10, 2.0**13, 2.0**16)
#: Every head width the tables measure: the engines pick their kernel by head width.
HEAD_DIM_KNOTS = (64.0, 128.0, 192.0, 256.0, 512.0)
#: Query heads per KV head the GQA tables measure (1 ... 128): a level of both rates and of the
#: per-row floor at each (``AttentionCurve.group_knots``).
GROUP_KNOTS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)
GQA_FAMILIES = (CONTEXT_ATTENTION, GENERATION_ATTENTION)
ELEMENT_BYTES = {"bfloat16": BYTES_16BIT, "float16": BYTES_16BIT, "fp8": BYTES_8BIT}
MAX_FIT_POINTS = 3_000
ROUNDS = 4
BOUNDS = {
    "compute": (0.002, 1.0),
    "memory": (0.01, 1.0),
    "head_dim": (0.1, 1.0),
    "row_s": (1e-13, 1e-7),
    "group": (0.05, 1.0),
    "group_row": (1e-3, 100.0),
}
MAX_FIXED_US = 300.0
MLA_LATENT = DEEPSEEK_V3_MLA.cache_elements_per_token
#: MLA widths per head: the absorbed decode (latent + kv_lora_rank), the prefill (q/k + v).
MLA_DECODE_WIDTH = MLA_LATENT + DEEPSEEK_V3_MLA.kv_lora_rank
MLA_PREFILL_WIDTH = DEEPSEEK_V3_MLA.qk_head_dim + DEEPSEEK_V3_MLA.v_head_dim
_COLUMNS = ("batch_size", "isl", "step", "num_heads", "num_key_value_heads", "head_dim")


def _column(table: Any, name: str, default: float) -> np.ndarray:
    if name not in table.column_names:
        return np.full(table.num_rows, default)
    return np.nan_to_num(
        table.column(name).to_numpy(zero_copy_only=False).astype(float), nan=default
    )


def _collect(root: Path) -> tuple[dict[tuple[str, str, str, str], dict[str, list[Any]]], dict]:
    """Every usable attention point by (system, engine, family, label), with its split."""
    points: dict[tuple[str, str, str, str], dict[str, list[Any]]] = defaultdict(
        lambda: defaultdict(list)
    )
    versions: dict[tuple[str, str], set[str]] = defaultdict(set)
    for table in list_tables(find_data_dir(root), None, None):
        family = TABLE_FAMILIES.get(table.table)
        if family is None or table.system not in SYSTEM_DEVICES:
            continue
        data = _read(table.path)
        mla = family in (CONTEXT_MLA, GENERATION_MLA)
        compute = data.column("mla_dtype" if mla else "attn_dtype").to_pylist()
        kv = data.column("kv_cache_dtype").to_pylist()
        shapes = _shape_text(data).to_pylist()
        cols = {name: _column(data, name, 0.0) for name in _COLUMNS}
        cols["window_size"] = _column(data, "window_size", 0.0)
        cols["latency"] = _column(data, "latency", 0.0)
        versions[(table.system, table.engine)].add(table.version)
        for i in range(data.num_rows):
            if cols["latency"][i] <= 0 or kv[i] not in ELEMENT_BYTES:
                continue
            group = points[(table.system, table.engine, family, f"{compute[i]}/kv {kv[i]}")]
            group["split"].append(split_of(shapes[i] or ""))
            for name, values in cols.items():
                group[name].append(values[i])
    return points, versions


def _pairs(query: np.ndarray, seq: np.ndarray, window: np.ndarray) -> np.ndarray:
    """The runner's ``attended_pairs`` per point (computed once per distinct triple)."""
    triples, inverse = np.unique(np.stack([query, seq, window]), axis=1, return_inverse=True)
    values = np.array(
        [attended_pairs(int(q), int(s), int(w) or None) for q, s, w in triples.T], dtype=float
    )
    return values[inverse.reshape(-1)]


def _arrays(raw: dict[str, list[Any]], key: tuple[str, str, str, str], split: str) -> dict:
    """The runner's flops, bytes, query rows and context of every ``split`` point."""
    system, _, family, label = key
    keep = np.array([s == split for s in raw["split"]])
    a = {name: np.array(values)[keep] for name, values in raw.items() if name != "split"}
    batch, query, heads = a["batch_size"], a["isl"], a["num_heads"]
    seq = query + a["step"]
    kv_el = ELEMENT_BYTES[label.split("/kv ")[1]]
    new_tokens = batch * query
    if family in (CONTEXT_MLA, GENERATION_MLA):
        context = seq
        pairs = batch * _pairs(query, seq, np.zeros_like(seq))
        latent_bytes = (batch * seq + new_tokens) * MLA_LATENT * kv_el
        if family == GENERATION_MLA:
            width = MLA_DECODE_WIDTH
            hbm = latent_bytes + new_tokens * heads * width * ACTIVATION_BYTES
        else:
            width = MLA_PREFILL_WIDTH
            hbm = latent_bytes + (batch * seq + new_tokens) * heads * width * ACTIVATION_BYTES
        flops = FLOPS_PER_MAC * pairs * heads * width
        head_dim = np.full_like(seq, DEEPSEEK_V3_MLA.qk_head_dim)
    else:
        window, head_dim = a["window_size"], a["head_dim"]
        context = np.where(window > 0, np.minimum(seq, np.maximum(window, 1)), seq)
        pairs = batch * _pairs(query, seq, window)
        kv_out = KV_TENSORS * a["num_key_value_heads"] * head_dim
        hbm = (batch * context + new_tokens) * kv_out * kv_el + (
            Q_AND_O * new_tokens * heads * head_dim * ACTIVATION_BYTES
        )
        flops = FLOPS_PER_MAC * pairs * heads * (head_dim + head_dim)
    device = get_device(SYSTEM_DEVICES[system])
    path = device.compute_path(DType.FP8) if label_is_fp8_compute(label) else DType.BF16
    peak = (device.peak_tflops(path) or device.peak_bf16_tflops) * FLOPS_PER_TFLOP
    rows = new_tokens * heads
    group = (
        heads / np.maximum(a["num_key_value_heads"], 1)
        if family in GQA_FAMILIES
        else np.ones_like(heads)
    )
    return {
        "rows": rows,
        "row_at": _weights(rows, ROW_KNOTS[family]),
        "context_at": _weights(context, CONTEXT_KNOTS),
        "head_dim_at": _weights(head_dim, HEAD_DIM_KNOTS),
        "group_at": _weights(np.maximum(group, 1.0), GROUP_KNOTS),
        "free_tables": True,
        "flops": flops,
        "bytes": hbm,
        "measured": a["latency"] / 1e3,  # ms -> s
        "peak": peak,
        "bw": device.hbm_bandwidth_gb_s * BYTES_PER_GB,
        "launch_s": device.graph_kernel_launch_us * S_PER_US,
    }


def _bilinear(p: dict[str, Any], table: np.ndarray) -> np.ndarray:
    i, t = p["row_at"]
    j, u = p["context_at"]
    return (
        table[i, j] * (1 - t) * (1 - u)
        + table[i + 1, j] * t * (1 - u)
        + table[i, j + 1] * (1 - t) * u
        + table[i + 1, j + 1] * t * u
    )


def _monotone(free: np.ndarray) -> np.ndarray:
    """The non-decreasing table of free values (running maximum along both axes)."""
    return np.maximum.accumulate(np.maximum.accumulate(free, axis=0), axis=1)


def _table(p: dict[str, Any], free: np.ndarray) -> np.ndarray:
    """The efficiency table of ``free`` values: as they are for the attention families
    (``p["free_tables"]``), else non-decreasing (:func:`_monotone`; Gated DeltaNet, DSA)."""
    return free if p.get("free_tables", False) else _monotone(free)


def _level(at: tuple[np.ndarray, np.ndarray], levels: np.ndarray) -> np.ndarray:
    """``levels`` at each point, linear in ``log2`` between the knots (``at``: ``_weights``)."""
    j, u = at
    result: np.ndarray = levels[j] * (1 - u) + levels[j + 1] * u
    return result


def _predict_s(p: dict[str, Any], params: dict[str, np.ndarray]) -> np.ndarray:
    factor = _level(p["head_dim_at"], params["head_dim"])
    floor = p["rows"] * params["row_s"][0]
    if "group" in params:  # GQA: the query group's levels (AttentionCurve.group_knots)
        factor = factor * _level(p["group_at"], params["group"])
        floor = floor * _level(p["group_at"], params["group_row"])
    compute_eff = _bilinear(p, _table(p, params["compute"])) * factor
    compute = np.maximum(p["flops"] / (p["peak"] * compute_eff), floor)
    memory = p["bytes"] / (p["bw"] * _bilinear(p, _table(p, params["memory"])) * factor)
    return np.maximum(compute, memory) + params["fixed"][0]


def _loss(p: dict[str, Any], params: dict[str, np.ndarray]) -> float:
    return float(np.mean(np.abs(np.log(_predict_s(p, params) / p["measured"]))))


def _descend(
    p: dict[str, Any],
    params: dict[str, np.ndarray],
    name: str,
    index: Any,
    bounds: tuple[float, float],
    span: float,
) -> None:
    """Set ``params[name][index]`` to the grid value of least loss (the others fixed)."""
    array = params[name]
    best, best_loss = array[index], math.inf
    for v in _grid(float(array[index]), *bounds, span):
        array[index] = v
        loss = _loss(p, params)
        if loss < best_loss:
            best, best_loss = v, loss
    array[index] = best


def _fit(
    p: dict[str, Any],
    row_knots: tuple[float, ...],
    *,
    fit_head_dim: bool = True,
    fit_group: bool = False,
    bounds: dict[str, tuple[float, float]] = BOUNDS,
    span: float = 8.0,
) -> dict[str, np.ndarray]:
    """The free terms of least loss on ``p`` (``fit_head_dim``: False keeps every head width's
    factor at 1, for tables that measure one width; ``fit_group``: fit the query group's
    levels (GQA tables); ``bounds`` and the first round's ``span`` of each term: a kernel far
    below the peaks needs lower bounds and a wider first search)."""
    shape = (len(row_knots), len(CONTEXT_KNOTS))
    params = {
        "compute": np.full(shape, 0.3),
        "memory": np.full(shape, 0.3),
        "head_dim": np.ones(len(HEAD_DIM_KNOTS)),
        "row_s": np.array([1e-9]),
        "fixed": np.array([max(p["launch_s"], 5 * S_PER_US)]),
    }
    if fit_group:
        params["group"] = np.ones(len(GROUP_KNOTS))
        params["group_row"] = np.ones(len(GROUP_KNOTS))
    for _ in range(ROUNDS):
        _descend(p, params, "fixed", 0, (p["launch_s"], MAX_FIXED_US * S_PER_US), span)
        _descend(p, params, "row_s", 0, bounds["row_s"], span)
        for k in range(len(HEAD_DIM_KNOTS) if fit_head_dim else 0):
            _descend(p, params, "head_dim", k, bounds["head_dim"], span)
        for k in range(len(GROUP_KNOTS) if fit_group else 0):
            _descend(p, params, "group", k, bounds["group"], span)
            _descend(p, params, "group_row", k, bounds["group_row"], span)
        for name in ("compute", "memory"):
            for index in np.ndindex(*shape):
                _descend(p, params, name, index, bounds[name], span)
        span = math.sqrt(span)
    params["compute"] = _table(p, params["compute"])
    params["memory"] = _table(p, params["memory"])
    return params


def _median_abs_pct(p: dict[str, Any], params: dict[str, np.ndarray]) -> float:
    if not len(p["measured"]):
        return math.nan
    err = (_predict_s(p, params) - p["measured"]) / p["measured"]
    return round(float(np.median(np.abs(err))) * PERCENT, 2)


def _entry(key: tuple[str, str, str, str], params: dict[str, np.ndarray]) -> dict[str, Any]:
    system, engine, family, label = key
    return {
        "device": SYSTEM_DEVICES[system],
        "system": system,
        "engine": engine,
        "family": family,
        "label": label,
        **curve_terms(ROW_KNOTS[family], params),
        **group_terms(params),
    }


def curve_terms(row_knots: tuple[float, ...], params: dict[str, np.ndarray]) -> dict[str, Any]:
    """A fitted curve's knots and terms as the file holds them (rounded)."""
    return {
        "row_knots": list(row_knots),
        "context_knots": list(CONTEXT_KNOTS),
        "head_dim_knots": list(HEAD_DIM_KNOTS),
        "compute_efficiency": [[round(float(e), 4) for e in row] for row in params["compute"]],
        "memory_efficiency": [[round(float(e), 4) for e in row] for row in params["memory"]],
        "head_dim_factor": [round(float(e), 4) for e in params["head_dim"]],
        "row_ns": round(float(params["row_s"][0]) / S_PER_NS, 5),
        "fixed_us": round(float(params["fixed"][0]) / S_PER_US, 3),
    }


def group_terms(params: dict[str, np.ndarray]) -> dict[str, Any]:
    """The query group's levels as the file holds them (one level of 1 when not fitted)."""
    if "group" not in params:
        return {
            "group_knots": list(UNGROUPED_KNOTS),
            "group_factor": list(UNGROUPED_LEVELS),
            "group_row_factor": list(UNGROUPED_LEVELS),
        }
    return {
        "group_knots": list(GROUP_KNOTS),
        "group_factor": [round(float(e), 4) for e in params["group"]],
        "group_row_factor": [round(float(e), 4) for e in params["group_row"]],
    }


def _rounded(entry: dict[str, Any]) -> dict[str, np.ndarray]:
    """The parameters as written (rounded), for the residuals the file reports."""
    grouped = {}
    if "group_knots" in entry and entry["group_knots"] == list(GROUP_KNOTS):
        grouped = {
            "group": np.array(entry["group_factor"]),
            "group_row": np.array(entry["group_row_factor"]),
        }
    return {
        **grouped,
        "compute": np.array(entry["compute_efficiency"]),
        "memory": np.array(entry["memory_efficiency"]),
        "head_dim": np.array(entry["head_dim_factor"]),
        "row_s": np.array([entry["row_ns"] * S_PER_NS]),
        "fixed": np.array([entry["fixed_us"] * S_PER_US]),
    }


def with_residuals(
    entry: dict[str, Any], key: tuple[str, ...], train: dict[str, Any], test: dict[str, Any]
) -> dict[str, Any]:
    """``entry`` with its train and test points and median |error| (of the rounded terms it
    holds), reported on stderr under ``key``."""
    params = _rounded(entry)
    for name, p in (("train", train), ("test", test)):
        entry[name] = {
            "points": len(p["measured"]),
            "median_abs_error_pct": _median_abs_pct(p, params),
        }
    print(" ".join(key), f"train {entry['train']} test {entry['test']}", file=sys.stderr)
    return entry


def kernel_entries(
    points: dict[tuple[str, str, str], dict[str, list[Any]]],
    versions: dict[tuple[str, str], set[str]],
    arrays: Callable[[dict[str, list[Any]], tuple[str, str, str], str], dict[str, Any]],
    terms: Callable[[tuple[str, str, str], dict[str, Any]], dict[str, Any]],
) -> list[dict[str, Any]]:
    """One entry per (system, engine, kernel) group of a per-kernel table (Gated DeltaNet,
    DSA) with :data:`MIN_POINTS` train points or more: ``terms(key, train)`` (the fitted
    curve's terms), its engine versions and its train / test residuals."""
    entries = []
    for key, raw in sorted(points.items()):
        train, test = arrays(raw, key, "train"), arrays(raw, key, "test")
        if len(train["measured"]) < MIN_POINTS:
            continue
        system, engine, kernel = key
        entry: dict[str, Any] = {
            "device": SYSTEM_DEVICES[system],
            "system": system,
            "engine": engine,
            "kernel": kernel,
            **terms(key, train),
            "engine_versions": sorted(versions[(system, engine)]),
        }
        entries.append(with_residuals(entry, key, train, test))
    return entries


def main(argv: list[str] | None = None) -> int:
    args = fit_arguments(__doc__, ATTENTION_FIT_PATH, argv)
    points, versions = _collect(args.kernels)
    entries = []
    for key, raw in sorted(points.items()):
        train, test = _arrays(raw, key, "train"), _arrays(raw, key, "test")
        if len(train["measured"]) < MIN_POINTS:
            continue
        params = _fit(
            _thin(train, MAX_FIT_POINTS), ROW_KNOTS[key[2]], fit_group=key[2] in GQA_FAMILIES
        )
        entry = _entry(key, params)
        entry["engine_versions"] = sorted(versions[(key[0], key[1])])
        entries.append(with_residuals(entry, key, train, test))
    write_fit(
        args,
        fmt=ATTENTION_FIT_FORMAT,
        script="python -m scripts.fit_kernels_attention",
        model="max(flops / (peak * compute_efficiency(rows, context) * "
        "head_dim_factor(head_dim)), bytes / (hbm * memory_efficiency(rows, context) * "
        "head_dim_factor(head_dim)), rows * row_ns) + fixed_us; rows = new tokens x local "
        "query heads, context = KV positions per request; bilinear in log2(rows), "
        "log2(context) between knots; GQA: both rates x group_factor(group) and row_ns x "
        "group_row_factor(group), group = query heads per KV head, linear in log2(group)",
        key="attention",
        entries=entries,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
