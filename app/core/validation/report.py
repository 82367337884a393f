"""The validator's report: per-case errors, summaries per (kind, group) and per kind, the
acceptance targets, and the CSV / table / JSON renderings."""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.core.validation.cases import TARGET_KIND, TARGETS, ValidationCase

PERCENT = 100.0
P90 = 0.9


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseResult:
    case: ValidationCase
    predicted: float

    @property
    def error_pct(self) -> float:
        """Signed error, percent of the measurement (positive = model too slow)."""
        return (self.predicted - self.case.measured) / self.case.measured * PERCENT

    @property
    def ape_pct(self) -> float:
        return abs(self.error_pct)


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorSummary:
    kind: str
    group: str
    count: int
    median_ape_pct: float
    p90_ape_pct: float
    max_ape_pct: float
    mean_signed_error_pct: float


def percentile(values: Sequence[float], fraction: float) -> float:
    """Linear-interpolated percentile (numpy's default), stdlib only."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    position = (len(ordered) - 1) * fraction
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarise(kind: str, group: str, results: Sequence[CaseResult]) -> ErrorSummary:
    apes = [r.ape_pct for r in results]
    return ErrorSummary(
        kind=kind,
        group=group,
        count=len(results),
        median_ape_pct=statistics.median(apes),
        p90_ape_pct=percentile(apes, P90),
        max_ape_pct=max(apes),
        mean_signed_error_pct=statistics.fmean(r.error_pct for r in results),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationReport:
    """Errors per (kind, device) and per kind; the targets apply to ``TARGET_KIND``."""

    results: tuple[CaseResult, ...]
    groups: tuple[ErrorSummary, ...]
    kinds: tuple[ErrorSummary, ...]

    @property
    def per_device(self) -> tuple[ErrorSummary, ...]:
        """Per-device errors of the target kind."""
        return tuple(s for s in self.groups if s.kind == TARGET_KIND)

    @property
    def overall(self) -> ErrorSummary:
        """All points of the target kind."""
        for summary in self.kinds:
            if summary.kind == TARGET_KIND:
                return summary
        raise LookupError(f"no {TARGET_KIND} cases in this report")

    def kind_targets_met(self, kind: str) -> bool | None:
        """Whether ``kind`` meets its target (``None``: no target or no cases of it)."""
        target = TARGETS.get(kind)
        overall = next((k for k in self.kinds if k.kind == kind), None)
        if target is None or overall is None:
            return None
        groups_ok = target.group_median_pct is None or all(
            s.median_ape_pct <= target.group_median_pct for s in self.groups if s.kind == kind
        )
        return overall.median_ape_pct <= target.overall_median_pct and groups_ok

    @property
    def targets_met(self) -> bool:
        """Every kind in the report that has a target meets it."""
        verdicts = [self.kind_targets_met(k.kind) for k in self.kinds]
        return all(v for v in verdicts if v is not None)

    def to_csv(self) -> str:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(
            [
                "kind",
                "name",
                "model",
                "device",
                "tp",
                "dp",
                "ep",
                "precision",
                "is_decode",
                "concurrency",
                "query_len",
                "context_len",
                "output_len",
                "engine",
                "measured",
                "predicted",
                "unit",
                "error_pct",
            ]
        )
        for r in self.results:
            c = r.case
            writer.writerow(
                [
                    c.kind,
                    c.name,
                    c.model,
                    c.device,
                    c.tp,
                    c.dp,
                    c.ep,
                    c.precision,
                    str(c.is_decode).lower(),
                    c.concurrency,
                    c.query_len,
                    c.context_len,
                    c.output_len,
                    c.engine,
                    f"{c.measured:.4g}",
                    f"{r.predicted:.4g}",
                    c.unit,
                    f"{r.error_pct:+.1f}",
                ]
            )
        return buffer.getvalue()

    def format_table(self) -> str:
        width = max([28, *(len(s.group) for s in self.groups)])
        header = (
            f"{'kind':19s} {'group':{width}s} {'n':>3s} {'median APE':>11s} {'p90 APE':>8s} "
            f"{'max APE':>8s} {'bias':>7s}"
        )
        lines = [header]
        for kind in self.kinds:
            rows = [s for s in self.groups if s.kind == kind.kind]
            for s in (*rows, kind):
                lines.append(
                    f"{s.kind:19s} {s.group:{width}s} {s.count:3d} {s.median_ape_pct:10.1f}% "
                    f"{s.p90_ape_pct:7.1f}% {s.max_ape_pct:7.1f}% {s.mean_signed_error_pct:+6.1f}%"
                )
        for kind in self.kinds:
            target = TARGETS.get(kind.kind)
            verdict = self.kind_targets_met(kind.kind)
            if target is None or verdict is None:
                continue
            groups = (
                f", every group <= {target.group_median_pct:g}%"
                if target.group_median_pct is not None
                else ""
            )
            lines.append(
                f"{kind.kind} targets (median <= {target.overall_median_pct:g}%{groups}): "
                f"{'met' if verdict else 'NOT met'}"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        def summary(s: ErrorSummary) -> dict[str, Any]:
            return {
                "kind": s.kind,
                "group": s.group,
                "count": s.count,
                "median_ape_pct": s.median_ape_pct,
                "p90_ape_pct": s.p90_ape_pct,
                "max_ape_pct": s.max_ape_pct,
                "mean_signed_error_pct": s.mean_signed_error_pct,
            }

        verdicts = {k.kind: self.kind_targets_met(k.kind) for k in self.kinds}
        has_target = any(v is not None for v in verdicts.values())
        return {
            "groups": [summary(s) for s in self.groups],
            "kinds": [summary(s) for s in self.kinds],
            "targets": {kind: v for kind, v in verdicts.items() if v is not None},
            "targets_met": self.targets_met if has_target else None,
        }
