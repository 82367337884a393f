"""``chunkwise optimize`` / ``simulate``: thin adapters over the service functions."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from app.cli import build_parser
from app.models.forward import ForwardRequest
from app.models.optimize import OptimizeRequest
from app.models.simulate import SimulateRequest
from app.models.workload import SchedulerOptions
from tests.api.helpers import run

#: The RFC examples' deployment, under the RFC's semantics (``--engine msmodeling``: burst,
#: decode-first); the default engine profile has tests of its own.
BASE = [
    "Qwen/Qwen3-32B",
    "--device",
    "ATLAS_800_A2_376T_64G",
    "--input-length",
    "3500",
    "--output-length",
    "1500",
    "--engine",
    "msmodeling",
]
OPTIMIZE = ["optimize", *BASE, "--num-devices", "8", "--tpot-limit", "50"]
OPTIMIZE_NO_LIMIT = ["optimize", *BASE, "--num-devices"]
JSON_8192 = ["--max-batched-tokens", "8192", "--format", "json"]


@pytest.fixture(autouse=True)
def memory_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APP_CACHE_BACKEND", "memory")


def test_optimize_table(capsys: pytest.CaptureFixture[str]) -> None:
    layouts = ["--max-batched-tokens", "8192", "--tp-sizes", "1", "2", "4", "8"]
    code, out, err = run([*OPTIMIZE, *layouts, "--quantize-linear-action", "DISABLED"], capsys)
    assert code == 0, err
    assert "TP8 DP1" in out and "tokens/s/device" in out
    assert "infeasible agg TP1 DP8: memory" in out  # 16-bit weights of 32B on 64 GB
    code, out, err = run([*OPTIMIZE, *layouts], capsys)
    assert code == 0, err
    assert "infeasible agg TP1 DP8" not in out  # msmodeling's default W8A8_DYNAMIC fits


def test_the_rfc_example_runs_under_msmodelings_defaults(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The RFC's own example: msmodeling quantizes linear layers to W8A8_DYNAMIC and budgets
    8192 tokens by default, so under --engine msmodeling it is feasible; under the checkpoint's
    16-bit weights it says why not and how to get out."""
    example = [
        "optimize", "Qwen/Qwen3-32B", "--device", "TEST_DEVICE", "--num-devices", "1",
        "--input-length", "32768", "--output-length", "1024", "--tpot-limits", "50",
    ]  # fmt: skip
    code, out, err = run([*example, "--engine", "msmodeling", "--format", "json"], capsys)
    assert code == 0, err
    body = json.loads(out)
    assert body["best"] is not None and body["input"]["quantize_linear_action"] == "W8A8_DYNAMIC"
    assert body["input"]["max_batched_tokens"] == 8192
    code, out, err = run([*example, "--max-batched-tokens", "8192", "--format", "json"], capsys)
    assert code == 0, err
    body = json.loads(out)
    assert body["best"] is None and "memory" in body["reason"]
    assert any("W8A8_DYNAMIC" in s for s in body["suggestions"])


def test_optimize_json_matches_the_api_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run([*OPTIMIZE, "--max-batched-tokens", "8192", "--format", "json"], capsys)
    assert code == 0
    body = json.loads(out)
    assert body["best"]["tpot_ms"] <= 50
    assert body["probes"]


def test_optimize_csv(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        [*OPTIMIZE, "--max-batched-tokens", "2048", "--tp-sizes", "4,8", "--format", "csv"],
        capsys,
    )
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {r["parallel"] for r in rows} <= {"TP4 DP2", "TP8 DP1"}
    assert all(r["prefill_num_chunks"] == "2" and r["max_batched_tokens"] == "2048" for r in rows)


def test_deprecated_max_prefill_tokens_still_works(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run([*OPTIMIZE, "--max-prefill-tokens", "8192", "--format", "json"], capsys)
    assert code == 0
    assert "deprecated" in err and "--max-batched-tokens" in err
    assert json.loads(out)["input"]["max_batched_tokens"] == 8192


def test_progress_goes_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        [*OPTIMIZE, "--max-batched-tokens", "8192", "--tp-sizes", "4", "8", "--progress"], capsys
    )
    assert code == 0
    assert "searching layout 1: TP4 DP2" in err
    assert "searching" not in out


def test_disagg_and_pd_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        [*OPTIMIZE_NO_LIMIT, "8", "--ttft-limit", "3000", "--disagg", *JSON_8192],
        capsys,
    )
    assert code == 0
    assert json.loads(out)["mode"] == "disagg_prefill"
    code, out, _ = run(
        [
            *OPTIMIZE_NO_LIMIT,
            "16",
            "--ttft-limits",
            "3000",
            "--tpot-limits",
            "50",
            "--enable-optimize-prefill-decode-ratio",
            "--prefill-devices-per-instance",
            "4",
            "--decode-devices-per-instance",
            "8",
            "--max-batched-tokens",
            "8192",
        ],
        capsys,
    )
    assert code == 0
    assert "pd_ratio=" in out


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--max-batched-tokens", "0"], "--max-batched-tokens"),
        (["--max-batched-tokens", "-1"], "--max-batched-tokens"),
        (["--max-batched-tokens", "8192", "--prefix-cache-hit-rate", "1"], "prefix-cache-hit-rate"),
        (["--max-batched-tokens", "x"], "invalid int value"),
        (["--max-batched-tokens", "8192", "--tp-sizes", "3"], "tp_sizes"),
        (["--max-batched-tokens", "8192", "--quantize-linear-action", "W3"], "W8A8_DYNAMIC"),
    ],
)
def test_invalid_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], extra: list[str], needle: str
) -> None:
    code, out, err = run([*OPTIMIZE, *extra], capsys)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert needle in err


def test_omitted_budget_is_the_engine_default_for_the_device(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # ATLAS_800_A2_376T_64G has 64 GiB (< 70 GiB): vLLM's small-device default, 2048.
    vllm = [*OPTIMIZE, "--format", "json"]
    vllm[vllm.index("msmodeling")] = "vllm"
    code, out, _ = run(vllm, capsys)
    assert code == 0
    document = json.loads(out)
    assert document["input"]["max_batched_tokens"] == 2048
    assert {row["max_batched_tokens"] for row in document["rows"]} == {2048}
    # msmodeling's own default is a fixed 8192 (--max-prefill-tokens).
    code, out, _ = run([*OPTIMIZE, "--format", "json"], capsys)
    assert code == 0 and json.loads(out)["input"]["max_batched_tokens"] == 8192


def test_unknown_device_names_the_valid_ones(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*OPTIMIZE, "--max-batched-tokens", "8192"]
    argv[argv.index("ATLAS_800_A2_376T_64G")] = "TPU9"
    code, _, err = run(argv, capsys)
    assert code == 2
    assert "unknown device 'TPU9'" in err and "ATLAS_800_A2_376T_64G" in err


def test_simulate_table_and_timeline_csv(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", *BASE, "--max-batched-tokens", "2048", "--concurrency", "8"]
    code, out, _ = run([*argv, "--tp-size", "4"], capsys)
    assert code == 0
    assert "time_simulation" in out and "prefill_num_chunks" in out
    code, out, _ = run([*argv, "--tp-size", "4", "--timeline", "--format", "csv"], capsys)
    assert code == 0
    steps = list(csv.DictReader(io.StringIO(out)))
    assert sum(int(s["finished"]) for s in steps) == 8


def test_simulate_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", *BASE, "--max-batched-tokens", "8192", "--concurrency", "8"]
    code, out, _ = run([*argv, "--tp-size", "4", "--format", "json"], capsys)
    assert code == 0
    assert json.loads(out)["method"] == "closed_form_waves"


def test_simulate_table_names_the_scheduler_and_the_budget(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["simulate", *BASE, "--concurrency", "8", "--tp-size", "4"]
    code, out, err = run([*argv, "--scheduler", "vllm", "--mixed-latency", "sum"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["engine", "msmodeling"]
    assert lines[1].split() == [
        "scheduler",
        "vllm",
        "(prefill_order=continue_first,",
        "mixed_latency=sum)",
    ]
    assert lines[2].split()[0] == "max_batched_tokens" and int(lines[2].split()[1]) > 0


def test_simulate_concurrency_is_split_over_the_replicas(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["simulate", *BASE, "--max-batched-tokens", "2048", "--tp-size", "2"]
    code, out, err = run([*argv, "--concurrency", "10", "--dp-size", "4"], capsys)
    assert code == 0, err
    assert "replica_split           3 on 2 replicas, 2 on 2 replicas" in out
    code, out, _ = run([*argv, "--concurrency", "10", "--dp-size", "4", "--format", "json"], capsys)
    body = json.loads(out)
    assert (body["concurrency"], body["batch_size"]) == (10, 3)
    code, out, err = run([*argv, "--concurrency", "3", "--dp-size", "4"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "concurrency=3" in err and "dp_size=4" in err


def test_simulate_num_devices_sets_the_replicas(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", *BASE, "--max-batched-tokens", "2048", "--tp-size", "2"]
    argv += ["--concurrency", "8", "--format", "json"]
    code, out, err = run([*argv, "--num-devices", "8"], capsys)
    assert code == 0, err
    derived = json.loads(out)
    code, out, _ = run([*argv, "--dp-size", "4"], capsys)
    explicit = json.loads(out)
    assert derived["input"]["dp_size"] == 4 and derived["ttft_ms"] == explicit["ttft_ms"]
    code, out, err = run([*argv, "--dp-size", "2", "--num-devices", "8"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "num_devices=8" in err and "2 x 2 = 4" in err


POISSON = ["simulate", *BASE, "--max-batched-tokens", "2048", "--tp-size", "4"]


def test_simulate_poisson(capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--workload", "poisson", "--request-rate", "1.5", "--num-requests", "60"]
    code, out, err = run([*POISSON, *flags, "--seed", "4", "--format", "json"], capsys)
    assert code == 0, err
    body = json.loads(out)
    assert (body["workload"], body["request_rate"], body["seed"]) == ("poisson", 1.5, 4)
    assert body["num_requests"] == 60 and body["e2e_ms"] > body["ttft_ms"] > 0
    code, out, _ = run([*POISSON, *flags, "--max-concurrency", "3", "--dp-size", "2"], capsys)
    assert code == 0
    assert "30 requests at 0.75 req/s (max 2 in flight) on 1 replica" in out
    assert "mean_running_batch" in out


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--request-rate", "0"], "--request-rate: Input should be greater than 0"),
        (["--request-rate", "-2"], "--request-rate: Input should be greater than 0"),
        ([], "request_rate=None is invalid: must be given for workload 'poisson'"),
        (["--request-rate", "1", "--concurrency", "8"], "concurrency=8 is invalid"),
        (["--request-rate", "1", "--dp-size", "2", "--num-requests", "1"], "dp_size=2"),
    ],
)
def test_simulate_poisson_bad_input(
    capsys: pytest.CaptureFixture[str], flags: list[str], words: str
) -> None:
    code, out, err = run([*POISSON, "--workload", "poisson", *flags], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and words in err


def test_unknown_workload_lists_the_valid_ones(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run([*POISSON, "--workload", "open", "--concurrency", "4"], capsys)
    assert code == 2 and "'burst', 'closed_loop', 'poisson'" in err
    code, _, err = run([*OPTIMIZE, "--workload", "poisson"], capsys)
    assert code == 2 and "not a request rate" in err and err.count("\n") == 1


def test_scheduler_and_workload_flags(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", *BASE, "--max-batched-tokens", "2048", "--concurrency", "8"]
    flags = ["--scheduler", "vllm", "--workload", "closed_loop", "--requests-per-client", "2"]
    code, out, _ = run([*argv, "--tp-size", "4", *flags, "--format", "json"], capsys)
    assert code == 0
    body = json.loads(out)
    assert body["workload"] == "closed_loop" and body["num_requests"] == 16
    code, _, err = run(
        [*argv, "--tp-size", "4", "--scheduler", "vllm", "--slack-ratio", "1.2"], capsys
    )
    assert code == 2 and "slack_ratio" in err


def test_disagg_both_sides_csv_is_one_table(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*OPTIMIZE_NO_LIMIT, "8", "--disagg", "--tp-sizes", "4", "8", *JSON_8192[:2]]
    code, out, _ = run([*argv, "--format", "csv"], capsys)
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {r["role"] for r in rows} == {"prefill", "decode"}
    assert out.count("role,") == 1


#: Runs one CLI command in a fresh interpreter and prints the modules it loaded, one a line.
LOADED_MODULES = """
import contextlib, io, sys
from app.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
print(code)
print("\\n".join(sorted(sys.modules)))
"""
#: Where the per-command import check's sweep writes its rows.
SWEEP_OUT = str(Path(tempfile.gettempdir()) / f"chunkwise-test-cli-sweep-{os.getpid()}.csv")
#: pydantic_settings (with python-dotenv and asyncio, ~25 ms) reads the service's environment; a
#: CLI command reads it with app.service_settings.settings_from_environ.
SERVER_ONLY = (
    "redis",
    "fastapi",
    "starlette",
    "uvicorn",
    "celery",
    "kombu",
    "pydantic_settings",
    "dotenv",
)
#: Modules only some commands need: each command may load only its own.
COMMAND_ONLY = {
    "app.core.validation": "validate",
    "app.models.catalog": ("models", "devices"),
    "app.models.forward": "forward",
    "app.models.simulate": ("simulate", "sweep"),
    "app.services.optimize": "optimize",
    "app.services.simulate": ("simulate", "sweep"),
    "app.services.sweep": "sweep",
    "app.core.sweep": "sweep",
    "app.services.forward": "forward",
    "app.services.validate": "validate",
    # Only asked for: a launch (--emit), a disaggregated mode, a calibration, a capacity plan.
    "app.core.deploy": (),
    "app.services.deploy": (),
    "app.services.disagg_optimize": (),
    "app.services.disagg_simulate": (),
    "app.core.workload.disagg_serving": ("simulate", "validate", "sweep"),
    "app.services.capacity": (),
    "app.models.calibration": (),
    "app.models.capacity": (),
}


@pytest.mark.parametrize(
    "argv",
    [
        [*OPTIMIZE, "--max-batched-tokens", "8192", "--tp-sizes", "8"],
        ["simulate", *BASE, "--concurrency", "4"],
        ["forward", *BASE[:3], "--num-queries", "1", "--query-length", "128"],
        ["models"],
        ["devices"],
        ["validate", "--format", "json"],
        ["sweep", "docs/examples/sweep.yaml", "--out", SWEEP_OUT],
    ],
    ids=["optimize", "simulate", "forward", "models", "devices", "validate", "sweep"],
)
def test_cli_commands_load_no_server_or_redis_modules(argv: list[str]) -> None:
    """Start-up: a CLI-only command with the in-process cache imports no HTTP stack, no redis
    client and no pydantic-settings (``bench/bench_startup.py`` measures what that saves)."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "APP_CACHE_BACKEND": "memory"}
    done = subprocess.run(
        [sys.executable, "-c", LOADED_MODULES, *argv],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    Path(SWEEP_OUT).unlink(missing_ok=True)  # the sweep's rows (only its imports count)
    code, *modules = done.stdout.splitlines()
    assert code in ("0", "1"), done.stderr  # validate exits 1 while its targets are unmet
    assert "app.services" in modules  # every command goes through the service layer
    loaded = sorted({m.split(".")[0] for m in modules} & set(SERVER_ONLY))
    assert loaded == [], f"{argv[0]} imported {loaded}"
    for module, users in COMMAND_ONLY.items():
        if argv[0] not in users:
            assert module not in modules, f"{argv[0]} imported {module}"


# -- the parser against the request models -----------------------------------------------------
#: Request fields whose flag is named differently (CLI names follow msmodeling's).
FLAG_DEST = {
    "ttft_limit_ms": "ttft_limit",
    "tpot_limit_ms": "tpot_limit",
    "include_timeline": "timeline",
    "scheduler.name": "scheduler",
    "serving_overhead_ms": "serving_cost",  # msmodeling's --serving-cost
}
#: Request fields with no flag of their own, and why.
NOT_A_FLAG = {
    "include_probes": "set from --format (probes only in the JSON document)",
    "pool_link": "an object: --pool-link-gb-s and --pool-link-ms (its name in the API only)",
}
#: Flags that are no request field.
CLI_ONLY = {
    "help",
    "format",
    "progress",
    "disagg",
    "enable_optimize_prefill_decode_ratio",
    "max_prefill_tokens",  # deprecated alias of --max-batched-tokens
    "dump_original_results",  # msmodeling's: every probe after the table
    "jobs",  # msmodeling's: accepted and ignored with a note
    "batch_range",  # msmodeling's [MIN] MAX: MAX is max_batch_size
    # msmodeling's flags with no meaning here, refused with a pointer
    "compile",
    "compile_allow_graph_break",
    "mxfp4_group_size",
    "image_height",
    "image_width",
    "log_level",
    "emit",  # the best row's launch (POST /v1/deploy's service)
    "pareto",  # the response's Pareto front as a table after the ranked one
    "pool_link_gb_s",  # pool_link.bandwidth_gb_s
    "pool_link_ms",  # pool_link.fixed_ms
}


def _subcommand(name: str) -> argparse.ArgumentParser:
    (sub,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = sub.choices[name]
    return parser


def _fields(model: type[BaseModel], prefix: str = "") -> dict[str, FieldInfo]:
    """Every leaf field, the scheduler's options as ``scheduler.<name>``."""
    out: dict[str, FieldInfo] = {}
    for name, info in model.model_fields.items():
        if info.annotation is SchedulerOptions:
            out.update(_fields(SchedulerOptions, "scheduler."))
        else:
            out[prefix + name] = info
    return out


def _choices(annotation: Any) -> tuple[Any, ...] | None:
    """The Literal's values of ``Literal[...]`` or ``Literal[...] | None``; None otherwise."""
    if get_origin(annotation) is Literal:
        return get_args(annotation)
    literals = [a for a in get_args(annotation) if get_origin(a) is Literal]
    return get_args(literals[0]) if literals else None


@pytest.mark.parametrize(
    ("command", "model"),
    [("optimize", OptimizeRequest), ("simulate", SimulateRequest), ("forward", ForwardRequest)],
)
def test_every_request_field_is_a_flag_with_the_models_choices_and_default(
    command: str, model: type[BaseModel]
) -> None:
    actions = {a.dest: a for a in _subcommand(command)._actions}
    fields = _fields(model)
    # mode is a flag of its own (--mode disagg); optimize's also comes from msmodeling's
    # --disagg / --enable-optimize-prefill-decode-ratio
    not_a_flag = set(NOT_A_FLAG)
    expected = {FLAG_DEST.get(f, f.removeprefix("scheduler.")) for f in fields} - not_a_flag
    assert set(actions) - CLI_ONLY == expected, "a request field without a flag, or vice versa"
    for field, info in fields.items():
        if field in not_a_flag:
            continue
        action = actions[FLAG_DEST.get(field, field.removeprefix("scheduler."))]
        choices = _choices(info.annotation)
        if choices is not None:
            assert tuple(action.choices or ()) == choices, field
        # A flag either leaves the field out (None: the model's default applies) or has the
        # model's default; a flag is required exactly when the field is.
        if action.default is not None:
            assert action.default == info.get_default(call_default_factory=True), field
        assert action.required == info.is_required(), field


# -- validate --cases ----------------------------------------------------------------------------
CASE_HEADER = (
    "case_id,model,hardware,engine,gemm_quant,moe_quant,tp,pp,attn_dp,moe_tp,moe_ep,"
    "num_devices,isl,osl,concurrency,ttft_ms,tpot_ms"
)
CASE_ROW = "a,Qwen/Qwen3-32B,H100 SXM 80GB,vllm 0.18.0,fp8,fp8,2,1,1,1,0,2,2048,256,16,300,20"


def test_validate_cases_writes_one_out_row_per_input_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = tmp_path / "mine.csv"
    unknown = CASE_ROW.replace("a,Qwen/Qwen3-32B", "b,acme/Unknown-1B")
    cases.write_text(f"{CASE_HEADER}\n{CASE_ROW}\n{unknown}\n", encoding="utf-8")
    out = tmp_path / "out.csv"
    code, printed, err = run(["validate", "--cases", str(cases), "--csv", str(out)], capsys)
    assert code == 0, err
    assert "H100 SXM 80GB | vllm | Qwen/Qwen3-32B" in printed and "overall" in printed
    rows = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8"))))
    assert [r["case_id"] for r in rows] == ["a", "b"]
    assert float(rows[0]["ttft_ms_pred"]) > 0 and float(rows[0]["tpot_ms_pred"]) > 0
    assert rows[1]["ttft_ms_pred"] == "" and "acme/Unknown-1B" in rows[1]["error"]
    code, printed, _ = run(["validate", "--cases", str(cases), "--format", "json"], capsys)
    assert code == 0 and json.loads(printed)["overall"]["refused"] == 1


@pytest.mark.parametrize(
    ("content", "extra", "needle"),
    [
        ("case_id,model\nx,y\n", [], "missing hardware"),
        (f"{CASE_HEADER}\n{CASE_ROW}\n", ["--all"], "leave out --kind and --all"),
        (None, [], "No such file"),
    ],
)
def test_validate_cases_refuses_bad_input_in_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str | None,
    extra: list[str],
    needle: str,
) -> None:
    cases = tmp_path / "cases.csv"
    if content is not None:
        cases.write_text(content, encoding="utf-8")
    code, out, err = run(["validate", "--cases", str(cases), *extra], capsys)
    assert code == 2 and out == ""
    assert needle in err and len(err.strip().splitlines()) == 1


def test_validate_replicas_prints_the_floor_and_refuses_an_ungroupable_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = tmp_path / "mine.csv"
    again = CASE_ROW.replace("a,", "b,", 1).replace("vllm 0.18.0", "vllm 0.19.0")
    cases.write_text(f"{CASE_HEADER}\n{CASE_ROW}\n{again.replace(',300,', ',330,')}\n")
    out = tmp_path / "out.csv"
    code, printed, err = run(["validate", "--replicas", str(cases), "--csv", str(out)], capsys)
    assert code == 0, err
    assert "1 measured more than once" in printed and "vllm" in printed
    assert [r["case_id"] for r in csv.DictReader(io.StringIO(out.read_text()))] == ["a", "b"]
    code, printed, _ = run(["validate", "--replicas", str(cases), "--format", "json"], capsys)
    assert code == 0 and json.loads(printed)["overall"]["pairs"] == 1
    cases.write_text("case_id,model\nx,y\n", encoding="utf-8")
    code, printed, err = run(["validate", "--replicas", str(cases)], capsys)
    assert code == 2 and printed == "" and len(err.strip().splitlines()) == 1
    assert "missing ttft_ms, tpot_ms, hardware, engine" in err


def test_msmodelings_other_flags(capsys: pytest.CaptureFixture[str]) -> None:
    """--jobs is accepted and ignored with a note, --dump-original-results prints every probe,
    --device A B is refused in one line."""
    argv = [*OPTIMIZE, "--max-batched-tokens", "8192", "--tp-sizes", "8"]
    code, out, err = run([*argv, "--jobs", "4", "--dump-original-results"], capsys)
    assert code == 0, err
    assert "--jobs 4 is ignored" in err
    probes = [line for line in out.splitlines() if line.startswith("  agg TP8 DP1 batch=")]
    assert probes and any(line.endswith(" ok") for line in probes)
    two = [a if a != "ATLAS_800_A2_376T_64G" else "ATLAS_800_A2_376T_64G TEST_DEVICE" for a in argv]
    two = " ".join(two).split()
    for command in (two, ["simulate", *two[1:-4], "--concurrency", "4"]):
        code, _, err = run(command, capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1
        assert "--device takes one device" in err


def test_pareto_front_table(capsys: pytest.CaptureFixture[str]) -> None:
    """--pareto prints the response's front: tokens/s per device falls as tokens/s per user
    rises, and the best row's point is on it."""
    argv = [*OPTIMIZE, "--max-batched-tokens", "8192", "--pareto"]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("pareto front ("))
    points = [line.split() for line in lines[start + 3 :] if line.strip()]
    assert len(points) >= 2
    per_user = [float(p[4].replace(",", "")) for p in points]
    per_device = [float(p[5].replace(",", "")) for p in points]
    assert per_user == sorted(per_user) and per_device == sorted(per_device, reverse=True)
    code, out, _ = run([*argv[:-1], "--format", "json"], capsys)
    body = json.loads(out)
    best = body["best"]
    on_front = [
        p
        for p in body["pareto"]
        if p["parallel"] == best["parallel"] and p["concurrency"] == best["concurrency"]
    ]
    assert on_front and on_front[0]["feasible"]
    assert on_front[0]["throughput_per_device"] == best["throughput_per_device"]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--compile"], "--compile (msmodeling)"),
        (["--image-height", "224"], "multimodal inputs are not modelled"),
        (["--mxfp4-group-size", "64"], "32-element groups"),
        (["--batch-range", "2", "8"], "starts at batch 1"),
        (["--batch-range", "8", "--max-batch-size", "8"], "give one"),
    ],
)
def test_msmodelings_unmodelled_flags_are_refused_with_a_pointer(
    capsys: pytest.CaptureFixture[str], extra: list[str], needle: str
) -> None:
    code, out, err = run([*OPTIMIZE, *extra], capsys)
    assert code == 2 and out == ""
    assert needle in err and len(err.strip().splitlines()) == 1


def test_msmodelings_batch_range_and_serving_cost_map_to_chunkwise_fields(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run([*OPTIMIZE, "--batch-range", "1", "8", "--format", "json"], capsys)
    assert code == 0, err
    assert json.loads(out)["input"]["max_batch_size"] == 8
    disagg = [*OPTIMIZE, "--disagg", "--ttft-limit", "5000", "--serving-cost", "25"]
    code, out, err = run([*disagg, "--format", "json"], capsys)
    assert code == 0, err
    bodies = json.loads(out)  # one document per mode (OPTIMIZE has a TPOT limit: both sides)
    assert [b["input"]["serving_overhead_ms"] for b in bodies] == [25, 25]


def test_text_tables_print_memory_in_gib(capsys: pytest.CaptureFixture[str]) -> None:
    """A 64G device is 64 GiB (68.7 GB): the tables say GiB; JSON keeps the API's GB."""
    code, out, _ = run(["devices"], capsys)
    assert code == 0
    header, _, *lines = out.splitlines()
    column = header.split().index("hbm_gib")
    row = next(line.split() for line in lines if line.startswith("ATLAS_800_A2_376T_64G "))
    assert row[column] == "64.0"
    code, out, _ = run([*OPTIMIZE, "--max-batched-tokens", "8192", "--format", "json"], capsys)
    best = json.loads(out)["best"]
    code, out, _ = run([*OPTIMIZE, "--max-batched-tokens", "8192"], capsys)
    assert code == 0 and "mem_left_gib" in out
    assert f"{best['memory_left_gb'] * 1e9 / 2**30:,.2f}" in out
