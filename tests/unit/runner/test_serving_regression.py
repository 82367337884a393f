"""Serving-level accuracy as a regression bound (issue 5; targets not all met yet).

Source: ai-dynamo/aiconfigurator "silicon" samples, TensorRT-LLM aggregated serving under a
closed loop, vendored as ``app/core/catalog/data/measured_agg_serving_cases.csv`` (758 rows,
a TTFT and a TPOT mean each). Figures at the time of writing (bench/README.md): TPOT median
APE 8.8 % (target <= 10 % met), TTFT 33.4 % (target 20 % not met), three of nine
(device, engine, model) TPOT groups above 25 %. The bounds are those figures plus one point,
so a change that makes the serving prediction worse fails here.
"""

from __future__ import annotations

import pytest

from app.core.validation import (
    SERVING_TPOT_KIND,
    SERVING_TTFT_KIND,
    TARGETS,
    ErrorSummary,
    ValidationReport,
    load_agg_serving_cases,
    run_validation,
)

SLACK_PCT = 1.0
TPOT_MEDIAN_PCT = 8.8
TPOT_P90_PCT = 25.2
TTFT_MEDIAN_PCT = 33.4
TTFT_P90_PCT = 83.1
# Groups over the 25 % TPOT target: the DeepSeek-R1 H200 1.1.0rc2.post2 rows (25.1 %; with the
# rows recorded on 64 GPUs that repeat 8-GPU measurements, replayed on their recipe's 8-GPU
# server), and the two TensorRT-LLM 1.2.0rc6 groups (5 rows; bench/README.md).
TPOT_GROUPS_OVER_TARGET = 3
TPOT_GROUPS_OVER_TARGET_WITHOUT_DUPLICATES = 2


@pytest.fixture(scope="module")
def report() -> ValidationReport:
    return run_validation(kinds=(SERVING_TTFT_KIND, SERVING_TPOT_KIND))


def _overall(report: ValidationReport, kind: str) -> ErrorSummary:
    return next(k for k in report.kinds if k.kind == kind)


def test_tpot_meets_its_overall_target_and_holds_its_figures(
    report: ValidationReport,
) -> None:
    tpot = _overall(report, SERVING_TPOT_KIND)
    assert tpot.count == 758
    assert tpot.median_ape_pct <= TARGETS[SERVING_TPOT_KIND].overall_median_pct
    assert tpot.median_ape_pct <= TPOT_MEDIAN_PCT + SLACK_PCT
    assert tpot.p90_ape_pct <= TPOT_P90_PCT + SLACK_PCT
    group_limit = TARGETS[SERVING_TPOT_KIND].group_median_pct
    assert group_limit is not None
    over = [
        g for g in report.groups if g.kind == SERVING_TPOT_KIND and g.median_ape_pct > group_limit
    ]
    assert len(over) <= TPOT_GROUPS_OVER_TARGET, over


def test_ttft_holds_its_figures(report: ValidationReport) -> None:
    ttft = _overall(report, SERVING_TTFT_KIND)
    assert ttft.median_ape_pct <= TTFT_MEDIAN_PCT + SLACK_PCT
    assert ttft.p90_ape_pct <= TTFT_P90_PCT + SLACK_PCT


def test_layout_duplicates_are_the_64_gpu_deepseek_rows() -> None:
    every = load_agg_serving_cases()
    kept = load_agg_serving_cases(drop_layout_duplicates=True)
    kept_names = {c.name for c in kept}
    dropped = [c for c in every if c.name not in kept_names and c.kind == SERVING_TPOT_KIND]
    assert len(dropped) == 20
    # recorded on 64 GPUs: tp 64 (the recipe's tp 8 x ep 8) replays on the recipe's 8-GPU server
    # (app.core.validation.recipe_layouts), as the 8-GPU rows it repeats; attn_dp 64 as recorded
    assert all(c.model == "deepseek-ai/DeepSeek-R1" for c in dropped)
    assert all((c.tp, c.dp, c.ep) in ((8, 1, 8), (1, 64, 8)) for c in dropped)
    # each dropped row repeats an 8-GPU row's two measured means exactly
    small = {
        (c.engine, c.query_len, c.output_len, c.concurrency, c.measured)
        for c in kept
        if c.model == "deepseek-ai/DeepSeek-R1" and c.tp * c.dp == 8
    }
    for case in dropped:
        key = (case.engine, case.query_len, case.output_len, case.concurrency, case.measured)
        assert key in small, case.label
    report = run_validation(cases=kept)
    group_limit = TARGETS[SERVING_TPOT_KIND].group_median_pct
    assert group_limit is not None
    over = [
        g for g in report.groups if g.kind == SERVING_TPOT_KIND and g.median_ape_pct > group_limit
    ]
    assert len(over) <= TPOT_GROUPS_OVER_TARGET_WITHOUT_DUPLICATES, over
