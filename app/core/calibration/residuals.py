"""The product's own validation residuals, per group: the spread behind uncalibrated intervals.

``residuals.json`` (next to this module) holds, per group, the 10th and 90th percentiles of the
log errors ``ln(predicted / measured)`` of TTFT and TPOT. Two kinds of group:

- The measured serving file's (NVIDIA devices). Each metric walks its own chain, from
  specific to general, conditioned on what predicts the size of its error in a
  leave-deployment-out replay (``chunkwise validate --cases``): TTFT on ``device | engine``,
  ``engine``, ``overall`` (its error is set by the deployment: prefill kernels, MoE dispatch);
  TPOT on ``device | engine | concurrency band``, ``engine | concurrency band``, ``engine``,
  ``overall`` (decode's error follows the batch: a step at 2 clients and one at 256 are
  different regimes, :data:`CONCURRENCY_BANDS`). A group is kept with at least
  :data:`~app.core.calibration.interval.EMPIRICAL_MIN` rows from at least
  :data:`DEPLOYMENT_MIN` deployments: a group of one or two deployments states their errors,
  not where a new deployment's fall (measured: with the dense / MoE class as the first split
  and no deployment minimum, 74 % of TTFT and TPOT rows fell inside their held-out 80 %
  intervals; with these chains, 80 % and 80 %).
- A vendor the file does not cover (Ascend: vendor ``huawei``), from its published serving
  results (``bench/ascend_serving.py``, ``bench/ascend_eagle3.py``): ``device | engine | class``,
  ``vendor | engine | class``, ``vendor | engine`` and ``vendor``. Such results come in sweeps
  of one deployment whose errors share their causes, so a deployment counts once (its mean log
  error), and a group states a metric's spread from :data:`VENDOR_MIN` deployments (fewer than
  ``EMPIRICAL_MIN`` give a Student-t spread, wider the fewer there are) or else the next
  group's of its chain. An estimate on such a vendor's device takes only these groups: another
  vendor's residuals say nothing about its engines (the vLLM-Ascend TPOT reads -55 % where
  NVIDIA's vLLM rows spread over a few per cent), so a sparse vendor gets a wide, honest
  interval rather than a narrow, borrowed one.

An estimate takes the most specific of its groups the table has, per metric (:func:`lookup`).
``python -m scripts.residuals --write`` regenerates the file from a replay of
``shared/validation/measured_agg_serving_cases.csv`` and of the Ascend benchmarks' points.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from app.core.calibration.interval import EMPIRICAL_MIN, Spread
from app.core.catalog.devices import DEVICES
from app.core.errors import InvalidParameterError

RESIDUALS_FILE = "residuals.json"
OVERALL = "overall"
#: Deployments from which a vendor-scoped group states a metric (the t spread needs two; three
#: keep its factor under 1.9).
VENDOR_MIN = 3
#: Deployments a measured-file group needs besides its rows (a new deployment's error is
#: another deployment's: the percentiles of one or two deployments' sweeps under-cover it).
DEPLOYMENT_MIN = 3
#: Upper bounds of the concurrency bands of the TPOT chain: 1-2 clients (decode steps of one
#: or two sequences, latency-bound), 3-16, 17-128 (the batch grows the step), above 128 (the
#: KV pool and queueing set the step; issue 31's FP8-cache rows start there).
CONCURRENCY_BANDS = (2, 16, 128)
METRICS = ("ttft", "tpot")


def model_class(is_moe: bool) -> str:
    return "moe" if is_moe else "dense"


def group_keys(device: str, engine: str, is_moe: bool, vendor: str) -> tuple[str, ...]:
    """The groups of an estimate on a vendor the measured file does not cover, most specific
    first (see the module docstring)."""
    cls = model_class(is_moe)
    return (
        f"{device} | {engine} | {cls}",
        f"{vendor} | {engine} | {cls}",
        f"{vendor} | {engine}",
        vendor,
    )


def concurrency_band(concurrency: int) -> str:
    """The band of :data:`CONCURRENCY_BANDS` ``concurrency`` clients fall in (``c<=2``,
    ``c3-16``, ``c17-128``, ``c>128``)."""
    low = 1
    for high in CONCURRENCY_BANDS:
        if concurrency <= high:
            return f"c<={high}" if low == 1 else f"c{low}-{high}"
        low = high + 1
    return f"c>{CONCURRENCY_BANDS[-1]}"


def metric_keys(metric: str, device: str, engine: str, concurrency: int | None) -> tuple[str, ...]:
    """The measured file's groups of one metric's estimate, most specific first (see the
    module docstring; ``concurrency`` ``None``: not a closed loop, no band)."""
    if metric == "ttft" or concurrency is None:
        return (f"{device} | {engine}", engine, OVERALL)
    band = concurrency_band(concurrency)
    return (f"{device} | {engine} | {band}", f"{engine} | {band}", engine, OVERALL)


def device_vendor(device: str) -> str:
    """The catalog vendor of ``device`` (lower case; empty when the name is not a catalog
    device)."""
    found = DEVICES.get(device.strip().upper())
    return found.vendor.lower() if found is not None else ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Residual:
    """One row's log errors and the group it belongs to."""

    device: str
    engine: str
    is_moe: bool
    ttft_log_error: float  # NaN: not measured (the row counts for TPOT only)
    tpot_log_error: float
    #: Set for a vendor the measured file does not cover: the row feeds that vendor's groups.
    vendor: str = ""
    #: The deployment the row measured (its points count once: :func:`_vendor_groups`).
    source: str = ""
    #: Its closed loop's clients (``None``: not a closed loop; the TPOT chain has no band).
    concurrency: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupSpread:
    group: str
    ttft: Spread
    tpot: Spread


def build_table(residuals: Iterable[Residual]) -> dict[str, Any]:
    """The JSON table of every group with enough errors (see the module docstring)."""
    members: dict[str, list[Residual]] = {}
    scoped: list[Residual] = []
    for index, r in enumerate(residuals):
        if r.vendor:
            scoped.append(r)
            continue
        if not (math.isfinite(r.ttft_log_error) and math.isfinite(r.tpot_log_error)):
            continue
        row = r if r.source else dataclasses.replace(r, source=f"#{index}")  # a row of its own
        keys = {k: None for m in METRICS for k in metric_keys(m, r.device, r.engine, r.concurrency)}
        for key in keys:
            members.setdefault(key, []).append(row)
    groups: dict[str, dict[str, Any]] = {
        key: {
            metric: Spread.of_weighted(_deployment_weighted(rows, metric)).to_dict()
            for metric in METRICS
        }
        for key, rows in members.items()
        if key == OVERALL  # the last fallback always exists
        or (len(rows) >= EMPIRICAL_MIN and len({r.source for r in rows}) >= DEPLOYMENT_MIN)
    }
    groups.update(_vendor_groups(scoped))
    return {"coverage": 0.8, "groups": dict(sorted(groups.items()))}


def _deployment_weighted(rows: Sequence[Residual], metric: str) -> list[tuple[float, float]]:
    """The group's errors of ``metric``, each weighted by one over its deployment's rows in
    the group: a deployment's sweep shares its errors' causes, so every deployment weighs the
    same however many loads it was measured at (a 180-row sweep would otherwise set a group's
    percentiles alone, and a new deployment's error is another deployment's, not another
    row's)."""
    rows_per_source = Counter(r.source for r in rows)
    return [(getattr(r, f"{metric}_log_error"), 1.0 / rows_per_source[r.source]) for r in rows]


def _vendor_groups(residuals: Sequence[Residual]) -> dict[str, dict[str, Any]]:
    """The groups of vendors the measured file does not cover. A deployment's points (one
    ``source``, often a sweep of loads) share their errors' causes, so each deployment counts
    once, by its mean log error; a group states a metric from :data:`VENDOR_MIN` deployments,
    or else the next group's of its chain (the vendor's own group must have them)."""
    means: dict[str, tuple[dict[str, list[float]], dict[str, list[float]]]] = {}
    chains: dict[str, tuple[str, ...]] = {}
    for r in residuals:
        keys = group_keys(r.device, r.engine, r.is_moe, r.vendor)
        chains.update((key, keys[i + 1 :]) for i, key in enumerate(keys))
        for key in keys:
            ttft, tpot = means.setdefault(key, ({}, {}))
            for errors, value in ((ttft, r.ttft_log_error), (tpot, r.tpot_log_error)):
                if math.isfinite(value):
                    errors.setdefault(r.source, []).append(value)
    groups: dict[str, dict[str, Any]] = {}
    for key, rest in chains.items():
        entry = {}
        for index, metric in ((0, "ttft"), (1, "tpot")):
            found = next((k for k in (key, *rest) if len(means[k][index]) >= VENDOR_MIN), None)
            if found is None:
                raise InvalidParameterError(
                    "residuals", key, f"{metric} errors of at least {VENDOR_MIN} deployments"
                )
            per_source = [statistics.fmean(v) for v in means[found][index].values()]
            entry[metric] = Spread.of(per_source).to_dict()
        groups[key] = entry
    return groups


def parse_table(data: Mapping[str, Any]) -> dict[str, GroupSpread]:
    groups = data["groups"]
    return {
        key: GroupSpread(
            group=key,
            ttft=Spread.from_dict(value["ttft"], f"{key}.ttft"),
            tpot=Spread.from_dict(value["tpot"], f"{key}.tpot"),
        )
        for key, value in groups.items()
    }


@functools.cache
def shipped_table() -> dict[str, GroupSpread]:
    """The table shipped with the product."""
    text = resources.files(__package__).joinpath(RESIDUALS_FILE).read_text(encoding="utf-8")
    return parse_table(json.loads(text))


def lookup(
    table: Mapping[str, GroupSpread],
    device: str,
    engine: str,
    is_moe: bool,
    concurrency: int | None = None,
) -> GroupSpread:
    """The spreads of an estimate from ``table``: its vendor's most specific group when the
    table has residuals of the device's vendor; else per metric the most specific group of
    the measured file's chain (``group`` names both when they differ)."""
    vendor = device_vendor(device)
    if vendor in table:
        for key in group_keys(device, engine, is_moe, vendor):
            found = table.get(key)
            if found is not None:
                return found
        return table[vendor]
    ttft, tpot = (
        next(k for k in metric_keys(m, device, engine, concurrency) if k in table) for m in METRICS
    )
    if ttft == tpot:
        return table[ttft]
    return GroupSpread(
        group=f"{ttft} (TTFT), {tpot} (TPOT)", ttft=table[ttft].ttft, tpot=table[tpot].tpot
    )
