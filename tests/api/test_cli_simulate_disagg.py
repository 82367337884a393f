"""``chunkwise simulate --mode disagg`` through the real parser."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.api.helpers import run

BASE = [
    "simulate",
    "Qwen/Qwen3-32B",
    "--device",
    "NVIDIA_H100_SXM_80G",
    "--input-length",
    "2048",
    "--output-length",
    "128",
    "--requests-per-client",
    "4",
]
POOLS = ["--prefill-workers", "2", "--prefill-tp", "2", "--decode-workers", "1"]
DISAGG = [*BASE, "--mode", "disagg", *POOLS, "--decode-tp", "4", "--concurrency", "32"]


def test_the_table_names_both_pools_the_split_and_the_binding_pool(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(DISAGG, capsys)
    assert code == 0, err
    assert "pd_split               2P:1D (4:4 devices)" in out
    assert "binding_pool" in out and "first_token            decode_step" in out
    assert "kv_transfer" in out and "nvlink" in out
    lines = out.splitlines()
    assert any(line.split()[:3] == ["prefill", "2", "TP2"] for line in lines)
    assert any(line.split()[:3] == ["decode", "1", "TP4"] for line in lines)


def test_json_is_the_api_answer_and_the_long_flag_names_work(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [*BASE, "--mode", "disagg", "--prefill-workers", "2", "--prefill-tp-size", "2"]
    argv += ["--decode-workers", "1", "--decode-tp-size", "4", "--decode-dp-size", "1"]
    code, out, err = run([*argv, "--concurrency", "32", "--format", "json"], capsys)
    assert code == 0, err
    body = json.loads(out)
    assert body["mode"] == "disagg" and body["decode"]["tp_size"] == 4
    assert body["input"]["prefill_workers"] == 2 and body["binding_pool"] in ("prefill", "decode")
    code, table, _ = run(DISAGG, capsys)
    assert f"{body['tpot_ms']:,.3f}" in table  # the same simulation


def test_csv_is_one_row_with_both_pools(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run([*DISAGG, "--format", "csv"], capsys)
    assert code == 0, err
    (row,) = csv.DictReader(io.StringIO(out))
    assert row["pd_split"] == "2P:1D (4:4 devices)" and row["prefill_workers"] == "2"
    assert row["decode_tp_size"] == "4" and row["transfer_tier"] == "nvlink"


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--decode-tp", "4", "--concurrency", "32", "--num-devices", "16"], "num_devices=16"),
        (["--decode-tp", "3", "--concurrency", "32"], "decode_tp_size=3"),
        (["--decode-tp", "4", "--decode-workers", "0", "--concurrency", "32"], "decode-workers"),
        (["--decode-tp", "4"], "concurrency"),
        (["--decode-tp", "4", "--concurrency", "32", "--tp-size", "2"], "tp_size=2"),
        (["--decode-tp", "4", "--concurrency", "32", "--timeline"], "include_timeline"),
        (["--decode-tp", "x", "--concurrency", "32"], "--decode-tp"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], extra: list[str], needle: str
) -> None:
    code, out, err = run([*BASE, "--mode", "disagg", *POOLS, *extra], capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and needle in err, err


def test_pool_flags_without_mode_disagg_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run([*BASE, "--concurrency", "4", "--prefill-workers", "2"], capsys)
    assert code == 2 and "prefill_workers=2" in err and "mode 'agg'" in err


def test_poisson_arrivals(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*BASE[:-2], "--mode", "disagg", *POOLS, "--decode-tp", "4", "--workload", "poisson"]
    code, out, err = run([*argv, "--request-rate", "0.5", "--num-requests", "50"], capsys)
    assert code == 0, err
    assert "disagg (poisson, benchmark window)" in out
    assert "request_rate           0.5" in out and "num_requests           50" in out
    code, _, err = run([*argv, "--request-rate", "0.5", "--concurrency", "4"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "concurrency=4" in err


def test_pools_on_two_devices(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*DISAGG, "--decode-device", "NVIDIA_H200_SXM_141G"]
    code, _, err = run(argv, capsys)
    assert code == 2 and "pool_link" in err and len(err.strip().splitlines()) == 1
    code, out, err = run([*argv, "--pool-link-gb-s", "25", "--pool-link-ms", "3"], capsys)
    assert code == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert "NVIDIA_H100_SXM_80G" in rows["prefill"] and "NVIDIA_H200_SXM_141G" in rows["decode"]
    assert "over pool_link (25.0 GB/s per device, 3.0 ms fixed)" in out
