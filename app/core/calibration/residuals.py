"""The product's own validation residuals, per group: the spread behind uncalibrated intervals.

``residuals.json`` (next to this module) holds, for every group of the measured serving file
with at least :data:`~app.core.calibration.interval.EMPIRICAL_MIN` predicted rows, the 10th
and 90th percentiles of the log errors ``ln(predicted / measured)`` of TTFT and TPOT. Groups go
from specific to general: ``device | engine | class``, ``engine | class``, ``class`` and
``overall``, where the class is ``dense`` or ``moe``. An estimate takes the most specific group
that exists (:func:`lookup`). ``python -m scripts.residuals --write`` regenerates the file from
a replay of ``shared/validation/measured_agg_serving_cases.csv``.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from app.core.calibration.interval import EMPIRICAL_MIN, Spread

RESIDUALS_FILE = "residuals.json"
OVERALL = "overall"


def model_class(is_moe: bool) -> str:
    return "moe" if is_moe else "dense"


def group_keys(device: str, engine: str, is_moe: bool) -> tuple[str, ...]:
    """The groups an estimate belongs to, most specific first."""
    cls = model_class(is_moe)
    return (f"{device} | {engine} | {cls}", f"{engine} | {cls}", cls, OVERALL)


@dataclass(frozen=True, slots=True, kw_only=True)
class Residual:
    """One row's log errors and the group it belongs to."""

    device: str
    engine: str
    is_moe: bool
    ttft_log_error: float
    tpot_log_error: float


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupSpread:
    group: str
    ttft: Spread
    tpot: Spread


def build_table(residuals: Iterable[Residual]) -> dict[str, Any]:
    """The JSON table of every group with enough rows (see the module docstring)."""
    errors: dict[str, tuple[list[float], list[float]]] = {}
    for r in residuals:
        if not (math.isfinite(r.ttft_log_error) and math.isfinite(r.tpot_log_error)):
            continue
        for key in group_keys(r.device, r.engine, r.is_moe):
            ttft, tpot = errors.setdefault(key, ([], []))
            ttft.append(r.ttft_log_error)
            tpot.append(r.tpot_log_error)
    groups = {
        key: {
            "ttft": Spread.of(ttft).to_dict(),
            "tpot": Spread.of(tpot).to_dict(),
        }
        for key, (ttft, tpot) in sorted(errors.items())
        if len(ttft) >= EMPIRICAL_MIN or key == OVERALL  # the last fallback always exists
    }
    return {"coverage": 0.8, "groups": groups}


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
    """The most specific group of ``table`` an estimate belongs to."""
    for key in group_keys(device, engine, is_moe):
        found = table.get(key)
        if found is not None:
            return found
    return table[OVERALL]
