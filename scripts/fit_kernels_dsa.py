"""Fit the runner's DeepSeek Sparse Attention kernel terms to AIConfigurator's measured kernels
(issue 30).

    python -m scripts.fit_kernels_dsa --kernels kernels/wheel \
        [--out app/core/runner/data/kernel_fit_dsa.json]

Per (system, engine, kernel) of GLM-5's kernel tables (``glm5_mqa_logits_module_perf``,
``glm5_topk_module_perf``, ``glm5_dsa_attn_module_perf``) it fits, on the TRAIN split only
(``split_of``), the attention fit's terms (``scripts.fit_kernels_attention``: compute and memory
efficiency tables over ``log2(rows)`` x ``log2(context)``, non-decreasing along both, a per-row
floor and a fixed cost; one head width is measured, so its factor stays 1) for the three
kernels of :mod:`app.core.runner.kernel_fit_dsa` (the scores of a decode, one new token per
request, fitted apart). The flops and bytes of every point are the
runner's (``layers.indexer_logits_terms`` / ``indexer_topk_terms`` / ``sparse_mla_terms``, at
the shapes ``validate --kernels`` builds: GLM-5's sizes, ``batch_size`` requests of ``isl`` new
tokens over ``isl + step`` positions). Both top-k score modes (``flat``, ``top_last``) are
fitted together: the runner does not know the scores. A top-k row measured 0 (the kernel
skipped) is not a point. Train and test residuals (median absolute % error) go into the file
beside each curve. The shape axes are rows and context, never the model.

Needs pyarrow and numpy (``pip install 'chunkwise[kernels]'``); never imported by ``app``.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from app.core.catalog.devices import get_device
from app.core.catalog.hardware import BYTES_PER_GB
from app.core.catalog.quantization import DType
from app.core.cost import ForwardShape
from app.core.runner.kernel_fit import S_PER_US
from app.core.runner.kernel_fit_dsa import (
    DSA_FIT_FORMAT,
    DSA_FIT_PATH,
    DSA_LOGITS,
    DSA_LOGITS_DECODE,
    DSA_SPARSE_MLA,
    DSA_TOPK,
)
from app.core.runner.layers import (
    SPARSE_MLA_HEAD_BLOCK,
    attended_pairs,
    indexer_logits_terms,
    indexer_topk_terms,
    sparse_mla_terms,
)
from app.core.runner.plan import FLOPS_PER_TFLOP
from app.core.validation.kernels import (
    GLM5_INDEXER,
    GLM5_MLA,
    KEY_COLUMNS,
    SYSTEM_DEVICES,
    KernelFamily,
    split_of,
)
from app.services.kernels import _read, _shape_text, find_data_dir, list_tables
from scripts.fit_kernels import _thin, _weights, fit_arguments, write_fit
from scripts.fit_kernels_attention import (
    BOUNDS,
    CONTEXT_KNOTS,
    HEAD_DIM_KNOTS,
    MAX_FIT_POINTS,
    _fit,
    _loss,
    curve_terms,
    kernel_entries,
)

TABLES = {
    "glm5_mqa_logits_module_perf": DSA_LOGITS,
    "glm5_topk_module_perf": DSA_TOPK,
    "glm5_dsa_attn_module_perf": DSA_SPARSE_MLA,
}
#: Rows: new tokens (the indexer's kernels, one decode token to 1,024 x 16,384), or new
#: tokens x the padded head block (the sparse MLA, 64 to 2^30).
TOKEN_ROW_KNOTS = (1.0, 2.0**3, 2.0**6, 2.0**9, 2.0**12, 2.0**15, 2.0**18, 2.0**21, 2.0**24)
HEAD_ROW_KNOTS = (2.0**6, 2.0**9, 2.0**12, 2.0**15, 2.0**18, 2.0**21, 2.0**24, 2.0**27, 2.0**30)
ROW_KNOTS = {
    DSA_LOGITS: TOKEN_ROW_KNOTS,
    DSA_LOGITS_DECODE: TOKEN_ROW_KNOTS,  # rows: one request's keys, walked in turn
    DSA_TOPK: TOKEN_ROW_KNOTS,
    DSA_SPARSE_MLA: HEAD_ROW_KNOTS,
}
#: The indexer's kernels run far below the peaks at a few rows (a decode's scores of 8 requests
#: over 8,192 keys take 71 us on B300, 0.2 % of its FP8 peak): lower bounds than the dense
#: attention fit's, and first searches wide enough to reach them from the starting 0.3.
DSA_BOUNDS = {**BOUNDS, "compute": (1e-5, 1.0), "memory": (1e-4, 1.0)}
#: The first search spans tried (the coordinate descent settles in a different minimum from
#: each): the fit of least train loss is kept.
FIRST_SPANS = (64.0, 256.0, 1024.0)
FP8_KV_BYTES = 1.0  # every measured row has an FP8 (e4m3) latent cache
#: The shape columns ``validate --kernels`` reads (batch_size, isl, step, num_heads).
_COLUMNS = (*KEY_COLUMNS[KernelFamily.DSA][2:6], "latency")


def _collect(root: Path) -> tuple[dict[tuple[str, str, str], dict[str, list[Any]]], dict]:
    """Every usable point by (system, engine, kernel), with its split."""
    points: dict[tuple[str, str, str], dict[str, list[Any]]] = defaultdict(
        lambda: defaultdict(list)
    )
    versions: dict[tuple[str, str], set[str]] = defaultdict(set)
    for table in list_tables(find_data_dir(root), None, None):
        kernel = TABLES.get(table.table)
        if kernel is None or table.system not in SYSTEM_DEVICES:
            continue
        data = _read(table.path)
        shapes = _shape_text(data).to_pylist()
        cols = {name: data.column(name).to_pylist() for name in _COLUMNS}
        versions[(table.system, table.engine)].add(table.version)
        for i in range(data.num_rows):
            values = {name: cols[name][i] for name in _COLUMNS}
            if not (values["latency"] and values["latency"] > 0):
                continue  # a skipped top-k (the context fits in the top-k)
            fitted = DSA_LOGITS_DECODE if kernel == DSA_LOGITS and values["isl"] == 1 else kernel
            group = points[(table.system, table.engine, fitted)]
            group["split"].append(split_of(shapes[i] or ""))
            for name, value in values.items():
                group[name].append(value)
    return points, versions


def _terms(kernel: str, a: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """The runner's flops, bytes, rows and context of every point (its own term functions)."""
    flops, hbm, rows, contexts = [], [], [], []
    topk = GLM5_INDEXER.topk
    for batch, isl, step, heads in zip(*(a[n].astype(int) for n in _COLUMNS[:-1]), strict=True):
        context = int(isl + step)
        shape = ForwardShape(
            is_decode=isl == 1, concurrency=int(batch), query_len=int(isl), seq_len=context
        )
        tokens = int(batch * isl)
        if kernel == DSA_SPARSE_MLA:
            padded = max(int(heads), SPARSE_MLA_HEAD_BLOCK)
            selected = min(context, topk)
            f, b = sparse_mla_terms(
                GLM5_MLA,
                padded,
                shape,
                tokens,
                positions=selected,
                pairs=batch * attended_pairs(int(isl), context, topk),
                kv_bytes_per_element=FP8_KV_BYTES,
            )
            rows.append(tokens * padded)
            contexts.append(selected)
        else:
            pairs = batch * attended_pairs(int(isl), context, None)
            if kernel in (DSA_LOGITS, DSA_LOGITS_DECODE):
                f, b = indexer_logits_terms(GLM5_INDEXER, shape, tokens, context, pairs)
            else:
                f, b = indexer_topk_terms(pairs)
            rows.append(context if kernel == DSA_LOGITS_DECODE else tokens)
            contexts.append(context)
        flops.append(f)
        hbm.append(b)
    return tuple(np.array(v, dtype=float) for v in (flops, hbm, rows, contexts))


def _arrays(raw: dict[str, list[Any]], key: tuple[str, str, str], split: str) -> dict:
    """The runner's flops, bytes, rows and context of every ``split`` point."""
    system, _, kernel = key
    keep = np.array([s == split for s in raw["split"]])
    a = {name: np.array(raw[name], dtype=float)[keep] for name in _COLUMNS}
    flops, hbm, rows, contexts = _terms(kernel, a)
    device = get_device(SYSTEM_DEVICES[system])
    peak = device.peak_bf16_tflops
    if kernel in (DSA_LOGITS, DSA_LOGITS_DECODE):  # the FP8 peak (plan._dsa_fit)
        peak = device.peak_tflops(device.compute_path(DType.FP8)) or device.peak_bf16_tflops
    return {
        "rows": rows,
        "row_at": _weights(np.maximum(rows, 1.0), ROW_KNOTS[kernel]),
        "context_at": _weights(contexts, CONTEXT_KNOTS),
        "head_dim_at": _weights(np.full(len(rows), HEAD_DIM_KNOTS[1]), HEAD_DIM_KNOTS),
        "flops": flops,
        "bytes": hbm,
        "measured": a["latency"] / 1e3,  # ms -> s
        "peak": peak * FLOPS_PER_TFLOP,
        "bw": device.hbm_bandwidth_gb_s * BYTES_PER_GB,
        "launch_s": device.graph_kernel_launch_us * S_PER_US,
    }


def _significant(terms: dict[str, Any], params: dict[str, np.ndarray]) -> dict[str, Any]:
    """``terms`` with the efficiencies to four significant digits: a decode's indexer runs at
    thousandths of the peak, which four decimals would round to nothing."""
    for name, table in (("compute_efficiency", "compute"), ("memory_efficiency", "memory")):
        terms[name] = [[float(f"{e:.4g}") for e in row] for row in params[table]]
    return terms


def _best_fit(train: dict[str, Any], row_knots: tuple[float, ...]) -> dict[str, np.ndarray]:
    """The fit of least train loss over :data:`FIRST_SPANS`."""
    fits = [
        _fit(train, row_knots, fit_head_dim=False, bounds=DSA_BOUNDS, span=span)
        for span in FIRST_SPANS
    ]
    return min(fits, key=lambda params: _loss(train, params))


def _terms_of_fit(key: tuple[str, str, str], train: dict[str, Any]) -> dict[str, Any]:
    """The curve of least train loss (:func:`_best_fit`), efficiencies to four digits."""
    knots = ROW_KNOTS[key[2]]
    params = _best_fit(_thin(train, MAX_FIT_POINTS), knots)
    return _significant(curve_terms(knots, params), params)


def main(argv: list[str] | None = None) -> int:
    args = fit_arguments(__doc__, DSA_FIT_PATH, argv)
    points, versions = _collect(args.kernels)
    entries = kernel_entries(points, versions, _arrays, _terms_of_fit)
    write_fit(
        args,
        fmt=DSA_FIT_FORMAT,
        script="python -m scripts.fit_kernels_dsa",
        model="max(flops / (peak * compute_efficiency(rows, context)), bytes / (hbm * "
        "memory_efficiency(rows, context)), rows * row_ns) + fixed_us; peak: FP8 for the "
        "indexer scores, 16-bit otherwise; rows = new tokens (indexer scores, top-k) or new "
        "tokens x query heads padded to 64 (sparse MLA); context = cached keys scored "
        "(indexer) or latents selected, min(context, topk) (sparse MLA); bilinear in "
        "log2(rows), log2(context) between knots",
        key="dsa",
        entries=entries,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
