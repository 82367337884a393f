"""``chunkwise optimize --emit``: the best row's launch through the real parser and service."""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

from app.core.deploy import ENGINE_CLIS, TRTLLM_EXTRA_OPTIONS_FILE
from tests.api.helpers import run
from tests.api.test_cli import OPTIMIZE
from tests.unit.deploy.cli_parsing import parse_emitted

FAST = [*OPTIMIZE, "--max-batched-tokens", "8192", "--tp-sizes", "4", "8"]


@pytest.fixture(autouse=True)
def memory_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APP_CACHE_BACKEND", "memory")


def test_emit_prints_the_best_rows_launch_after_the_table(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run([*FAST, "--emit", "vllm"], capsys)
    assert code == 0, err
    table, launch = out.split("launch (vllm): ", 1)
    assert "TP8 DP1" in table
    command = next(line for line in launch.splitlines() if line.startswith("vllm serve"))
    args = parse_emitted(ENGINE_CLIS["vllm"], shlex.split(command))
    assert args.max_num_batched_tokens == "8192"
    assert "# kubernetes.yaml" in launch and "# docker-compose.yaml" in launch


def test_emit_in_json_is_under_deploy(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run([*FAST, "--format", "json", "--emit", "trtllm"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "engine" in err  # on Ascend
    argv = [*FAST, "--device", "NVIDIA_H100_SXM_80G", "--format", "json", "--emit", "trtllm"]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    body = json.loads(out)
    best, launch = body["best"], body["deploy"]
    assert launch["engine"] == "trtllm"
    assert launch["replicas"] * launch["devices_per_replica"] == best["num_devices"]
    parse_emitted(ENGINE_CLIS["trtllm"], launch["command"]["argv"])
    assert str(best["batch_size"]) in launch["command"]["argv"]
    extra = yaml.safe_load(launch["files"][TRTLLM_EXTRA_OPTIONS_FILE])
    assert "kv_cache_config" in extra


def test_emit_with_csv_keeps_stdout_a_csv(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run([*FAST, "--format", "csv", "--emit", "sglang"], capsys)
    assert code == 0, err
    assert "launch_server" not in out and "python3 -m sglang.launch_server" in err


def test_nothing_feasible_emits_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run([*FAST, "--tpot-limit", "0.01", "--emit", "vllm"], capsys)
    assert code == 0, err
    assert "vllm serve" not in out
    assert "no best agg row to emit" in err


@pytest.mark.parametrize("engine", ["tgi", "msmodeling"])
def test_unknown_emit_engine_exits_2_in_one_line(
    capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    code, out, err = run([*FAST, "--emit", engine], capsys)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert "--emit" in err and "vllm" in err and "trtllm" in err


def test_a_catalog_alias_is_served_by_its_hugging_face_id(
    capsys: pytest.CaptureFixture[str],
) -> None:
    alias = [arg if arg != "Qwen/Qwen3-32B" else "qwen3-32b" for arg in FAST]
    code, out, err = run([*alias, "--format", "json", "--emit", "sglang"], capsys)
    assert code == 0, err
    argv = json.loads(out)["deploy"]["command"]["argv"]
    assert argv[argv.index("--model-path") + 1] == "Qwen/Qwen3-32B"
