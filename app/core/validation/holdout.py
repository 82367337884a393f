"""Validation of calibration itself: calibrate on a quarter of each group, predict the rest.

The protocol (``python -m bench.calibration_holdout``, and a test on the vendored file):

1. Group the rows of a measurement file by (hardware, engine family, model, quantization
   columns); keep the groups with at least :data:`MIN_GROUP_ROWS` rows.
2. In each group, order the rows by (input length, output length, layout, concurrency, case
   id), so each measured sweep is contiguous and ordered by concurrency; every fourth row from
   the first (positions 0, 4, 8, ...) is the calibration quarter, the other three quarters are
   held out.
3. Fit a profile on the calibration quarter (:func:`fit_calibration`, free parameters chosen
   by its rule) and predict every held-out row with it, and without it.
4. Report the held-out median absolute % errors, calibrated and uncalibrated, overall and per
   group, and the share of held-out measurements inside the 80 % intervals: calibrated ones
   from the profile's cross-validated residuals (widened when the row lies outside the
   profile's ranges), uncalibrated ones from a residual table built from the calibration
   quarters of all groups only (so no held-out row informs its own interval).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.core.calibration.interval import Spread
from app.core.calibration.residuals import GroupSpread, build_table, parse_table
from app.core.errors import ChunkwiseError
from app.core.validation.calibrate import Point, fit_calibration
from app.core.validation.case_file import _measured, read_case_rows, row_case
from app.core.validation.intervals import case_spreads, replay_residuals
from app.core.validation.predict import ServingReplay

MIN_GROUP_ROWS = 12
#: Every this-many-th row of a group (from its first) calibrates; the rest is held out.
CALIBRATION_STRIDE = 4
PERCENT = 100.0


@dataclass(frozen=True, slots=True, kw_only=True)
class HeldOut:
    """One held-out row: measured, predicted with and without the calibration, and whether
    each interval holds the measurement."""

    ttft_ms: float
    tpot_ms: float
    calibrated: tuple[float, float]
    uncalibrated: tuple[float, float]
    calibrated_inside: tuple[bool, bool]
    uncalibrated_inside: tuple[bool, bool]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupHoldout:
    group: str
    calibration_rows: int
    held_out: tuple[HeldOut, ...]
    free: tuple[str, ...]
    error: str = ""


def _ape(predicted: float, measured: float) -> float:
    return abs(predicted - measured) / measured * PERCENT


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary:
    rows: int
    ttft_calibrated_ape_pct: float | None
    tpot_calibrated_ape_pct: float | None
    ttft_uncalibrated_ape_pct: float | None
    tpot_uncalibrated_ape_pct: float | None
    calibrated_coverage: float | None
    uncalibrated_coverage: float | None

    @classmethod
    def of(cls, held: Sequence[HeldOut]) -> Summary:
        def share(flags: Sequence[bool]) -> float | None:
            return sum(flags) / len(flags) if flags else None

        return cls(
            rows=len(held),
            ttft_calibrated_ape_pct=_median([_ape(h.calibrated[0], h.ttft_ms) for h in held]),
            tpot_calibrated_ape_pct=_median([_ape(h.calibrated[1], h.tpot_ms) for h in held]),
            ttft_uncalibrated_ape_pct=_median([_ape(h.uncalibrated[0], h.ttft_ms) for h in held]),
            tpot_uncalibrated_ape_pct=_median([_ape(h.uncalibrated[1], h.tpot_ms) for h in held]),
            calibrated_coverage=share([f for h in held for f in h.calibrated_inside]),
            uncalibrated_coverage=share([f for h in held for f in h.uncalibrated_inside]),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class HoldoutReport:
    groups: tuple[GroupHoldout, ...]

    @property
    def overall(self) -> Summary:
        return Summary.of([h for g in self.groups for h in g.held_out])

    def format_table(self) -> str:
        def pct(v: float | None) -> str:
            return "-" if v is None else f"{v:.1f}%"

        def share(v: float | None) -> str:
            return "-" if v is None else f"{v:.0%}"

        width = max([len(g.group) for g in self.groups] + [7])
        lines = [
            f"{'group':{width}s} {'cal':>4s} {'held':>5s} {'TTFT cal':>9s} {'TTFT unc':>9s} "
            f"{'TPOT cal':>9s} {'TPOT unc':>9s} {'in80 cal':>8s} {'in80 unc':>8s}  free"
        ]
        rows = [(g.group, g.calibration_rows, Summary.of(g.held_out), g) for g in self.groups]
        for name, cal, s, g in [*rows, ("overall", sum(r[1] for r in rows), self.overall, None)]:
            tail = g.error if g is not None and g.error else ",".join(g.free) if g else ""
            lines.append(
                f"{name:{width}s} {cal:4d} {s.rows:5d} {pct(s.ttft_calibrated_ape_pct):>9s} "
                f"{pct(s.ttft_uncalibrated_ape_pct):>9s} {pct(s.tpot_calibrated_ape_pct):>9s} "
                f"{pct(s.tpot_uncalibrated_ape_pct):>9s} {share(s.calibrated_coverage):>8s} "
                f"{share(s.uncalibrated_coverage):>8s}  {tail}"
            )
        return "\n".join(lines)


def _group_key(row: Mapping[str, str]) -> str:
    family = (row["engine"].split() or [""])[0]
    quant = (
        row["gemm_quant"]
        if row["gemm_quant"] == row["moe_quant"]
        else (f"{row['gemm_quant']}/{row['moe_quant']}")
    )
    return f"{row['hardware']} | {family} | {row['model']} | {quant}"


def _order(row: Mapping[str, str]) -> tuple[int | str, ...]:
    """A deployment's sweep together, by concurrency: (input length, output length, layout,
    concurrency, case id), so every fourth row samples every sweep across its concurrencies."""

    def number(column: str) -> int:
        try:
            return int(row[column] or 0)
        except ValueError:
            return 0

    layout = tuple(number(c) for c in ("tp", "pp", "attn_dp", "moe_tp", "moe_ep"))
    return (number("isl"), number("osl"), *layout, number("concurrency"), row["case_id"])


def _points(rows: Sequence[Mapping[str, str]], replay: ServingReplay) -> list[Point]:
    """The rows the product can predict (a refused row has no error to validate)."""
    out = []
    for row in rows:
        try:
            case = row_case(row)
            point = Point(case=case, ttft_ms=case.measured, tpot_ms=_measured(row, "tpot_ms"))
            replay.predict(case)
        except ChunkwiseError:
            continue
        out.append(point)
    return out


def _inside(spread: Spread, predicted: float, measured: float) -> bool:
    low, high = spread.interval(predicted)
    return low <= measured <= high


def run_holdout(text: str, *, min_group_rows: int = MIN_GROUP_ROWS) -> HoldoutReport:
    """The protocol of the module docstring on one measurement file."""
    groups: dict[str, list[dict[str, str]]] = {}
    for row in read_case_rows(text):
        groups.setdefault(_group_key(row), []).append(row)
    splits: dict[str, tuple[list[Point], list[Point]]] = {}
    uncalibrated = ServingReplay()
    for key, rows in groups.items():
        if len(rows) < min_group_rows:
            continue
        ordered = sorted(rows, key=_order)
        cal = [r for i, r in enumerate(ordered) if i % CALIBRATION_STRIDE == 0]
        held = [r for i, r in enumerate(ordered) if i % CALIBRATION_STRIDE != 0]
        splits[key] = (_points(cal, uncalibrated), _points(held, uncalibrated))
    table = parse_table(
        build_table(
            replay_residuals(
                [(p.case, p.tpot_ms) for cal, _ in splits.values() for p in cal], uncalibrated
            )
        )
    )
    return HoldoutReport(
        groups=tuple(
            _group(key, cal, held, uncalibrated, table) for key, (cal, held) in splits.items()
        )
    )


def _group(
    key: str,
    cal: Sequence[Point],
    held: Sequence[Point],
    uncalibrated: ServingReplay,
    table: Mapping[str, GroupSpread],
) -> GroupHoldout:
    try:
        profile = fit_calibration(cal)
    except ChunkwiseError as err:
        return GroupHoldout(
            group=key, calibration_rows=len(cal), held_out=(), free=(), error=str(err)
        )
    calibrated = ServingReplay(profile.values)
    out: list[HeldOut] = []
    for p in held:
        try:
            with_cal = calibrated.predict(p.case)
            without = uncalibrated.predict(p.case)
        except ChunkwiseError:
            continue
        spread = case_spreads(p.case, profile, table)
        group = case_spreads(p.case, None, table)
        out.append(
            HeldOut(
                ttft_ms=p.ttft_ms,
                tpot_ms=p.tpot_ms,
                calibrated=with_cal,
                uncalibrated=without,
                calibrated_inside=(
                    _inside(spread.ttft, with_cal[0], p.ttft_ms),
                    _inside(spread.tpot, with_cal[1], p.tpot_ms),
                ),
                uncalibrated_inside=(
                    _inside(group.ttft, without[0], p.ttft_ms),
                    _inside(group.tpot, without[1], p.tpot_ms),
                ),
            )
        )
    return GroupHoldout(
        group=key, calibration_rows=len(cal), held_out=tuple(out), free=profile.free
    )
