"""``chunkwise validate --cases`` on published Ascend results, through the real parser."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from app.core.validation.case_file import OUT_COLUMNS
from tests.api.helpers import run

FILE = Path(__file__).parents[2] / "bench" / "data" / "ascend_serving_points.csv"


def test_validate_cases_replays_the_ascend_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.csv"
    code, printed, err = run(["validate", "--cases", str(FILE), "--csv", str(out)], capsys)
    assert code == 0, err
    assert "ATLAS_800_A3_752T_128G_DIE | vllm | Qwen3.5-397B-A17B-w8a8" in printed
    assert "represented " in printed and "metric: inter-token latency" in printed
    rows = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8"))))
    assert tuple(rows[0]) == OUT_COLUMNS
    assert len(rows) == len(list(csv.DictReader(io.StringIO(FILE.read_text("utf-8")))))
    row5 = rows[5]
    assert (row5["case_id"], row5["ttft_ms"], row5["tpot_ms"]) == ("row5", "", "39")
    assert float(row5["tpot_ms_pred"]) > 0 and row5["tpot_error_pct"] != ""
    assumed = [r for r in rows if r["assumed"]]  # represented under a labelled assumption
    assert assumed and all(r["error"] == "" for r in assumed)
    code, printed, _ = run(["validate", "--cases", str(FILE), "--format", "json"], capsys)
    body = json.loads(printed)
    assert code == 0 and sum(body["refusal_counts"].values()) == body["overall"]["refused"]
    # every assumption a represented row stands on is counted, one row may carry several
    labels = [a for r in assumed for a in r["assumed"].split("; ")]
    assert sum(body["assumption_counts"].values()) == len(labels)
    stated = body["overall_without_assumptions"]
    assert stated["rows"] == len(rows) - len(assumed)


def test_an_ascend_header_with_a_wrong_column_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = tmp_path / "cases.csv"
    text = FILE.read_text(encoding="utf-8").replace(",spec_decode,", ",speculative,", 1)
    cases.write_text(text, encoding="utf-8")
    code, out, err = run(["validate", "--cases", str(cases)], capsys)
    assert code == 2 and out == ""
    assert "missing spec_decode" in err and "unknown speculative" in err
    assert len(err.strip().splitlines()) == 1
