"""DeepSeek Sparse Attention (DSA) kernel terms fitted to measured kernels
(``data/kernel_fit_dsa.json``).

The file is written by ``python -m scripts.fit_kernels_dsa`` from NVIDIA AIConfigurator's
measured GLM-5 kernel tables (``glm5_mqa_logits_module_perf``, ``glm5_topk_module_perf``,
``glm5_dsa_attn_module_perf`` of ``sparse_attention/sglang``; ``aiconfigurator-core``,
Apache-2.0; ``NOTICE``, ``docs/kernels.md``), on the train split only. Per (catalog device,
engine, kernel) it holds one :class:`~app.core.runner.kernel_fit_attention.AttentionCurve`: the
attention fit's form, with

- :data:`DSA_LOGITS` (DeepGEMM's ``fp8_mqa_logits``, the lightning indexer's scores, of a
  prefill): ``rows`` the new tokens, ``context`` the cached keys one request scores;
- :data:`DSA_LOGITS_DECODE`: the same kernel for one new token per request, its own curve with
  ``rows`` the keys of one request (``context`` as above): each request's keys are walked in
  turn, so a decode's scores take a time set by the context alone from 4 to 1,024 requests
  (B300: 71 us over 8,192 keys at 4, 8 or 16 requests), the curve's per-row floor; one or two
  requests run faster (22 / 38 us there), which this curve over-prices;
- :data:`DSA_TOPK` (``fast_topk_transform_fused``): ``rows`` the new tokens, ``context`` the
  logits each token selects from. The kernel does not run (measured 0) while the context fits
  in the top-k: the runner then prices no top-k;
- :data:`DSA_SPARSE_MLA` (FlashMLA's ``flash_mla_sparse_fwd``, the absorbed MLA over the
  selected latents, prefill and decode): ``rows`` new tokens x query heads, ``context`` the
  selected positions ``min(context, topk)``. The tables measure 64 heads only, and the engines
  pad fewer heads per rank to the kernel's head block
  (:data:`~app.core.runner.layers.SPARSE_MLA_HEAD_BLOCK`, with its evidence), so a rank with
  fewer heads does the work of a full block.

and the runner's own flops and bytes (:func:`~app.core.runner.layers.indexer_logits_terms`,
:func:`~app.core.runner.layers.indexer_topk_terms`,
:func:`~app.core.runner.layers.sparse_mla_terms`). Only SGLang's folders hold these tables.
The sparse attention curve is served on Hopper only (:data:`SPARSE_MLA_SERVED_DEVICES`):
SGLang's DSA modules on Blackwell run another kernel (``sglang_dsa_*_trtllm`` in
``dsa_context_module_perf``), not the measured FlashMLA one. A device, engine or kernel without
a curve keeps the runner's analytic pricing (labelled ``default``); a missing or malformed file
raises :class:`~app.core.runner.fit_tables.KernelFitError` on first use.
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

DSA_FIT_PATH = Path(__file__).resolve().parent / "data" / "kernel_fit_dsa.json"
DSA_FIT_FORMAT = "chunkwise-dsa-fit/1"
DSA_LOGITS = "dsa_indexer_logits"
DSA_LOGITS_DECODE = "dsa_indexer_logits_decode"
DSA_TOPK = "dsa_indexer_topk"
DSA_SPARSE_MLA = "dsa_sparse_mla"
KERNELS = (DSA_LOGITS, DSA_LOGITS_DECODE, DSA_TOPK, DSA_SPARSE_MLA)  # the sparse MLA last
#: The devices whose served DSA attention kernel is the measured ``flash_mla_sparse_fwd``
#: (SGLang's ``dsa_context_module_perf`` names ``flashmla_*`` kernels on H100 / H200 and
#: ``trtllm`` ones on the Blackwell systems).
SPARSE_MLA_SERVED_DEVICES = frozenset({"NVIDIA_H100_SXM_80G", "NVIDIA_H200_SXM_141G"})

#: (device name, engine, kernel).
DsaKey = tuple[str, str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class DsaFit:
    """The whole fitted table: curves by (device name, engine, kernel)."""

    curves: Mapping[DsaKey, AttentionCurve]
    source: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class FittedDsa:
    """One plan's fitted DSA kernels (None: that kernel keeps the analytic pricing)."""

    logits: FittedAttention | None
    logits_decode: FittedAttention | None
    topk: FittedAttention | None
    sparse_mla: FittedAttention | None


def parse_dsa_fit(body: Any) -> DsaFit:
    """A :class:`DsaFit` from the decoded json (raises ``KernelFitError``)."""
    curves, source = parse_kernel_curves(
        body, what="dsa fit", document=DSA_FIT_FORMAT, entries="dsa", kernels=KERNELS
    )
    return DsaFit(curves=curves, source=source)


def load_dsa_fit(path: Path = DSA_FIT_PATH) -> DsaFit:
    """Read and check the fitted table at ``path`` (raises ``KernelFitError``)."""
    return parse_dsa_fit(read_fit_json(path, "dsa fit"))


@cache
def dsa_fit() -> DsaFit:
    """The packaged table, read once on first use."""
    return load_dsa_fit()


def fitted_dsa(
    *,
    device: str,
    engine: str | None,
    peak_flops_per_s: Mapping[str, float],
    peak_hbm_bytes_per_s: float,
    graph_launch_s: float,
    in_graph_s: float | None = None,
) -> FittedDsa | None:
    """The fitted DSA kernels of ``engine`` on ``device`` (None: no curve at all).
    ``peak_flops_per_s``: the matrix peak each kernel's curve is a share of, by kernel (the
    indexer scores in FP8, the sparse attention runs in 16 bits); the floors as for
    :func:`~app.core.runner.kernel_fit_attention.fitted_attention`."""
    if engine is None:
        return None
    curves = dsa_fit().curves
    served = KERNELS if device in SPARSE_MLA_SERVED_DEVICES else KERNELS[:-1]
    fitted = fitted_kernels(
        curves,
        device=device,
        engine=engine,
        kernels=served,
        peak_flops_per_s=peak_flops_per_s,
        peak_hbm_bytes_per_s=peak_hbm_bytes_per_s,
        graph_launch_s=graph_launch_s,
        in_graph_s=in_graph_s,
    )
    if fitted is None:
        return None
    return FittedDsa(
        logits=fitted[DSA_LOGITS],
        logits_decode=fitted[DSA_LOGITS_DECODE],
        topk=fitted[DSA_TOPK],
        sparse_mla=fitted.get(DSA_SPARSE_MLA),
    )
