"""The MoE fit honours the wheel's ``reuse.yaml`` declarations (docs/kernels.md, "TensorRT-LLM
gpt-oss: the Hopper MoE table and the reused Blackwell rows").

TensorRT-LLM 1.3.0rc23's Blackwell ``moe_perf`` tables collected the DSV4 shapes only and
declare every other shape the 1.3.0rc20 rows; the fit of rc23 (the runner's default) must see
those rows, gpt-oss's shape among them, or it extrapolates from the DSV4 shapes alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("numpy")
pytest.importorskip("yaml")

from app.core.runner.kernel_fit_moe import kernel_fit_moe  # noqa: E402
from scripts.fit_kernels_moe import REUSE_FILE, _with_reused_rows  # noqa: E402

B200 = "NVIDIA_B200_SXM_180G"


def _table(version: str, shapes: list[tuple[int, float]], power: bool = False) -> object:
    """One dtype's rows at gpt-oss's expert shape: (num_tokens, latency ms) each."""
    n = len(shapes)
    columns: dict[str, list[object]] = {
        "framework": ["TRTLLM"] * n,
        "version": [version] * n,
        "device": ["NVIDIA B200"] * n,
        "op_name": ["moe"] * n,
        "kernel_source": ["moe_torch_flow"] * n,
        "moe_dtype": ["w4a8_mxfp4_mxfp8"] * n,
        "num_tokens": [t for t, _ in shapes],
        "hidden_size": [2880] * n,
        "inter_size": [2880] * n,
        "topk": [4] * n,
        "num_experts": [128] * n,
        "moe_tp_size": [1] * n,
        "moe_ep_size": [1] * n,
        "distribution": ["balanced"] * n,
        "latency": [ms for _, ms in shapes],
    }
    if power:
        columns["power"] = [700.0] * n
    return pa.table(columns)


def _write(root: Path, version: str, table: object) -> Path:
    path = root / version / "moe_perf.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(table, path)
    return path


def test_a_declared_reuse_adds_the_older_rows_of_shapes_not_collected_again(
    tmp_path: Path,
) -> None:
    _write(tmp_path, "1.3.0rc20", _table("1.3.0rc20", [(4, 0.05), (32, 0.27)]))
    newer = _write(tmp_path, "1.3.0rc23", _table("1.3.0rc23", [(32, 0.30), (64, 0.28)], True))
    alone = pq.read_table(newer)
    assert _with_reused_rows(newer, alone) is alone  # no declaration: the table as it is
    (newer.parent / REUSE_FILE).write_text(
        "schema_version: 1\nreuse:\n- table: moe_perf\n  from_version: 1.3.0rc20\n",
        encoding="utf-8",
    )
    merged = _with_reused_rows(newer, alone)
    rows = sorted(
        zip(
            merged.column("num_tokens").to_pylist(),
            merged.column("latency").to_pylist(),
            strict=True,
        )
    )
    # the newer collection wins where it measured the shape; the older one fills the rest
    assert rows == [(4, 0.05), (32, 0.30), (64, 0.28)]


def test_a_declaration_for_another_table_adds_nothing(tmp_path: Path) -> None:
    _write(tmp_path, "1.3.0rc20", _table("1.3.0rc20", [(4, 0.05)]))
    newer = _write(tmp_path, "1.3.0rc23", _table("1.3.0rc23", [(64, 0.28)]))
    (newer.parent / REUSE_FILE).write_text(
        "reuse:\n- table: gemm_perf\n  from_version: 1.3.0rc20\n", encoding="utf-8"
    )
    assert _with_reused_rows(newer, pq.read_table(newer)).num_rows == 1


def test_the_shipped_rc23_blackwell_mxfp8_curve_was_fitted_with_the_reused_rows() -> None:
    """rc23's own rows are the DSV4 shapes; with the declared rc20 rows it has a curve of
    every dtype rc20 measured (the same curve where rc23 collected nothing of that dtype),
    and rc23 is the runner's default for each."""
    fit = kernel_fit_moe()
    assert fit.default_versions[(B200, "trtllm", "w4a8_mxfp4_mxfp8")] == "1.3.0rc23"
    for label in ("bfloat16", "fp8", "nvfp4", "w4a16_mxfp4"):
        assert fit.default_versions[(B200, "trtllm", label)] == "1.3.0rc23"
        assert fit.curve(B200, "trtllm", label) == fit.curve(B200, "trtllm", label, "1.3.0rc20")
