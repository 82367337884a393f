"""``chunkwise validate --cases`` on a disaggregated file, through the real parser."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from app.core.validation.case_file import OUT_COLUMNS
from tests.api.helpers import run

SAMPLE = Path(__file__).parents[1] / "unit" / "validation" / "disagg_sample.csv"


def test_validate_cases_replays_a_disaggregated_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.csv"
    code, printed, err = run(["validate", "--cases", str(SAMPLE), "--csv", str(out)], capsys)
    assert code == 0, err
    assert "B200 180GB | trtllm" in printed and "overall" in printed
    assert "H200 SXM 141GB | sglang | deepseek-ai/DeepSeek-R1" in printed
    rows = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8"))))
    assert tuple(rows[0]) == OUT_COLUMNS
    assert len(rows) == len(SAMPLE.read_text(encoding="utf-8").splitlines()) - 1
    # every sample row replays (attention DP without EP included: the moe_over_dp layout)
    assert not [r for r in rows if r["error"]]
    assert all(float(r["ttft_ms_pred"]) > 0 for r in rows)
    code, printed, _ = run(["validate", "--cases", str(SAMPLE), "--format", "json"], capsys)
    assert code == 0 and json.loads(printed)["overall"]["refused"] == 0


def test_a_disaggregated_header_with_a_wrong_column_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = tmp_path / "cases.csv"
    text = SAMPLE.read_text(encoding="utf-8").replace(",decode_batch_size,", ",decode_bs,", 1)
    cases.write_text(text, encoding="utf-8")
    code, out, err = run(["validate", "--cases", str(cases)], capsys)
    assert code == 2 and out == ""
    assert "missing decode_batch_size" in err and "unknown decode_bs" in err
    assert len(err.strip().splitlines()) == 1
