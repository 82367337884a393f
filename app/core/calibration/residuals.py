"""The product's own validation residuals, per group: the spread behind uncalibrated intervals.

``residuals.json`` (next to this module) holds, per group, the 10th and 90th percentiles of the
log errors ``ln(predicted / measured)`` of TTFT and TPOT. Two kinds of group:

- The measured serving file's (NVIDIA devices): groups go from specific to general,
  ``device | engine | class``, ``engine | class``, ``class`` and ``overall`` (the class is
  ``dense`` or ``moe``), each kept with at least
  :data:`~app.core.calibration.interval.EMPIRICAL_MIN` rows.
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

An estimate takes the most specific of its groups the table has (:func:`lookup`).
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


def model_class(is_moe: bool) -> str:
    return "moe" if is_moe else "dense"


def group_keys(device: str, engine: str, is_moe: bool, vendor: str = "") -> tuple[str, ...]:
    """The groups an estimate belongs to, most specific first (``vendor``: a vendor-scoped
    chain, see the module docstring; empty: the measured file's)."""
    cls = model_class(is_moe)
    if vendor:
        return (
            f"{device} | {engine} | {cls}",
            f"{vendor} | {engine} | {cls}",
            f"{vendor} | {engine}",
            vendor,
        )
    return (f"{device} | {engine} | {cls}", f"{engine} | {cls}", cls, OVERALL)


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
        for key in group_keys(row.device, row.engine, row.is_moe):
            members.setdefault(key, []).append(row)
    groups: dict[str, dict[str, Any]] = {
        key: {
            metric: Spread.of_weighted(_deployment_weighted(rows, metric)).to_dict()
            for metric in ("ttft", "tpot")
        }
        for key, rows in members.items()
        if len(rows) >= EMPIRICAL_MIN or key == OVERALL  # the last fallback always exists
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


def lookup(table: Mapping[str, GroupSpread], device: str, engine: str, is_moe: bool) -> GroupSpread:
    """The most specific group of ``table`` an estimate belongs to: its vendor's chain when the
    table has residuals of the device's vendor, the measured file's chain otherwise."""
    vendor = device_vendor(device)
    scoped = vendor if vendor in table else ""
    for key in group_keys(device, engine, is_moe, scoped):
        found = table.get(key)
        if found is not None:
            return found
    return table[scoped or OVERALL]
