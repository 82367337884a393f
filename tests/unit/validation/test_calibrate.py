"""Calibrating on measured rows: the fit improves the rows it has not seen, refuses what it
cannot fit, and the replay carries 80 % intervals."""

from __future__ import annotations

import csv
import io
import math

import pytest

from app.cli.render import calibration_table
from app.core.calibration.profile import profile_from_dict
from app.core.errors import InvalidParameterError
from app.core.validation import CASE_COLUMNS, replay_case_file
from app.core.validation.calibrate import calibrate_case_file, calibration_points, choose_free
from app.core.validation.cases import SERVING_CASES
from app.core.validation.holdout import run_holdout
from app.core.validation.predict import ServingReplay

GROUP = ("H100 SXM 80GB", "Qwen/Qwen3-32B")


def _rows() -> list[dict[str, str]]:
    with SERVING_CASES.open(encoding="utf-8", newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if (r["hardware"], r["model"]) == GROUP]
    return sorted(
        rows, key=lambda r: (int(r["isl"]), int(r["osl"]), int(r["tp"]), int(r["concurrency"]))
    )


def _csv(rows: list[dict[str, str]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, CASE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def split() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    rows = _rows()[:48]
    return rows[0::4], [r for i, r in enumerate(rows) if i % 4]


def test_calibration_beats_the_catalog_on_held_out_tpot(
    split: tuple[list[dict[str, str]], list[dict[str, str]]],
) -> None:
    cal, held = split
    profile = calibrate_case_file(_csv(cal))
    assert profile.fit.points == len(cal) and profile.free[:2] == (
        "memory_efficiency",
        "gemm_efficiency_scale",
    )
    plain = replay_case_file(_csv(held)).overall
    tuned = replay_case_file(_csv(held), calibration=profile).overall
    assert tuned.tpot_median_ape_pct is not None and plain.tpot_median_ape_pct is not None
    assert tuned.tpot_median_ape_pct < plain.tpot_median_ape_pct
    assert math.isfinite(profile.fit.ttft_cv_median_ape_pct)


def test_replay_writes_intervals_around_every_prediction(
    split: tuple[list[dict[str, str]], list[dict[str, str]]],
) -> None:
    report = replay_case_file(_csv(split[1]))
    out = list(csv.DictReader(io.StringIO(report.to_csv())))
    for row in out:
        lo, hi = float(row["ttft_ms_lo"]), float(row["ttft_ms_hi"])
        assert 0 < lo < hi
        assert float(row["tpot_ms_lo"]) < float(row["tpot_ms_hi"])
    assert report.overall.interval_coverage is not None


def test_free_parameters_follow_the_points() -> None:
    points = calibration_points(_csv(_rows()[:3]))
    chosen = choose_free(points)
    assert sum(reason == "" for reason in chosen.values()) <= len(points) - 1
    same_concurrency = [r for r in _rows() if r["concurrency"] == "8"][:4]
    chosen = choose_free(calibration_points(_csv(same_concurrency)))
    assert chosen["step_host_ms"] == "needs two distinct concurrencies"
    with pytest.raises(InvalidParameterError, match="at least 3 for 2 free"):
        choose_free(points[:2], ["memory_efficiency", "step_host_ms"])


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda rows: rows[:1], "at least 2 measured points"),
        (lambda rows: [rows[0], {**rows[1], "hardware": "H200 SXM 141GB"}], "one hardware"),
        (lambda rows: [rows[0], {**rows[1], "tpot_ms": "0"}], "tpot_ms"),
        (lambda rows: [rows[0], {**rows[1], "ttft_ms": "nan"}], "ttft_ms"),
    ],
)
def test_refuses_what_it_cannot_fit(edit, needle: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidParameterError, match=needle):
        calibrate_case_file(_csv(edit(_rows()[:4])))


def test_holdout_protocol_reports_both_ways() -> None:
    report = run_holdout(_csv(_rows()[:24]), min_group_rows=12)
    assert len(report.groups) == 1
    group = report.groups[0]
    assert group.calibration_rows == 6 and len(group.held_out) == 18
    summary = report.overall
    assert summary.calibrated_coverage is not None and 0 <= summary.calibrated_coverage <= 1
    assert "overall" in report.format_table()


def test_the_arrival_spread_is_recovered_from_points_that_had_it() -> None:
    """Points measured (here: simulated) with a spread of 0.25: the grid finds it, and the fit
    reproduces them; points at one concurrency cannot free it."""
    rows = [r for r in _rows() if (r["isl"], r["tp"]) == ("1024", "1")][:8]
    assert len({r["concurrency"] for r in rows}) >= 3
    truth = ServingReplay({"arrival_spread": 0.25}, {})
    for row, point in zip(rows, calibration_points(_csv(rows)), strict=True):
        ttft, tpot = truth.predict(point.case)
        row["ttft_ms"], row["tpot_ms"] = repr(ttft), repr(tpot)
    profile = calibrate_case_file(_csv(rows), free=["memory_efficiency", "arrival_spread"])
    assert dict(profile.parameters)["arrival_spread"] == 0.25
    assert profile.fit.ttft_fit_median_ape_pct < 1.0
    one = [r for r in _rows() if r["concurrency"] == "8"][:4]
    assert choose_free(calibration_points(_csv(one)))["arrival_spread"] == (
        "needs two distinct concurrencies, one of them at least 2"
    )


def test_a_point_the_product_cannot_place_is_dropped_with_its_reason() -> None:
    """One request's KV of a 400,000-token prompt does not fit one H100 beside Qwen3-32B: the
    fit drops that point, names it with the reason, and fits the others; the profile keeps
    the drop through its JSON form."""
    rows = _rows()[:4]
    huge = {**rows[0], "case_id": "huge", "isl": "400000"}
    profile = calibrate_case_file(_csv([*rows, huge]))
    assert profile.fit.points == len(rows)
    ((reason, case_ids),) = profile.dropped
    assert case_ids == ("huge",) and "no room for one request's KV" in reason
    body = profile.to_dict()
    assert body["dropped"] == {reason: ["huge"]}
    again = profile_from_dict(body)
    assert again.dropped == profile.dropped and again.id == profile.id
    assert "dropped 1 point(s) the product cannot place (huge)" in calibration_table(body)
    placed_all = calibrate_case_file(_csv(rows))
    assert placed_all.dropped == () and "dropped" not in placed_all.to_dict()
    assert placed_all.id != profile.id
    with pytest.raises(InvalidParameterError, match="points the product can place"):
        calibrate_case_file(_csv([rows[0], huge]))
