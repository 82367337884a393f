"""``validate --replicas``: configurations measured more than once and their spread."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.errors import InvalidParameterError
from app.core.validation import replay_case_file
from app.core.validation.cases import SERVING_CASES
from app.core.validation.replicas import (
    DISAGG_CONFIGURATION_COLUMNS,
    MODEL_ERROR_FACTOR,
    REPLICA_OUT_COLUMNS,
    PredictedConfiguration,
    floor_comparisons,
    replicas_of_text,
    same_measurement,
)
from tests.unit.validation.test_case_file import ROW as CASE_ROW
from tests.unit.validation.test_case_file import file_of

SAMPLE = Path(__file__).parent / "disagg_sample.csv"
ROW = {**CASE_ROW, "case_id": "a", "ttft_ms": "100", "tpot_ms": "10"}


def test_a_configuration_ignores_the_engine_version_and_the_dump() -> None:
    """Two builds of one engine, another dump, an FP8 repackaging's name, a moe_ep of 0 or 1
    and a blank quantization are one configuration; another engine family or concurrency is
    another. TTFT 100 and 121 ms: pairwise |ln 1.21| (21 %), each 10 % from the centre."""
    rows = [
        ROW,
        {**ROW, "case_id": "b", "engine": "vllm 0.19.0", "moe_ep": "1", "gemm_quant": "",
         "model": "nvidia/Llama-3.1-8B-Instruct-FP8", "ttft_ms": "121", "tpot_ms": "10"},
        {**ROW, "case_id": "c", "engine": "sglang 0.5.9", "ttft_ms": "300"},
        {**ROW, "case_id": "d", "concurrency": "16", "ttft_ms": "300"},
    ]  # fmt: skip
    report, case_ids = replicas_of_text(file_of(*rows))
    assert case_ids == ["a", "b", "c", "d"]
    assert len(report.configurations) == 3 and len(report.replicated) == 1
    (vllm,) = report.by_family
    assert vllm.group == "vllm"
    assert (vllm.configurations, vllm.measurements, vllm.pairs) == (1, 2, 1)
    assert vllm.ttft_pair_pct == pytest.approx(21.0)
    assert vllm.ttft_floor_pct == pytest.approx(10.0)
    assert vllm.tpot_pair_pct == pytest.approx(0.0) and vllm.tpot_floor_pct == pytest.approx(0.0)
    assert report.overall.ttft_floor_pct == pytest.approx(10.0)
    assert report.floor("sglang") is None and report.floor("overall") is report.overall


def test_a_copy_of_a_measurement_counts_once() -> None:
    """A later dump's row that repeats a measurement to its printed digits is a copy: the
    configuration is measured once, so it has no replicas; a third, distinct measurement makes
    it replicated with two measurements, and the CSV names the copy's original."""
    copy = {**ROW, "case_id": "copy", "ttft_ms": "100.0004", "tpot_ms": "10.00"}
    report, _ = replicas_of_text(file_of(ROW, copy))
    assert report.copies == 1 and not report.replicated
    assert report.overall.ttft_pair_pct is None and report.overall.pairs == 0
    other = {**ROW, "case_id": "b", "ttft_ms": "110", "tpot_ms": "11"}
    report, case_ids = replicas_of_text(file_of(ROW, copy, other))
    (configuration,) = report.replicated
    assert len(configuration.measurements) == 2 and configuration.rows == (0, 1, 2)
    lines = list(csv.DictReader(io.StringIO(report.to_csv(case_ids))))
    assert tuple(lines[0]) == REPLICA_OUT_COLUMNS
    assert [(r["case_id"], r["copy_of"]) for r in lines] == [("a", ""), ("copy", "a"), ("b", "")]
    assert float(lines[2]["ttft_centre_ms"]) == pytest.approx(math.sqrt(100 * 110), rel=1e-5)


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("163.73", "163.72509357752278", True),
        ("7.42", "7.423259694292521", True),
        ("163.7", "163.8", False),
        ("377.7741", "1200.633", False),
        ("100", "100.4", True),
        ("100", "100.6", False),
    ],
)
def test_same_measurement_reads_the_printed_digits(a: str, b: str, same: bool) -> None:
    assert same_measurement(a, b) is same and same_measurement(b, a) is same


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(10, 10_000), min_size=2, max_size=5, unique=True),
    st.sampled_from((0.5, 3.0, 10.0)),
)
def test_the_spread_is_scale_free_and_the_floor_is_within_the_pairs(
    values: list[int], scale: float
) -> None:
    """Multiplying every measurement by one factor leaves both spreads; the version-blind
    floor is at most the largest pairwise spread."""

    def spread(factor: float) -> tuple[float, float, list[float]]:
        rows = [
            {**ROW, "case_id": str(i), "ttft_ms": str(v * factor), "tpot_ms": "10"}
            for i, v in enumerate(values)
        ]
        report, _ = replicas_of_text(file_of(*rows))
        (configuration,) = report.replicated
        pair, floor = report.overall.ttft_pair_pct, report.overall.ttft_floor_pct
        assert pair is not None and floor is not None
        return pair, floor, [(math.exp(x) - 1) * 100 for x in configuration.pair_logs("ttft")]

    pair, floor, pairs = spread(1.0)
    assert 0 < floor <= max(pairs) + 1e-9
    scaled_pair, scaled_floor, _ = spread(scale)
    assert scaled_pair == pytest.approx(pair) and scaled_floor == pytest.approx(floor)


def test_a_file_that_cannot_be_grouped_names_every_missing_column() -> None:
    with pytest.raises(InvalidParameterError, match="missing ttft_ms, tpot_ms, hardware"):
        replicas_of_text("case_id,model\nx,y\n")
    with pytest.raises(InvalidParameterError, match=r"^rows=0"):
        replicas_of_text(file_of())
    with pytest.raises(InvalidParameterError, match=r"ttft_ms='n/a'.*row 'a'"):
        replicas_of_text(file_of({**ROW, "ttft_ms": "n/a"}))
    with pytest.raises(InvalidParameterError, match=r"tp='two'"):
        replicas_of_text(file_of({**ROW, "tp": "two"}))


def test_a_disaggregated_file_groups_by_both_pools() -> None:
    """The disaggregated header's pool columns are part of the configuration (not the batch
    sizes); the sample's DeepSeek rows are distinct configurations."""
    text = SAMPLE.read_text(encoding="utf-8")
    report, case_ids = replicas_of_text(text)
    assert report.columns == DISAGG_CONFIGURATION_COLUMNS
    assert "decode_moe_ep" in report.columns and "decode_batch_size" not in report.columns
    assert (
        report.rows
        == len(case_ids)
        == len(report.configurations)
        + report.copies
        + sum(len(c.measurements) - 1 for c in report.configurations)
    )


def test_the_shipped_measurements_group() -> None:
    """The vendored agg rows: every row accounted for (a measurement or a copy)."""
    report, _ = replicas_of_text(SERVING_CASES.read_text(encoding="utf-8"))
    distinct = sum(len(c.measurements) for c in report.configurations)
    assert distinct + report.copies == report.rows == 758


def test_validate_cases_reads_the_model_against_the_floor() -> None:
    """Two builds measuring one configuration (TTFT 100 and 121 ms: a 10 % floor) and a
    third, refused row: the replay reports the family's floor, the model's error against
    the configuration's centre and the 1.5x verdict, from the same prediction as the rows."""
    again = {**ROW, "case_id": "b", "engine": "vllm 0.19.0", "ttft_ms": "121", "tpot_ms": "11"}
    unknown = {**ROW, "case_id": "c", "model": "acme/Unknown-1B"}
    report = replay_case_file(file_of(ROW, again, unknown))
    (predicted,) = report.replicated
    first = report.outcomes[0]
    assert (predicted.ttft_ms_pred, predicted.tpot_ms_pred) == (
        first.ttft_ms_pred,
        first.tpot_ms_pred,
    )
    vllm, overall = report.floors
    assert vllm.group == "vllm" and overall.group == "overall" and vllm.configurations == 1
    assert vllm.ttft_floor_pct == pytest.approx(10.0)
    assert first.ttft_ms_pred is not None
    error = abs(math.log(first.ttft_ms_pred / math.sqrt(100 * 121)))
    assert vllm.ttft_model_pct == pytest.approx((math.exp(error) - 1) * 100)
    limited = error > MODEL_ERROR_FACTOR * math.log(1.1)
    assert vllm.verdict("ttft") == ("model" if limited else "noise")
    assert vllm.ttft_model_limited == int(limited)
    assert [g.group for g in report.by_family] == ["vllm"] and report.by_family[0].rows == 3
    assert "replica floor" in report.format_table()
    body = report.to_dict()
    assert body["floor"][0]["ttft_verdict"] == vllm.verdict("ttft")
    assert body["replicated"][0]["case_ids"] == ["a", "b"]


@pytest.mark.parametrize(
    ("predicted", "verdict"), [(110.0, "noise"), (115.0, "noise"), (200.0, "model")]
)
def test_the_one_and_a_half_rule(predicted: float, verdict: str) -> None:
    """Measured 100 and 121 ms (centre 110, floor 10 %): a prediction within 1.5 x 10 % of
    the centre (in |ln|) is noise, beyond it model error."""
    rows = [ROW, {**ROW, "case_id": "b", "ttft_ms": "121", "tpot_ms": "11"}]
    report, _ = replicas_of_text(file_of(*rows))
    configuration = PredictedConfiguration(
        configuration=report.replicated[0], ttft_ms_pred=predicted, tpot_ms_pred=10.0
    )
    (_, overall) = floor_comparisons((configuration,))
    assert overall.verdict("ttft") == verdict
    assert configuration.model_limited("ttft") is (verdict == "model")
