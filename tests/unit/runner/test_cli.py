"""``chunkwise forward / devices / models / validate``: output and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import EXIT_BROKEN_PIPE, main
from app.core.catalog import device_names, model_names
from app.core.runner.runner import RUNNER_MODEL_VERSION

FORWARD = ["forward", "Qwen/Qwen3-8B", "--device", "NVIDIA_H100_SXM_80G"]
SHAPE = ["--num-queries", "4", "--query-length", "512"]


def test_forward_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*FORWARD, *SHAPE, "--context-length", "1024", "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["latency_ms"] > 0
    assert document["request"]["seq_len"] == 1024 + 512
    assert {c["category"] for c in document["breakdown"]["categories"]} >= {"gemm", "attention"}
    assert set(document["memory"]) >= {"weights_gb", "kv_cache_gb", "available_gb"}
    assert document["identity"].startswith(f"{RUNNER_MODEL_VERSION}:")


def test_forward_table_with_parallel_and_quantization(capsys: pytest.CaptureFixture[str]) -> None:
    args = [*FORWARD, *SHAPE, "--num-devices", "8", "--tp-size", "4", "--decode"]
    assert (
        main([*args, "--quantize-linear-action", "fp8", "--quantize-attention-action", "int8"]) == 0
    )
    out = capsys.readouterr().out
    assert "TP4 DP2" in out and "latency_ms" in out and "attn_all_reduce" in out


@pytest.mark.parametrize(
    ("argv", "valid"),
    [
        (["forward", "no/such-model", "--device", "TEST_DEVICE", *SHAPE], model_names()),
        (["forward", "Qwen/Qwen3-8B", "--device", "NO_SUCH_DEVICE", *SHAPE], device_names()),
        ([*FORWARD, *SHAPE, "--quantize-linear-action", "W3A3"], ["W8A8_DYNAMIC", "NVFP4"]),
        ([*FORWARD, *SHAPE, "--quantize-attention-action", "FP6"], ["INT8", "FP8"]),
    ],
)
def test_unknown_names_exit_2_with_one_line(
    argv: list[str], valid: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    for name in valid:
        assert name in lines[0]


def test_invalid_layout_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*FORWARD, *SHAPE, "--tp-size", "3"]) == 2
    assert "tp=3" in capsys.readouterr().err


def test_devices_and_models(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["devices", "--format", "json"]) == 0
    devices = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in devices] == device_names()
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in model_names())


def test_validate_prints_table_and_csv(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA_H100_SXM_80G" in out and "median APE" in out
    assert "kind,name,model,device,tp,dp,ep,precision,is_decode" in out
    assert "msmodeling_forward" not in out


def test_validate_every_kind_and_unknown_kind(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["validate", "--all", "--format", "json"])
    document = json.loads(capsys.readouterr().out)
    assert {k["kind"] for k in document["kinds"]} == {
        "ttft_bs1",
        "msmodeling_forward",
        "serving_ttft",
        "serving_tpot",
    }
    assert document["targets"]["ttft_bs1"] is True
    # The exit code says whether every kind with a target met it.
    assert code == (0 if document["targets_met"] else 1)
    assert document["targets_met"] == all(document["targets"].values())
    assert main(["validate", "--kind", "nope"]) == 2
    assert "ttft_bs1" in capsys.readouterr().err


def test_validate_can_leave_out_the_layout_duplicates(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def rows(*flags: str) -> int:
        main(["validate", "--kind", "serving_tpot", "--format", "json", *flags])
        document = json.loads(capsys.readouterr().out)
        (overall,) = document["kinds"]
        count: int = overall["count"]
        return count

    # 758 rows; 20 DeepSeek-R1 rows on 64 GPUs repeat an 8-GPU row to the digit.
    assert rows() == 758
    assert rows("--drop-layout-duplicates") == 738


def test_forward_reads_a_local_config_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = Path(__file__).resolve().parents[3] / "app/core/catalog/model_configs"
    (tmp_path / "config.json").write_text(
        (source / "qwen3_dense_0_6b.json").read_text(encoding="utf-8"), encoding="utf-8"
    )
    argv = ["forward", str(tmp_path), "--device", "TEST_DEVICE", *SHAPE, "--format", "json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["model"] == str(tmp_path)


def test_a_closed_pipe_ends_quietly() -> None:
    """``chunkwise validate ... | head -1``: no traceback, the SIGPIPE exit status.

    The reader is gone before the command writes (its end of the pipe is closed first), so
    the first write fails. A reader that closes after one line raced the writer: once in six
    runs on a loaded machine the command exited with its own status (1, targets missed) and
    no error."""
    root = Path(__file__).resolve().parents[3]
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "app.cli", "validate", "--kind", "serving_tpot"],
            cwd=root,
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)
    assert completed.returncode == EXIT_BROKEN_PIPE
    assert completed.stderr == b""
