"""The fitted DSA table (``app/core/runner/data/kernel_fit_dsa.json``) and its use.

Known answers: a fitted sparse MLA kernel's time by hand from its curve, with the local heads
padded to the kernel's head block. The loader refuses a malformed table loudly; the packaged
table carries its provenance and a curve for each kernel on each measured system; a GLM-5
forward on SGLang prices the indexer's scores and top-k on their curves everywhere measured and
the sparse MLA on Hopper only (Blackwell and a forward without an engine keep the analytic
pricing, labelled ``default``); the fitted top-k is not run while the context fits in the top-k;
the fit script's prediction of a measured point is the one ``validate --kernels`` makes (so the
file's train / test residuals are reproducible).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.core.catalog import get_device, get_model
from app.core.catalog.quantization import LinearQuantAction, Quantization
from app.core.cost import ForwardShape
from app.core.parallel import ParallelLayout
from app.core.runner import ModelRunner
from app.core.runner.fit_tables import KernelFitError
from app.core.runner.kernel_fit import DEFAULT_SOURCE
from app.core.runner.kernel_fit_dsa import (
    DSA_FIT_FORMAT,
    DSA_FIT_PATH,
    DSA_LOGITS,
    DSA_LOGITS_DECODE,
    DSA_SPARSE_MLA,
    DSA_TOPK,
    KERNELS,
    dsa_fit,
    load_dsa_fit,
    parse_dsa_fit,
)
from app.core.runner.layers import SPARSE_MLA_HEAD_BLOCK
from app.core.runner.ops import MS_PER_S
from app.core.validation.kernels import SYSTEM_DEVICES, KernelFamily, KernelPricer

H200 = "NVIDIA_H200_SXM_141G"
B300 = "NVIDIA_B300_SXM_288G"
GLM5 = "zhipuai/GLM-5"
PREFILL = ForwardShape(is_decode=False, concurrency=1, query_len=8192, seq_len=8192)
SHORT = ForwardShape(is_decode=False, concurrency=1, query_len=1024, seq_len=1024)
DECODE = ForwardShape(is_decode=True, concurrency=8, query_len=1, seq_len=8192)
MEASURED = ("b200_sxm", "b300_sxm", "gb200", "gb300", "h100_sxm", "h200_sxm")


def _entry(**change: Any) -> dict[str, Any]:
    entry = {
        "device": H200,
        "engine": "sglang",
        "kernel": DSA_LOGITS,
        "row_knots": [1, 16],
        "context_knots": [1, 256],
        "head_dim_knots": [64, 256],
        "compute_efficiency": [[0.1, 0.2], [0.3, 0.4]],
        "memory_efficiency": [[0.5, 0.6], [0.6, 0.7]],
        "head_dim_factor": [1.0, 1.0],
        "row_ns": 2.0,
        "fixed_us": 5.0,
    }
    entry.update(change)
    return entry


def _doc(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"format": DSA_FIT_FORMAT, "source": {"version": "0.12.0"}, "dsa": list(entries)}


def test_parse_reads_a_table_and_refuses_a_malformed_one() -> None:
    fit = parse_dsa_fit(_doc(_entry()))
    assert fit.curves[(H200, "sglang", DSA_LOGITS)].fixed_us == 5.0
    for body in (
        _doc(_entry(kernel="dsa_module")),
        _doc(_entry(), _entry()),
        _doc(_entry(compute_efficiency=[[0.4, 0.2], [0.3, 0.4]])),
        _doc(_entry(row_ns="fast")),
        _doc(_entry(device="")),
        {"format": "chunkwise-gdn-fit/1", "source": {}, "dsa": []},
        {"format": DSA_FIT_FORMAT, "source": {}},
    ):
        with pytest.raises(KernelFitError, match="fit"):
            parse_dsa_fit(body)


def test_a_missing_or_unreadable_table_fails_loudly(tmp_path: Any) -> None:
    with pytest.raises(KernelFitError, match="cannot read"):
        load_dsa_fit(tmp_path / "absent.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{", encoding="utf-8")
    with pytest.raises(KernelFitError, match="not json"):
        load_dsa_fit(broken)


def test_packaged_table_carries_its_provenance_and_every_kernel() -> None:
    fit = dsa_fit()
    assert fit.source["package"] == "aiconfigurator-core"
    assert fit.source["version"] == "0.12.0"
    body = json.loads(DSA_FIT_PATH.read_text(encoding="utf-8"))
    for entry in body["dsa"]:
        assert entry["train"]["points"] >= 20 and entry["test"]["points"] > 0
        assert entry["engine_versions"] == ["0.5.14"]  # the SGLang folder measured in
    for system in MEASURED:
        device = SYSTEM_DEVICES[system]
        assert all((device, "sglang", kernel) in fit.curves for kernel in KERNELS), system


def _runner(device: str, engine: str | None) -> ModelRunner:
    return ModelRunner(
        get_model(GLM5),
        get_device(device),
        ParallelLayout(tp=8),
        Quantization(linear=LinearQuantAction.FP8),
        kernel_engine=engine,
    )


def _ops(runner: ModelRunner, shape: ForwardShape) -> dict[str, Any]:
    """The first MoE layer's ops by name."""
    return {
        o.name: o
        for o in runner.run_inference(shape).breakdown.ops
        if o.scope.startswith("layers[1]")
    }


def test_dsa_ops_say_which_curve_priced_them() -> None:
    hopper = _ops(_runner(H200, "sglang"), PREFILL)
    for name in ("indexer_logits", "indexer_topk", "sparse_mla_attention"):
        assert hopper[name].source == "fitted:sglang", name
    assert "kv_b_proj" not in hopper and "flash_attention" not in hopper
    # Blackwell: the indexer is measured, SGLang's sparse attention there is another kernel.
    blackwell = _ops(_runner(B300, "sglang"), PREFILL)
    assert blackwell["indexer_logits"].source == "fitted:sglang"
    assert blackwell["flash_attention"].source == DEFAULT_SOURCE
    assert "sparse_mla_attention" not in blackwell
    default = _ops(_runner(H200, None), PREFILL)
    assert default["indexer_logits"].source == DEFAULT_SOURCE
    assert default["indexer_topk"].source == DEFAULT_SOURCE
    assert "sparse_mla_attention" not in default


def test_a_decode_scores_in_a_time_set_by_its_context() -> None:
    """Measured: from 4 to 1,024 requests a decode's scores take the same time at one context
    (B300, 8,192 keys: 70.7 / 71.0 / 71.3 us at 4 / 8 / 16 requests)."""
    runner = _runner(B300, "sglang")
    times = [
        _ops(runner, ForwardShape(is_decode=True, concurrency=c, query_len=1, seq_len=8192))[
            "indexer_logits"
        ].time_ms
        for c in (4, 16, 64)
    ]
    assert times[0] == pytest.approx(times[2], rel=0.05)
    longer = ForwardShape(is_decode=True, concurrency=16, query_len=1, seq_len=32768)
    assert _ops(runner, longer)["indexer_logits"].time_ms > 3 * times[1]


def test_the_fitted_topk_does_not_run_while_the_context_fits() -> None:
    fitted = _runner(H200, "sglang")
    assert "indexer_topk" not in _ops(fitted, SHORT)
    assert "indexer_topk" in _ops(fitted, DECODE)
    assert "indexer_topk" in _ops(_runner(H200, None), SHORT)  # the analytic op stays


def test_fitted_sparse_mla_time_is_the_padded_curve_by_hand() -> None:
    runner = _runner(H200, "sglang")
    fits = runner.plan.dsa_fit
    assert fits is not None and fits.sparse_mla is not None
    fit = fits.sparse_mla
    op = _ops(runner, PREFILL)["sparse_mla_attention"]
    assert runner.plan.heads_local == 8  # 64 heads over TP8, padded to the kernel's block
    rows = PREFILL.query_len * SPARSE_MLA_HEAD_BLOCK
    selected = 2048
    model = get_model(GLM5)
    assert model.mla is not None
    width = model.mla.cache_elements_per_token + model.mla.kv_lora_rank
    # pairs: positions 1..2048 attend to themselves, the rest to the top 2048.
    pairs = 2048 * 2049 / 2 + 2048 * (8192 - 2048)
    assert op.flops == pytest.approx(2 * pairs * SPARSE_MLA_HEAD_BLOCK * width)
    compute, memory = fit.curve.efficiencies_at(rows, selected, 576)
    device = get_device(H200)
    compute_s = max(
        op.flops / (device.peak_bf16_tflops * 1e12 * compute), rows * fit.curve.row_ns * 1e-9
    )
    memory_s = op.hbm_bytes / (device.hbm_bandwidth_gb_s * 1e9 * memory)
    launch_s = max(fit.fixed_s, runner.plan.eager_launch_s)  # a prefill runs eager
    assert op.time_ms == pytest.approx((max(compute_s, memory_s) + launch_s) * MS_PER_S)


def test_a_long_prefill_on_hopper_is_slower_with_the_measured_kernels() -> None:
    """The measured sparse kernel does a full head block's work at 8 heads per rank: the
    fitted forward of one 8k prefill is well above the analytic one (3.7 ms per layer)."""
    fitted = _runner(H200, "sglang").run_inference(PREFILL).latency_ms
    analytic = _runner(H200, None).run_inference(PREFILL).latency_ms
    assert fitted > 1.5 * analytic


def test_the_fit_script_predicts_what_validate_prices() -> None:
    """The residuals in the file are ``validate --kernels``'s on the same points."""
    pytest.importorskip("numpy")
    script = pytest.importorskip("scripts.fit_kernels_dsa")
    fitting = pytest.importorskip("scripts.fit_kernels_attention")
    body = json.loads(DSA_FIT_PATH.read_text(encoding="utf-8"))
    sources = {
        DSA_LOGITS: "deep_gemm.fp8_mqa_logits",
        DSA_LOGITS_DECODE: "deep_gemm.fp8_mqa_logits",
        DSA_TOPK: "fast_topk_transform_fused",
        DSA_SPARSE_MLA: "flash_mla_sparse_fwd",
    }
    all_shapes = [(8, 1, 8192), (1, 8192, 0), (4, 1024, 4096), (64, 128, 16384), (256, 1, 700)]
    for system, device in (("h200_sxm", H200), ("b300_sxm", B300)):
        pricer = KernelPricer(get_device(device), "sglang")
        for kernel, source in sources.items():
            shapes = all_shapes  # (batch, isl, step); the scores of a decode have their curve
            if kernel in (DSA_LOGITS, DSA_LOGITS_DECODE):
                decode = kernel == DSA_LOGITS_DECODE
                shapes = [shape for shape in all_shapes if (shape[1] == 1) == decode]
            if kernel == DSA_TOPK:  # measured 0 (not run) while the context fits in the top-k
                shapes = [shape for shape in all_shapes if shape[1] + shape[2] > 2048]
            if kernel == DSA_SPARSE_MLA and device == B300:
                continue  # not served on Blackwell: validate prices the analytic kernel
            key = (system, "sglang", kernel)
            entry = next(e for e in body["dsa"] if (e["system"], e["engine"], e["kernel"]) == key)
            raw: dict[str, list[Any]] = {
                "split": ["test"] * len(shapes),
                "batch_size": [s[0] for s in shapes],
                "isl": [s[1] for s in shapes],
                "step": [s[2] for s in shapes],
                "num_heads": [64] * len(shapes),
                "latency": [1.0] * len(shapes),
            }
            arrays = script._arrays(raw, key, "test")
            predicted_s = fitting._predict_s(arrays, fitting._rounded(entry))
            for (b, isl, step), mine in zip(shapes, predicted_s, strict=True):
                row_key = (source, "fp8_e4m3", b, isl, step, 64, None)
                priced = pricer.price(KernelFamily.DSA, row_key).predicted_ms
                assert priced == pytest.approx(float(mine) * 1e3, rel=1e-9), (kernel, row_key)
