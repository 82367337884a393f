"""Fit the runner's Gated DeltaNet kernel terms to AIConfigurator's measured kernels (issue 31).

    python -m scripts.fit_kernels_gdn --kernels kernels/wheel \
        [--out app/core/runner/data/kernel_fit_gdn.json]

Per (system, engine, kernel) of the ``gdn_perf`` tables it fits, on the TRAIN split only
(``split_of``), the attention fit's terms (``scripts.fit_kernels_attention``: compute and memory
efficiency tables over ``log2(rows)`` x ``log2(context)``, non-decreasing along both, a per-row
floor and a fixed cost; one head width is measured, so its factor stays 1) for the four kernels
of :mod:`app.core.runner.kernel_fit_gdn`. ``rows`` is requests x value heads, ``context`` one
request's new tokens; the flops and bytes of every point are the runner's
(``layers.gdn_conv1d_terms`` / ``gdn_delta_rule_terms``, the shapes ``validate --kernels``
builds). Train and test residuals (median absolute % error) go into the file beside each curve.

Needs pyarrow and numpy (``pip install 'chunkwise[kernels]'``); never imported by ``app``.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from app.core.catalog.architecture import LinearAttentionDims
from app.core.catalog.devices import get_device
from app.core.catalog.hardware import BYTES_PER_GB
from app.core.cost import ForwardShape
from app.core.runner.kernel_fit import S_PER_US
from app.core.runner.kernel_fit_gdn import (
    GDN_CHUNKED,
    GDN_CONV_PREFILL,
    GDN_FIT_FORMAT,
    GDN_FIT_PATH,
    GDN_RECURRENT,
)
from app.core.runner.layers import gdn_conv1d_terms, gdn_delta_rule_terms
from app.core.runner.plan import FLOPS_PER_TFLOP
from app.core.validation.kernels import KEY_COLUMNS, SYSTEM_DEVICES, KernelFamily, split_of
from app.services.kernels import _read, _shape_text, find_data_dir, list_tables
from scripts.fit_kernels import _thin, _weights, fit_arguments, write_fit
from scripts.fit_kernels_attention import (
    CONTEXT_KNOTS,
    DECODE_ROW_KNOTS,
    HEAD_DIM_KNOTS,
    MAX_FIT_POINTS,
    _fit,
    curve_terms,
    kernel_entries,
)

TABLE = "gdn_perf"
GENERATION = "generation"
#: The shape columns ``validate --kernels`` reads (after kernel_source and phase), then latency.
_COLUMNS = (*KEY_COLUMNS[KernelFamily.GDN][2:], "latency")


def _kernel(source: str, phase: str) -> str | None:
    """The fitted kernel a measured ``kernel_source`` of ``phase`` is (None: not fitted; the
    decode conv1d runs below the captured-graph floor, ``kernel_fit_gdn``)."""
    decode = phase == GENERATION
    if "conv1d" in source:
        return None if decode else GDN_CONV_PREFILL
    if "delta_rule" in source:
        return GDN_RECURRENT if decode else GDN_CHUNKED
    return None


def _collect(root: Path) -> tuple[dict[tuple[str, str, str], dict[str, list[Any]]], dict]:
    """Every usable point by (system, engine, kernel), with its split."""
    points: dict[tuple[str, str, str], dict[str, list[Any]]] = defaultdict(
        lambda: defaultdict(list)
    )
    versions: dict[tuple[str, str], set[str]] = defaultdict(set)
    for table in list_tables(find_data_dir(root), None, None):
        if table.table != TABLE or table.system not in SYSTEM_DEVICES:
            continue
        data = _read(table.path)
        sources = data.column("kernel_source").to_pylist()
        phases = data.column("phase").to_pylist()
        shapes = _shape_text(data).to_pylist()
        cols = {name: data.column(name).to_pylist() for name in _COLUMNS}
        versions[(table.system, table.engine)].add(table.version)
        for i in range(data.num_rows):
            kernel = _kernel(sources[i] or "", phases[i] or "")
            values = {name: cols[name][i] for name in _COLUMNS}
            if kernel is None or not all(v and v > 0 for v in values.values()):
                continue
            if values["num_v_heads"] % values["num_k_heads"]:
                continue  # refused by validate --kernels too
            group = points[(table.system, table.engine, kernel)]
            group["split"].append(split_of(shapes[i] or ""))
            for name, value in values.items():
                group[name].append(value)
    return points, versions


def _terms(kernel: str, a: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The runner's flops and bytes of every point (its own term functions)."""
    flops, hbm = [], []
    for batch, length, kh, dk, vh, dv, conv in zip(
        *(a[n].astype(int) for n in _COLUMNS[:-1]), strict=True
    ):
        dims = LinearAttentionDims(
            num_key_heads=int(kh),
            num_value_heads=int(vh),
            key_head_dim=int(dk),
            value_head_dim=int(dv),
            conv_kernel_size=int(conv),
        )
        shape = ForwardShape(
            is_decode=kernel == GDN_RECURRENT,
            concurrency=int(batch),
            query_len=int(length),
            seq_len=int(length),
        )
        terms = gdn_conv1d_terms if kernel == GDN_CONV_PREFILL else gdn_delta_rule_terms
        f, b = terms(dims, int(kh), int(vh), shape, int(batch * length))
        flops.append(f)
        hbm.append(b)
    return np.array(flops, dtype=float), np.array(hbm, dtype=float)


def _arrays(raw: dict[str, list[Any]], key: tuple[str, str, str], split: str) -> dict:
    """The runner's flops, bytes, rows and context of every ``split`` point."""
    system, _, kernel = key
    keep = np.array([s == split for s in raw["split"]])
    a = {name: np.array(raw[name], dtype=float)[keep] for name in _COLUMNS}
    flops, hbm = _terms(kernel, a)
    device = get_device(SYSTEM_DEVICES[system])
    rows = a["batch_size"] * a["num_v_heads"]
    return {
        "rows": rows,
        "row_at": _weights(np.maximum(rows, 1.0), DECODE_ROW_KNOTS),
        "context_at": _weights(a["seq_len"], CONTEXT_KNOTS),
        "head_dim_at": _weights(a["head_k_dim"], HEAD_DIM_KNOTS),
        "flops": flops,
        "bytes": hbm,
        "measured": a["latency"] / 1e3,  # ms -> s
        "peak": device.peak_bf16_tflops * FLOPS_PER_TFLOP,
        "bw": device.hbm_bandwidth_gb_s * BYTES_PER_GB,
        "launch_s": device.graph_kernel_launch_us * S_PER_US,
    }


def _terms_of_fit(key: tuple[str, str, str], train: dict[str, Any]) -> dict[str, Any]:
    """The curve fitted to ``train`` (one head width measured: its factor stays 1)."""
    params = _fit(_thin(train, MAX_FIT_POINTS), DECODE_ROW_KNOTS, fit_head_dim=False)
    return curve_terms(DECODE_ROW_KNOTS, params)


def main(argv: list[str] | None = None) -> int:
    args = fit_arguments(__doc__, GDN_FIT_PATH, argv)
    points, versions = _collect(args.kernels)
    entries = kernel_entries(points, versions, _arrays, _terms_of_fit)
    write_fit(
        args,
        fmt=GDN_FIT_FORMAT,
        script="python -m scripts.fit_kernels_gdn",
        model="max(flops / (peak_bf16 * compute_efficiency(rows, context)), bytes / (hbm * "
        "memory_efficiency(rows, context)), rows * row_ns) + fixed_us; rows = requests x "
        "local value heads, context = one request's new tokens; bilinear in log2(rows), "
        "log2(context) between knots",
        key="gdn",
        entries=entries,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
