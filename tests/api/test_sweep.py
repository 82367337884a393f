"""``chunkwise sweep`` and app/services/sweep.py: validation before anything runs, rows keyed
by scenario, a process pool giving the in-process rows, resume, error rows, output formats."""

from __future__ import annotations

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
