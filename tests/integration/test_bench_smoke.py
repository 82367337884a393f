"""The reliability benchmarks still run (tiny, bounded versions; their figures are not checked)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from bench import ascend_eagle3, ascend_serving, bench_closed_loop, bench_costs, load

pytestmark = [pytest.mark.integration]


def test_load_benchmark_runs_against_chunkwise_serve(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    assert load.main(["--clients", "4", "--duration", "1.5", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["workers"] == 2 and figures["requests"] > 0
    assert figures["errors"] == 0 and figures["server_errors_5xx"] == 0
    assert set(figures["kinds"]) <= set(load.DEFAULT_MIX)


def test_cost_benchmark_runs(tmp_path: Path) -> None:
    out = tmp_path / "costs.json"
    assert bench_costs.main(["--repeat", "1", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    for row in figures["optimize"].values():
        assert row["cold_forward_evaluations"] == row["unique_shapes"]
        assert row["warm_forward_evaluations"] == 0


def test_closed_loop_benchmark_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_closed_loop.main(["--repeat", "1", "--engine", "vllm"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("vllm") and "'workload': 'closed_loop'" in line


def test_ascend_eagle3_replay_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert ascend_eagle3.main([]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines[:-1]] == [p.name for p in ascend_eagle3.POINTS]
    assert lines[-1].startswith("TPOT within 15 %:")


def test_ascend_serving_replay_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ascend.csv"
    assert ascend_serving.main(["--csv", str(out), "--coverage"]) == 0
    with out.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["name"] for r in rows] == [p.name for p in ascend_serving.POINTS]
    assert all(float(r["ttft_ms_pred"]) > 0 and float(r["tpot_ms_pred"]) > 0 for r in rows)
    lines = capsys.readouterr().out.strip().splitlines()
    summary = [line for line in lines if line.startswith(("ttft_ms, ", "tpot_ms, "))]
    # the points of stated cards, then with the runs on a card the source does not state
    assert [line.split(":")[0] for line in summary] == [
        "ttft_ms, stated cards",
        "ttft_ms, with assumed cards",
        "tpot_ms, stated cards",
        "tpot_ms, with assumed cards",
    ]
    assert summary[2].startswith("tpot_ms, stated cards: 28 points")
    # The shipped table is built from these points (python -m scripts.residuals --write).
    assert lines[-3].startswith("80 % intervals, shipped table: TTFT ")
    assert lines[-2].startswith("80 % intervals, every deployment: TTFT ")
    assert lines[-1].startswith("80 % intervals, without its deployment: TTFT ")


def test_ascend_serving_points_are_the_products_mapping_of_the_rows() -> None:
    """Every point's measured values are its rows' (the validator's column mapping): the
    published metric converted to ms, the rows of one source's run grouped."""
    with ascend_serving.SOURCE.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    for point in ascend_serving.POINTS:
        cited = [rows[int(i)] for i in point.name.removeprefix("rows ").split(",")]
        printed = {
            r["metric"].removeprefix("mean_"): float(r["value"].replace(",", ""))
            * (1e3 if r["unit"] == "s" else 1)
            for r in cited
        }
        assert printed == {
            k: v for k, v in (("ttft", point.ttft_ms), ("tpot", point.tpot_ms)) if v is not None
        }
        assert len({r["source"] for r in cited}) == 1
