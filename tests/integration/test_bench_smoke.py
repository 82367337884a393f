"""The reliability benchmarks still run (tiny, bounded versions; their figures are not checked)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import ascend_eagle3, bench_closed_loop, bench_costs, load

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
