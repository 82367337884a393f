"""Leave-deployment-out checks of the uncalibrated intervals (app/core/validation/group_out)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.calibration.interval import MAX_WIDTH_RATIO
from app.core.calibration.residuals import Residual
from app.core.validation import replay_case_file
from app.core.validation.group_out import (
    DeploymentResidual,
    format_checks,
    leave_deployment_out,
)
from tests.unit.validation.test_case_file import ROW, file_of

DEVICE = "NVIDIA_H100_SXM_80G"


def rows_of(model: str, errors: list[float], family: str = "vllm") -> list[DeploymentResidual]:
    return [
        DeploymentResidual(
            residual=Residual(
                device=DEVICE, engine=family, is_moe=False, ttft_log_error=e, tpot_log_error=e
            ),
            deployment=("H100 SXM 80GB", family, model),
            family=family,
        )
        for e in errors
    ]


def test_a_deployment_unlike_the_others_is_not_covered_by_its_own_errors() -> None:
    """In-sample, a deployment whose errors all sit at +1.0 would widen its own interval to
    hold them; left out, its interval comes from the others (errors near 0), which miss it."""
    near = [i / 100 for i in range(-10, 11)]  # 21 errors in [-0.1, 0.1]
    rows = rows_of("a", near) + rows_of("b", near) + rows_of("odd", [1.0] * 21)
    overall = leave_deployment_out(rows)[-1]
    assert overall.group == "overall" and overall.rows == 63 and overall.deployments == 3
    # 'odd' (21 rows) is outside; 'a' and 'b' see the other two, whose spread holds them but
    # for their extremes beyond the mixed table's 10th-90th percentiles.
    assert overall.ttft_coverage is not None and overall.ttft_coverage < 2 / 3
    assert overall.ttft_coverage == overall.tpot_coverage


def test_widths_are_hi_over_lo_and_the_share_over_the_bound() -> None:
    rows = rows_of("a", [-1.0, 1.0] * 15) + rows_of("b", [0.0] * 30)
    checks = leave_deployment_out(rows)
    overall = checks[-1]
    # 'b' gets a's spread (10th..90th of +-1: width e^2), 'a' gets b's (zero width: 1x).
    assert overall.ttft_median_width is not None
    assert overall.ttft_too_wide == pytest.approx(0.5)
    assert math.exp(2.0) > MAX_WIDTH_RATIO
    assert "leave-deployment-out" in "\n".join(format_checks(checks))


@given(st.lists(st.floats(-2, 2), min_size=1, max_size=30), st.integers(2, 4))
def test_every_row_of_a_deployment_seen_by_others_is_counted_once(
    errors: list[float], deployments: int
) -> None:
    rows = [r for d in range(deployments) for r in rows_of(f"m{d}", errors)]
    overall = leave_deployment_out(rows)[-1]
    assert overall.rows == len(rows) and overall.deployments == deployments
    assert overall.ttft_coverage is not None and 0.0 <= overall.ttft_coverage <= 1.0


def test_a_lone_deployment_has_nothing_to_be_checked_against() -> None:
    assert leave_deployment_out(rows_of("only", [0.1, 0.2]))[-1].rows == 0
    assert format_checks(()) == []


def test_the_case_file_report_states_the_check_per_family_and_overall() -> None:
    rows = [
        {**ROW, "case_id": "a"},
        {**ROW, "case_id": "b", "model": "Qwen/Qwen3-32B", "tp": "2", "num_devices": "2"},
    ]
    report = replay_case_file(file_of(*rows))
    assert [c.group for c in report.interval_checks] == ["vllm", "overall"]
    assert report.interval_checks[-1].rows == 2 and report.interval_checks[-1].deployments == 2
    assert "leave-deployment-out" in report.format_table()
    assert report.to_dict()["intervals_leave_deployment_out"][-1]["group"] == "overall"


def test_rows_sharing_a_case_id_each_keep_their_own_deployment() -> None:
    """A file may repeat a ``case_id``: each row's residual is its own case's (keyed by row),
    never the last row of that id's."""
    rows = [
        {**ROW, "case_id": "same"},
        {**ROW, "case_id": "same", "model": "Qwen/Qwen3-32B", "tp": "2", "num_devices": "2"},
    ]
    overall = replay_case_file(file_of(*rows)).interval_checks[-1]
    assert overall.rows == 2 and overall.deployments == 2
