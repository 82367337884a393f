"""Uncalibrated 80 % intervals checked the way a user meets them: on a deployment the residual
table has not seen (``chunkwise validate --cases``, issue 31).

The shipped residual table (:mod:`app.core.calibration.residuals`) is built from the measured
file itself, so the share of that file's measurements inside their intervals is an in-sample
figure: every row's own error helped set its interval. A user's new deployment (another model
on the same device and engine, say) has no such help. This check replays the file's residuals
leaving out one **deployment** at a time, a (hardware, engine family, model) group: each row's
interval comes from a table built from every other deployment's errors, looked up by the same
group chains as a request's (:mod:`app.core.calibration.residuals`). It
reports, per engine family and overall, the share of measurements inside those intervals and
how wide they are (``hi / lo``; the issue's bound is :data:`MAX_WIDTH_RATIO`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from app.core.calibration.interval import MAX_WIDTH_RATIO
from app.core.calibration.residuals import (
    METRICS,
    OVERALL,
    Residual,
    build_table,
    lookup,
    parse_table,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploymentResidual:
    """One predicted row's residual and the deployment it belongs to."""

    residual: Residual
    deployment: tuple[str, str, str]  # (hardware, engine family, model)
    family: str


@dataclass(frozen=True, slots=True, kw_only=True)
class IntervalCheck:
    """Leave-deployment-out interval figures of one group of rows (per metric)."""

    group: str
    rows: int
    deployments: int
    ttft_coverage: float | None
    tpot_coverage: float | None
    ttft_median_width: float | None
    tpot_median_width: float | None
    ttft_too_wide: float | None  # share of rows with hi / lo > MAX_WIDTH_RATIO
    tpot_too_wide: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Held:
    family: str
    deployment: tuple[str, str, str]
    inside: tuple[bool | None, bool | None]
    width: tuple[float | None, float | None]


def _held_out(rows: Sequence[DeploymentResidual]) -> list[_Held]:
    """Every row's interval from a table without its deployment's rows (one table per
    deployment), whether it holds the measurement and its width."""
    out: list[_Held] = []
    by_deployment: dict[tuple[str, str, str], list[DeploymentResidual]] = {}
    for row in rows:
        by_deployment.setdefault(row.deployment, []).append(row)
    for deployment, members in by_deployment.items():
        others = [r.residual for r in rows if r.deployment != deployment]
        if not others:
            continue
        table = parse_table(build_table(others))
        for row in members:
            r = row.residual
            group = lookup(table, r.device, r.engine, r.is_moe, r.concurrency)
            inside: list[bool | None] = []
            width: list[float | None] = []
            for spread, error in ((group.ttft, r.ttft_log_error), (group.tpot, r.tpot_log_error)):
                if not math.isfinite(error):
                    inside.append(None)
                    width.append(None)
                    continue
                # the measurement m = p * exp(-error) lies in [p e^-high, p e^-low]
                inside.append(spread.low <= error <= spread.high)
                width.append(spread.width_ratio)
            out.append(
                _Held(
                    family=row.family,
                    deployment=deployment,
                    inside=(inside[0], inside[1]),
                    width=(width[0], width[1]),
                )
            )
    return out


def _share(flags: Iterable[bool]) -> float | None:
    values = list(flags)
    return sum(values) / len(values) if values else None


def _summary(group: str, held: Sequence[_Held]) -> IntervalCheck:
    figures: dict[str, float | None] = {}
    for index, metric in enumerate(METRICS):
        inside = [h.inside[index] for h in held if h.inside[index] is not None]
        widths = [w for h in held if (w := h.width[index]) is not None]
        figures[f"{metric}_coverage"] = _share(bool(f) for f in inside)
        figures[f"{metric}_median_width"] = statistics.median(widths) if widths else None
        figures[f"{metric}_too_wide"] = _share(w > MAX_WIDTH_RATIO for w in widths)
    return IntervalCheck(
        group=group,
        rows=len(held),
        deployments=len({h.deployment for h in held}),
        **figures,
    )


def leave_deployment_out(rows: Sequence[DeploymentResidual]) -> tuple[IntervalCheck, ...]:
    """Per engine family (in the order of their first row) and overall (last)."""
    held = _held_out(rows)
    families: dict[str, list[_Held]] = {}
    for h in held:
        families.setdefault(h.family, []).append(h)
    return (
        *(_summary(family, items) for family, items in families.items()),
        _summary(OVERALL, held),
    )


def format_checks(checks: Sequence[IntervalCheck]) -> list[str]:
    """The report's lines (empty without checks)."""
    if not checks:
        return []

    def share(value: float | None) -> str:
        return "-" if value is None else f"{value:.0%}"

    def ratio(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}x"

    lines = [
        "",
        "80 % intervals, leave-deployment-out (each row's interval from the residuals of the "
        "other (hardware, engine, model) deployments, as a new deployment gets it); width = "
        f"hi / lo, over {MAX_WIDTH_RATIO:g}x carries little information",
        f"{'engine family':14s} {'rows':>5s} {'deploys':>7s} {'TTFT in':>8s} {'TPOT in':>8s} "
        f"{'TTFT width':>10s} {'TPOT width':>10s} {'TTFT >4x':>9s} {'TPOT >4x':>9s}",
    ]
    for c in checks:
        lines.append(
            f"{c.group:14s} {c.rows:5d} {c.deployments:7d} {share(c.ttft_coverage):>8s} "
            f"{share(c.tpot_coverage):>8s} {ratio(c.ttft_median_width):>10s} "
            f"{ratio(c.tpot_median_width):>10s} {share(c.ttft_too_wide):>9s} "
            f"{share(c.tpot_too_wide):>9s}"
        )
    return lines
