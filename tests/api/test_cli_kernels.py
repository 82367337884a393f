"""``chunkwise validate --kernels DIR``: AIConfigurator-layout parquet tables built here."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from app.core.catalog import get_device
from app.core.validation.kernels import KernelFamily, KernelPricer
from tests.api.helpers import run

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

REQUIRED_COLUMNS = [
    "system",
    "engine",
    "version",
    "op",
    "quantization",
    "shape",
    "measured_ms",
    "predicted_ms",
    "error",
]
GEMM_ROWS = [
    ("bfloat16", 1, 4096, 4096, 0.03),
    ("bfloat16", 8192, 8192, 8192, 2.2),
    ("fp8", 16, 7168, 2048, 0.012),
    ("int2", 16, 7168, 2048, 0.01),  # no runner quantization: refused
    ("fp8", 32, 7168, 2048, 0.0),  # no positive measurement: refused
]


def _write(path: Path, columns: dict[str, list[object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)


def _gemm(path: Path, rows: list[tuple[str, int, int, int, float]]) -> None:
    _write(
        path,
        {
            "framework": ["TRTLLM"] * len(rows),
            "version": ["1.0.0"] * len(rows),
            "device": ["NVIDIA H100 80GB HBM3"] * len(rows),
            "op_name": ["gemm"] * len(rows),
            "kernel_source": ["torch_flow"] * len(rows),
            "gemm_dtype": [r[0] for r in rows],
            "m": [r[1] for r in rows],
            "n": [r[2] for r in rows],
            "k": [r[3] for r in rows],
            "latency": [r[4] for r in rows],
        },
    )


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    """An unpacked-wheel tree: two H100 tables the runner prices, one module table it refuses,
    and a system without a catalog device."""
    data = tmp_path / "aiconfigurator_core" / "systems" / "data"
    _gemm(data / "h100_sxm" / "gemm" / "trtllm" / "1.0.0" / "gemm_perf.parquet", GEMM_ROWS)
    _write(
        data / "h100_sxm" / "comm" / "nccl" / "2.27.3" / "nccl_perf.parquet",
        {
            "op_name": ["all_reduce", "all_gather"],
            "kernel_source": ["NCCL", "NCCL"],
            "nccl_dtype": ["half", "half"],
            "num_gpus": [8, 8],
            "message_size": [1 << 20, 1 << 20],
            "latency": [0.04, 0.02],
        },
    )
    _write(
        data / "h100_sxm" / "mla" / "trtllm" / "1.0.0" / "mla_context_module_perf.parquet",
        {"kernel_source": ["default"], "num_heads": [128], "isl": [1024], "latency": [1.5]},
    )
    _gemm(
        data / "zz_future" / "gemm" / "vllm" / "0.1.0" / "gemm_perf.parquet",
        GEMM_ROWS[:1],
    )
    return tmp_path


def test_every_point_is_predicted_or_refused_in_the_csv(
    wheel: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_csv = tmp_path / "points.csv"
    code, out, err = run(["validate", "--kernels", str(wheel), "--csv", str(out_csv)], capsys)
    assert (code, err) == (0, "")
    rows = list(csv.DictReader(io.StringIO(out_csv.read_text(encoding="utf-8"))))
    assert len(rows) == len(GEMM_ROWS) + 2 + 1 + 1  # one row per measured point
    assert set(REQUIRED_COLUMNS) <= set(rows[0])
    device = get_device("NVIDIA_H100_SXM_80G")
    gemm = [r for r in rows if r["op"] == "gemm" and r["predicted_ms"]]
    assert len(gemm) == 3
    for row in gemm:
        pricer = KernelPricer(device, row["engine"])  # the engine's fitted curves
        shape = dict(part.split("=") for part in row["shape"].split())
        key = (row["quantization"], int(shape["m"]), int(shape["n"]), int(shape["k"]))
        expected = pricer.price(KernelFamily.GEMM, key).predicted_ms
        assert expected is not None
        assert float(row["predicted_ms"]) == pytest.approx(expected)
        error = (expected - float(row["measured_ms"])) / float(row["measured_ms"]) * 100
        assert float(row["error"]) == pytest.approx(error, abs=0.006)
    refused = {r["error"] for r in rows if r["predicted_ms"] == ""}
    assert refused == {
        "GEMM dtype int2: no runner quantization",
        "measured latency missing or not positive",
        "module measurement (several ops fused): the runner prices ops, not modules",
        "no catalog device for this system",
    }
    nccl = sorted(r["op"] for r in rows if r["engine"] == "nccl")
    assert nccl == ["nccl[all_gather]", "nccl[all_reduce]"]
    assert "9 measured points: 5 predicted, 4 refused" in out
    assert "refused         1  no catalog device for this system" in out


def test_json_groups_per_system_engine_op_quantization_and_band(
    wheel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["validate", "--kernels", str(wheel), "--format", "json"], capsys)
    assert code == 0
    body = json.loads(out)
    assert (body["points"], body["predicted"], body["refused"]) == (9, 5, 4)
    groups = {
        (g["system"], g["engine"], g["op"], g["quantization"], g["band"]): g["n"]
        for g in body["groups"]
    }
    assert groups[("h100_sxm", "trtllm", "gemm", "bfloat16", "all")] == 2
    assert groups[("h100_sxm", "trtllm", "gemm", "bfloat16", "M<=128")] == 1
    assert groups[("h100_sxm", "trtllm", "gemm", "bfloat16", "M>1024")] == 1
    assert groups[("h100_sxm", "nccl", "nccl[all_reduce]", "half", "all")] == 1
    assert sum(r["points"] for r in body["refusals"]) == 4


def test_system_and_engine_filters(wheel: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["validate", "--kernels", str(wheel / "aiconfigurator_core" / "systems")]
    code, out, _ = run(
        [*argv, "--system", "h100_sxm", "--engine", "nccl", "--format", "json"], capsys
    )
    assert code == 0
    assert json.loads(out)["points"] == 2


def test_train_and_test_splits_partition_the_points(
    wheel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    counts = {}
    for split in ("all", "train", "test"):
        code, out, _ = run(
            ["validate", "--kernels", str(wheel), "--split", split, "--format", "json"], capsys
        )
        assert code == 0
        counts[split] = json.loads(out)["points"]
    assert counts["train"] + counts["test"] == counts["all"] == 9


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--system", "h999"], "--system='h999' is invalid: must be one of h100_sxm, zz_future"),
        (["--engine", "tensorrt"], "must be one of nccl, trtllm, vllm"),
        (["--kind", "ttft_bs1"], "leave out --kind, --all and --cases"),
    ],
)
def test_bad_filters_exit_2_with_one_line(
    wheel: Path, extra: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["validate", "--kernels", str(wheel), *extra], capsys)
    assert (code, out) == (2, "")
    assert fragment in err and err.count("\n") == 1


def test_a_folder_without_the_layout_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty" / "h100_sxm").mkdir(parents=True)
    code, _, err = run(["validate", "--kernels", str(tmp_path / "empty")], capsys)
    assert code == 2 and err.count("\n") == 1
    assert str(tmp_path / "empty") in err and "systems/data" in err


def test_an_unreadable_table_exits_2_naming_it(
    wheel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = wheel / "aiconfigurator_core/systems/data/h100_sxm/moe/vllm/0.1/moe_perf.parquet"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"not parquet")
    code, out, err = run(["validate", "--kernels", str(wheel)], capsys)
    assert (code, out) == (2, "")
    assert str(broken) in err and err.count("\n") == 1


def test_kernel_flags_need_kernels(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["validate", "--system", "h100_sxm"], capsys)
    assert code == 2 and "go with --kernels" in err


def test_the_baseline_page_renders_every_group_and_both_halves(
    wheel: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from scripts.kernel_baseline import main as render_baseline

    paths = {}
    for split in ("all", "train", "test"):
        code, out, _ = run(
            ["validate", "--kernels", str(wheel), "--split", split, "--format", "json"], capsys
        )
        assert code == 0
        paths[split] = tmp_path / f"{split}.json"
        paths[split].write_text(out, encoding="utf-8")
    argv = [str(paths["all"]), "--train", str(paths["train"]), "--test", str(paths["test"])]
    assert render_baseline(argv) == 0
    page = capsys.readouterr().out
    assert "9 measured points: 5 predicted, 4 refused." in page
    assert "| 1 | no catalog device for this system |" in page
    row = next(line for line in page.splitlines() if "| trtllm | gemm | bfloat16 |" in line)
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[4] == "2" and int(cells[8]) + int(cells[10]) == 2  # n = n train + n test
    assert "| h100_sxm | trtllm | gemm | bfloat16 | M<=128 | 1 |" in page
