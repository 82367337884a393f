"""``chunkwise optimize --mode disagg`` through the real parser."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.api.helpers import run
from tests.golden.cases import CLI_CASES

#: the golden corpus's table run (tests/golden/cases.py): 12 H100s, TP 1, 2, 4 workers a pool
DISAGG = list(next(case.argv for case in CLI_CASES if case.name == "cli_optimize_disagg_table"))


def test_the_table_ranks_deployments_and_names_the_best(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(DISAGG, capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert "mode=disagg" in lines[0] and "first_token=admission" in lines[0]
    assert lines[1].split()[:3] == ["pd_split", "prefill", "decode"]
    best = next(line for line in lines if line.startswith("best: "))
    assert "P:" in best and "binding pool" in best
    assert "configurations simulated" in lines[-1]


def test_json_is_the_api_answer_and_csv_one_line_per_row(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run([*DISAGG, "--format", "json"], capsys)
    assert code == 0, err
    body = json.loads(out)
    assert body["mode"] == "disagg" and body["best"] == body["rows"][0]
    assert body["input"]["max_workers"] == 4 and body["probes"]
    code, out, err = run([*DISAGG, "--format", "csv"], capsys)
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == len(body["rows"])
    assert rows[0]["pd_split"] == body["best"]["pd_split"]
    assert rows[0]["prefill_parallel"] == body["best"]["prefill"]["parallel"]


def test_a_missing_ttft_limit_is_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    argv = list(DISAGG)
    i = argv.index("--ttft-limit")
    del argv[i : i + 2]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert "note: ttft_limit_ms is not given" in out


def test_dump_original_results_lists_every_simulation(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run([*DISAGG, "--dump-original-results"], capsys)
    assert code == 0, err
    assert "probes (" in out and "clients=" in out


@pytest.mark.parametrize(
    ("extra", "names"),
    [
        (["--prefill-devices-per-instance", "12"], "prefill_devices_per_instance"),
        (["--prefill-devices-per-instance", "3", "--tp-sizes", "2"], "tp_sizes"),
        (["--max-workers", "0"], "--max-workers"),
        (["--workload", "burst"], "workload"),
        (["--serving-cost", "5"], "serving_overhead_ms"),
        (["--disagg"], "--mode"),
        (["--emit", "vllm"], "--emit"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    extra: list[str], names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run([*DISAGG, *extra], capsys)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and names in err


def test_max_workers_belongs_to_mode_disagg(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a if a != "disagg" else "agg" for a in DISAGG]
    code, _, err = run(argv, capsys)
    assert code == 2 and "max_workers" in err
