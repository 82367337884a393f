"""Gated DeltaNet kernel terms fitted to measured kernels (``data/kernel_fit_gdn.json``).

The file is written by ``python -m scripts.fit_kernels_gdn`` from NVIDIA AIConfigurator's
measured ``gdn_perf`` tables (``aiconfigurator-core``, Apache-2.0; ``NOTICE``,
``docs/kernels.md``), on the train split only. Per (catalog device, engine, kernel) it holds one
:class:`~app.core.runner.kernel_fit_attention.AttentionCurve`: the attention fit's form, with

- ``rows``: the kernel's independent (request, value head) sequences, ``concurrency x local
  value heads`` (the chunked and the recurrent kernels walk each sequence's state in order; the
  conv1d kernels run one program per (request, channel block));
- ``context``: the new tokens of one request (the length each sequence walks; 1 for a decode);
- ``head_dim``: the key head width (every measured shape has 128);

and the runner's own flops and bytes (:func:`~app.core.runner.layers.gdn_conv1d_terms`,
:func:`~app.core.runner.layers.gdn_delta_rule_terms`). Kernels: :data:`GDN_CHUNKED` (the prefill
``chunk_gated_delta_rule``), :data:`GDN_RECURRENT` (the decode
``fused_recurrent_gated_delta_rule``) and :data:`GDN_CONV_PREFILL` (``causal_conv1d_fn``). The
decode conv1d (``causal_conv1d_update``) has no curve: it measures 1.7-2.5 us at every shape
up to 64 requests, below the captured-graph floor every runner kernel pays (3 us), so a fit is
no better than the defaults (docs/kernels.md). A device, engine or kernel without a curve
keeps the runner's defaults; a missing or malformed file raises
:class:`~app.core.runner.fit_tables.KernelFitError` on first use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from app.core.runner.fit_tables import read_fit_json
from app.core.runner.kernel_fit_attention import (
    AttentionCurve,
    FittedAttention,
    fitted_kernels,
    parse_kernel_curves,
)

GDN_FIT_PATH = Path(__file__).resolve().parent / "data" / "kernel_fit_gdn.json"
GDN_FIT_FORMAT = "chunkwise-gdn-fit/1"
GDN_CHUNKED = "gdn_chunked"
GDN_RECURRENT = "gdn_recurrent"
GDN_CONV_PREFILL = "gdn_conv1d_prefill"
KERNELS = (GDN_CHUNKED, GDN_RECURRENT, GDN_CONV_PREFILL)

#: (device name, engine, kernel).
GdnKey = tuple[str, str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class GdnFit:
    """The whole fitted table: curves by (device name, engine, kernel)."""

    curves: Mapping[GdnKey, AttentionCurve]
    source: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class FittedGdn:
    """One plan's fitted Gated DeltaNet kernels (None: that kernel keeps the defaults)."""

    chunked: FittedAttention | None
    recurrent: FittedAttention | None
    conv_prefill: FittedAttention | None


def parse_gdn_fit(body: Any) -> GdnFit:
    """A :class:`GdnFit` from the decoded json (raises ``KernelFitError``)."""
    curves, source = parse_kernel_curves(
        body, what="gdn fit", document=GDN_FIT_FORMAT, entries="gdn", kernels=KERNELS
    )
    return GdnFit(curves=curves, source=source)


def load_gdn_fit(path: Path = GDN_FIT_PATH) -> GdnFit:
    """Read and check the fitted table at ``path`` (raises ``KernelFitError``)."""
    return parse_gdn_fit(read_fit_json(path, "gdn fit"))


@cache
def gdn_fit() -> GdnFit:
    """The packaged table, read once on first use."""
    return load_gdn_fit()


def fitted_gdn(
    *,
    device: str,
    engine: str | None,
    peak_flops_per_s: float,
    peak_hbm_bytes_per_s: float,
    graph_launch_s: float,
    in_graph_s: float | None = None,
) -> FittedGdn | None:
    """The fitted Gated DeltaNet kernels of ``engine`` on ``device`` (None: no curve at all).
    ``peak_flops_per_s``: the 16-bit matrix peak (the kernels run in 16 bits); the floors as
    for :func:`~app.core.runner.kernel_fit_attention.fitted_attention`."""
    if engine is None:
        return None
    bf16 = dict.fromkeys(KERNELS, peak_flops_per_s)
    fitted = fitted_kernels(
        gdn_fit().curves,
        device=device,
        engine=engine,
        kernels=KERNELS,
        peak_flops_per_s=bf16,
        peak_hbm_bytes_per_s=peak_hbm_bytes_per_s,
        graph_launch_s=graph_launch_s,
        in_graph_s=in_graph_s,
    )
    if fitted is None:
        return None
    return FittedGdn(
        chunked=fitted[GDN_CHUNKED],
        recurrent=fitted[GDN_RECURRENT],
        conv_prefill=fitted[GDN_CONV_PREFILL],
    )
