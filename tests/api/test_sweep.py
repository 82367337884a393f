"""``chunkwise sweep`` and app/services/sweep.py: validation before anything runs, rows keyed
by scenario, a process pool giving the in-process rows, resume, error rows, output formats."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.sweep import expand_grid
from app.services import sweep
from app.services.context import ServiceContext, create_context
from app.settings import Settings
from tests.api.helpers import run

BASE = {
    "engine": "msmodeling",
    "model": "Qwen/Qwen3-0.6B",
    "device": "TEST_DEVICE",
    "input_length": 256,
    "output_length": 16,
}
SIMULATE_GRID = {
    "operation": "simulate",
    "base": {**BASE, "concurrency": 2},
    "grid": {"input_length": [128, 256], "concurrency": [1, 2, 4]},
    "exclude": [{"input_length": 256, "concurrency": 4}],
}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def context() -> Any:
    made = create_context(Settings(cache_backend="memory"))
    yield made
    made.close()


def spec_file(tmp_path: Path, document: dict[str, Any], name: str = "spec.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def rows_of(context: ServiceContext, document: dict[str, Any], processes: int = 1) -> list[Any]:
    tasks = sweep.prepare(context, expand_grid(document))
    rows: list[dict[str, Any]] = []
    sweep.run_sweep(context, tasks, processes=processes, done=rows.extend)
    return sorted(rows, key=lambda row: row["scenario_key"])


def test_a_simulate_grid_gives_one_row_per_scenario(context: ServiceContext) -> None:
    rows = rows_of(context, SIMULATE_GRID)
    assert sorted((r["input_length"], r["concurrency"]) for r in rows) == [
        (128, 1),
        (128, 2),
        (128, 4),
        (256, 1),
        (256, 2),
    ]
    assert all(r["error"] is None and r["feasible"] is True for r in rows)
    assert all(r["ttft_ms"] > 0 and r["tpot_ms"] > 0 and r["throughput_tokens_s"] > 0 for r in rows)
    by_point = {(r["input_length"], r["concurrency"]): r for r in rows}
    # more clients: more throughput; a longer prompt: a later first token
    assert by_point[128, 4]["throughput_tokens_s"] > by_point[128, 1]["throughput_tokens_s"]
    assert by_point[256, 1]["ttft_ms"] > by_point[128, 1]["ttft_ms"]


def test_identical_scenarios_are_evaluated_once(context: ServiceContext) -> None:
    """Two points of one Scenario (a repeated value, the scheduler's default named): one row."""
    document = {
        "operation": "simulate",
        "base": {**BASE, "concurrency": 1},
        "grid": {"tp_size": [1, 1]},
    }
    tasks = sweep.prepare(context, expand_grid(document))
    assert len(tasks) == 1


def test_optimize_rows_report_the_best_layout_and_concurrency(context: ServiceContext) -> None:
    document = {
        "operation": "optimize",
        "base": {**BASE, "tpot_limit_ms": 50},
        "grid": {"num_devices": [1, 2]},
    }
    rows = rows_of(context, document)
    assert len(rows) == 2
    for row in rows:
        assert row["feasible"] is True and row["error"] is None
        assert row["best_tp"] * row["best_dp"] * row["best_pp"] <= row["num_devices"]
        assert row["best_concurrency"] >= 1 and row["tpot_ms"] <= 50


def test_an_impossible_limit_is_an_infeasible_row(context: ServiceContext) -> None:
    base = {**BASE, "concurrency": 1}
    document = {"operation": "simulate", "base": base, "grid": {"tpot_limit_ms": [0.001]}}
    (row,) = rows_of(context, document)
    assert row["feasible"] is False and row["error"] is None


def test_a_failing_scenario_is_a_row_with_its_error(context: ServiceContext) -> None:
    """An error only the evaluation finds (the echo no longer a valid request) is the row's."""
    one = {**SIMULATE_GRID, "grid": {"concurrency": [1]}, "exclude": []}
    (task,) = sweep.prepare(context, expand_grid(one))
    broken = sweep.Task(
        scenario_key=task.scenario_key,
        operation=task.operation,
        echo={**task.echo, "device": "NO_SUCH_DEVICE"},
        values=task.values,
    )
    row = sweep.evaluate_task(context, broken)
    assert row["scenario_key"] == task.scenario_key and row["concurrency"] == 1
    assert "NO_SUCH_DEVICE" in row["error"] and row["ttft_ms"] is None


def test_two_processes_give_the_in_process_rows(context: ServiceContext) -> None:
    assert rows_of(context, SIMULATE_GRID, processes=2) == rows_of(context, SIMULATE_GRID)


LENGTHS = st.lists(st.sampled_from([64, 128, 192, 256]), min_size=1, max_size=3, unique=True)


@settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lengths=LENGTHS)
def test_scenario_keys_are_stable_across_runs(context: ServiceContext, lengths: list[int]) -> None:
    base = {**BASE, "concurrency": 1}
    document = {"operation": "simulate", "base": base, "grid": {"input_length": lengths}}
    first = [t.scenario_key for t in sweep.prepare(context, expand_grid(document))]
    again = [t.scenario_key for t in sweep.prepare(context, expand_grid(document))]
    assert first == again and len(set(first)) == len(lengths)


def test_a_scenario_key_is_the_same_in_a_fresh_interpreter(context: ServiceContext) -> None:
    code = (
        "import json,sys\n"
        "from app.core.sweep import expand_grid\n"
        "from app.services import sweep\n"
        "from app.services.context import create_context\n"
        "from app.settings import Settings\n"
        "c = create_context(Settings(cache_backend='memory'))\n"
        "points = expand_grid(json.loads(sys.argv[1]))\n"
        "print(json.dumps([t.scenario_key for t in sweep.prepare(c, points)]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "123"}
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(SIMULATE_GRID)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    keys = [t.scenario_key for t in sweep.prepare(context, expand_grid(SIMULATE_GRID))]
    assert json.loads(done.stdout) == keys


# -- validation before anything runs ---------------------------------------------------------
@pytest.mark.parametrize(
    ("grid", "field"),
    [
        ({"input_length": [128, "long"]}, "input_length"),
        ({"no_such_field": [1]}, "no_such_field"),
        ({"device": ["NO_SUCH_DEVICE"]}, "device"),
        ({"engine_options.no_such_option": [1]}, "engine_options.no_such_option"),
    ],
)
def test_a_bad_scenario_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], grid: dict[str, Any], field: str
) -> None:
    spec = spec_file(tmp_path, {**SIMULATE_GRID, "grid": grid, "exclude": []})
    out = tmp_path / "out.csv"
    code, _, err = run(["sweep", str(spec), "--out", str(out)], capsys)
    assert code == 2
    assert err.count("\n") == 1 and f"{field}=" in err, err
    assert not out.exists()


@pytest.mark.parametrize(
    ("name", "text", "shown"),
    [
        ("spec.txt", "x", "spec='spec.txt'"),
        ("spec.json", "{not json", "JSON"),
        ("spec.yaml", "a: [1,", "YAML"),
        ("spec.yaml", "operation: simulate\ngrid: {}\n", "grid="),
    ],
)
def test_a_bad_spec_file_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, shown: str
) -> None:
    spec = tmp_path / name
    spec.write_text(text, encoding="utf-8")
    code, _, err = run(["sweep", str(spec), "--out", str(tmp_path / "o.csv")], capsys)
    assert code == 2 and err.count("\n") == 1 and shown in err, err


def test_an_unknown_output_type_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = spec_file(tmp_path, SIMULATE_GRID)
    code, _, err = run(["sweep", str(spec), "--out", str(tmp_path / "o.xlsx")], capsys)
    assert code == 2 and "out='o.xlsx'" in err


# -- the command: formats, CSV specs, resume -------------------------------------------------
def read_out(path: Path) -> list[dict[str, Any]]:
    return sweep.read_rows(path)


@pytest.mark.parametrize("suffix", [".csv", ".json", ".parquet"])
def test_each_output_format_holds_every_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "operation: simulate\n"
        f"base: {json.dumps({**BASE, 'concurrency': 1})}\n"
        "grid:\n  input_length: [128, 256]\n",
        encoding="utf-8",
    )
    out = tmp_path / f"out{suffix}"
    code, _, err = run(["sweep", str(spec), "--out", str(out)], capsys)
    assert code == 0, err
    rows = read_out(out)
    assert [str(r["input_length"]) for r in rows] == ["128", "256"]
    assert list(rows[0]) == ["input_length", *sweep.RESULT_COLUMNS]
    assert all(str(r["scenario_key"]).startswith("scenario:") for r in rows)
    assert "wrote 2 rows (0 with an error)" in err


def test_a_csv_spec_runs_each_row_as_its_operation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.csv"
    spec.write_text(
        "operation,engine,model,device,input_length,output_length,concurrency,num_devices,tpot_limit_ms\n"
        "simulate,msmodeling,Qwen/Qwen3-0.6B,TEST_DEVICE,128,16,2,,\n"
        "simulate,msmodeling,Qwen/Qwen3-0.6B,TEST_DEVICE,128,16,2,,1e3\n"
        "optimize,msmodeling,Qwen/Qwen3-0.6B,TEST_DEVICE,128,16,,1,50\n",
        encoding="utf-8",
    )
    out = tmp_path / "out.json"
    code, _, err = run(["sweep", str(spec), "--out", str(out)], capsys)
    assert code == 0, err
    simulated, limited, optimized = json.loads(out.read_text())
    assert limited["tpot_limit_ms"] == 1000.0
    assert limited["scenario_key"] != simulated["scenario_key"]
    assert simulated["operation"] == "simulate" and simulated["concurrency"] == 2
    assert simulated["best_tp"] is None and simulated["feasible"] is True
    assert optimized["operation"] == "optimize" and optimized["best_tp"] == 1


def test_a_sweep_resumes_from_its_partial_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = spec_file(tmp_path, SIMULATE_GRID)
    full = tmp_path / "full.csv"
    assert run(["sweep", str(spec), "--out", str(full)], capsys)[0] == 0
    with full.open(newline="") as handle:
        lines = list(csv.reader(handle))
    # an interrupted sweep: the header and two rows, one of them marked so a re-run would show
    partial = tmp_path / "partial.csv"
    lines[1][lines[0].index("ttft_ms")] = "-1"
    with partial.open("w", newline="") as handle:
        csv.writer(handle).writerows(lines[:3])
    code, _, err = run(["sweep", str(spec), "--out", str(partial)], capsys)
    assert code == 0, err
    assert "2 already in partial.csv, 3 to run" in err
    resumed = read_out(partial)
    keys = sorted(r["scenario_key"] for r in read_out(full))
    assert sorted(r["scenario_key"] for r in resumed) == keys
    assert resumed[0]["ttft_ms"] == "-1"  # kept, not re-run
    code, _, err = run(["sweep", str(spec), "--out", str(partial)], capsys)
    assert "5 already in partial.csv, 0 to run" in err and len(read_out(partial)) == 5


def test_progress_is_a_line_per_tenth_off_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = spec_file(tmp_path, SIMULATE_GRID)
    code, _, err = run(["sweep", str(spec), "--out", str(tmp_path / "o.csv")], capsys)
    assert code == 0
    lines = [line for line in err.splitlines() if "scenarios," in line and "/s" in line]
    assert [line.split()[2] for line in lines] == ["1/5", "2/5", "3/5", "4/5", "5/5"]


@pytest.mark.parametrize(
    ("module", "spec_name", "out_name", "named"),
    [("pyarrow", "spec.json", "o.parquet", "pyarrow"), ("yaml", "spec.yaml", "o.csv", "pyyaml")],
)
def test_a_missing_optional_library_is_a_one_line_error_naming_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    module: str,
    spec_name: str,
    out_name: str,
    named: str,
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    spec = tmp_path / spec_name
    spec.write_text(json.dumps(SIMULATE_GRID), encoding="utf-8")  # JSON is YAML too
    code, _, err = run(["sweep", str(spec), "--out", str(tmp_path / out_name)], capsys)
    assert code == 2 and err.count("\n") == 1 and named in err, err


def test_plan_rows_hold_the_sla_statistics_and_whether_replicas_meet_it(
    context: ServiceContext,
) -> None:
    base = {**BASE, "request_rate": 5, "tpot_limit_ms": 50, "ttft_limit_ms": 2000}
    document = {"operation": "plan", "base": base, "grid": {"tpot_limit_ms": [50, 0.001]}}
    rows = {row["tpot_limit_ms"]: row for row in rows_of(context, document)}
    assert rows[50]["feasible"] is True and 0 < rows[50]["tpot_ms"] <= 50
    assert rows[0.001]["feasible"] is False and rows[0.001]["error"] is None
    assert all(row["throughput_tokens_s"] is None for row in rows.values())


@pytest.mark.parametrize("suffix", [".json", ".parquet"])
def test_a_json_or_parquet_sweep_resumes_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    spec = spec_file(tmp_path, SIMULATE_GRID)
    out = tmp_path / f"out{suffix}"
    assert run(["sweep", str(spec), "--out", str(out)], capsys)[0] == 0
    full = read_out(out)
    sweep.write_rows(out, list(full[0]), full[:2])  # as an interruption after two rows left it
    code, _, err = run(["sweep", str(spec), "--out", str(out), "--processes", "2"], capsys)
    assert code == 0 and "2 already in" in err and "3 to run" in err, err
    resumed = read_out(out)
    assert resumed[:2] == full[:2]

    def by_key(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted(rows, key=lambda row: str(row["scenario_key"]))

    assert by_key(resumed) == by_key(full)  # the re-run rows (2 processes) as the first run's
