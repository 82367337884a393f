"""The fitted Gated DeltaNet table (``app/core/runner/data/kernel_fit_gdn.json``) and its use.

Known answers: a fitted chunked delta-rule kernel's time by hand from its curve. The loader
refuses a malformed table loudly; the packaged table carries its provenance and a curve for
each fitted kernel; a Qwen3.5 forward with a kernel engine prices its delta-rule and prefill
conv1d kernels on the curves (the decode conv1d and a forward without an engine keep the
defaults); the fit script's prediction of a measured point is the one ``validate --kernels``
makes (so the file's train / test residuals are reproducible).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.core.catalog import get_device, get_model
from app.core.cost import ForwardShape
from app.core.parallel import ParallelLayout
from app.core.runner import ModelRunner
from app.core.runner.fit_tables import KernelFitError
from app.core.runner.kernel_fit import DEFAULT_SOURCE
from app.core.runner.kernel_fit_gdn import (
    GDN_CHUNKED,
    GDN_CONV_PREFILL,
    GDN_FIT_FORMAT,
    GDN_FIT_PATH,
    GDN_RECURRENT,
    KERNELS,
    gdn_fit,
    parse_gdn_fit,
)
from app.core.runner.ops import MS_PER_S
from app.core.validation.kernels import KernelFamily, KernelPricer

B200 = "NVIDIA_B200_SXM_180G"
QWEN35 = "Qwen/Qwen3.5-397B-A17B"
DECODE = ForwardShape(is_decode=True, concurrency=8, query_len=1, seq_len=1024)
PREFILL = ForwardShape(is_decode=False, concurrency=2, query_len=3000, seq_len=3000)
GDN_OPS = ("gdn_conv1d", "gdn_chunked", "gdn_recurrent")


def _entry(**change: Any) -> dict[str, Any]:
    entry = {
        "device": B200,
        "engine": "sglang",
        "kernel": GDN_CHUNKED,
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
    return {"format": GDN_FIT_FORMAT, "source": {"version": "0.12.0"}, "gdn": list(entries)}


def test_parse_reads_a_table_and_refuses_a_malformed_one() -> None:
    fit = parse_gdn_fit(_doc(_entry()))
    assert fit.curves[(B200, "sglang", GDN_CHUNKED)].fixed_us == 5.0
    for body in (
        _doc(_entry(kernel="gdn_conv1d_decode")),
        _doc(_entry(), _entry()),
        _doc(_entry(compute_efficiency=[[0.4, 0.2], [0.3, 0.4]])),
        {"format": "chunkwise-attention-fit/1", "source": {}, "gdn": []},
    ):
        with pytest.raises(KernelFitError, match="gdn fit"):
            parse_gdn_fit(body)


def test_packaged_table_carries_its_provenance_and_every_kernel() -> None:
    fit = gdn_fit()
    assert fit.source["package"] == "aiconfigurator-core"
    assert fit.source["version"] == "0.12.0"
    body = json.loads(GDN_FIT_PATH.read_text(encoding="utf-8"))
    assert {entry["kernel"] for entry in body["gdn"]} == set(KERNELS)
    for entry in body["gdn"]:
        assert entry["train"]["points"] >= 20 and entry["test"]["points"] > 0
        assert entry["engine_versions"]
    for engine in ("sglang", "trtllm", "vllm"):
        assert all((B200, engine, kernel) in fit.curves for kernel in KERNELS)


def _runner(engine: str | None) -> ModelRunner:
    return ModelRunner(
        get_model(QWEN35), get_device(B200), ParallelLayout(tp=4), kernel_engine=engine
    )


def test_gdn_ops_say_which_curve_priced_them() -> None:
    fitted = _runner("sglang")
    for shape in (PREFILL, DECODE):
        ops = [o for o in fitted.run_inference(shape).breakdown.ops if o.name in GDN_OPS]
        assert {o.name for o in ops} == {
            "gdn_conv1d",
            "gdn_recurrent" if shape.is_decode else "gdn_chunked",
        }
        for op in ops:
            # The decode conv1d runs below the graph floor: no curve (kernel_fit_gdn).
            decode_conv = shape.is_decode and op.name == "gdn_conv1d"
            assert op.source == (DEFAULT_SOURCE if decode_conv else "fitted:sglang"), op.name
    default = _runner(None).run_inference(PREFILL).breakdown.ops
    assert all(o.source == DEFAULT_SOURCE for o in default if o.name in GDN_OPS)


def test_fitted_chunked_kernel_time_is_the_curve_by_hand() -> None:
    runner = _runner("sglang")
    fits = runner.plan.gdn_fit
    assert fits is not None and fits.chunked is not None
    fit = fits.chunked
    op = next(o for o in runner.run_inference(PREFILL).breakdown.ops if o.name == "gdn_chunked")
    device = get_device(B200)
    rows = PREFILL.concurrency * runner.plan.linear_value_heads_local
    compute, memory = fit.curve.efficiencies_at(rows, PREFILL.query_len, 128)
    compute_s = max(
        op.flops / (device.peak_bf16_tflops * 1e12 * compute), rows * fit.curve.row_ns * 1e-9
    )
    memory_s = op.hbm_bytes / (device.hbm_bandwidth_gb_s * 1e9 * memory)
    launch_s = max(fit.fixed_s, runner.plan.eager_launch_s)  # a prefill runs eager
    assert op.time_ms == pytest.approx((max(compute_s, memory_s) + launch_s) * MS_PER_S)


def test_the_fit_script_predicts_what_validate_prices() -> None:
    """The residuals in the file are ``validate --kernels``'s on the same points."""
    pytest.importorskip("numpy")
    script = pytest.importorskip("scripts.fit_kernels_gdn")
    fitting = pytest.importorskip("scripts.fit_kernels_attention")
    body = json.loads(GDN_FIT_PATH.read_text(encoding="utf-8"))
    cases = {  # kernel -> (kernel_source, phase)
        GDN_CHUNKED: ("chunk_gated_delta_rule", "context"),
        GDN_RECURRENT: ("fused_recurrent_gated_delta_rule_packed_decode", "generation"),
        GDN_CONV_PREFILL: ("causal_conv1d_fn", "context"),
    }
    shapes = [(1, 1, 2, 4), (4, 512, 4, 8), (64, 2048, 16, 64), (1, 32768, 1, 2)]  # b, s, k, v
    for kernel, (source, phase) in cases.items():
        key = ("b200_sxm", "sglang", kernel)
        entry = next(e for e in body["gdn"] if (e["system"], e["engine"], e["kernel"]) == key)
        rows = [(b, 1 if phase == "generation" else s, k, v) for b, s, k, v in shapes]
        raw: dict[str, list[Any]] = {
            "split": ["test"] * len(rows),
            "batch_size": [r[0] for r in rows],
            "seq_len": [r[1] for r in rows],
            "num_k_heads": [r[2] for r in rows],
            "head_k_dim": [128] * len(rows),
            "num_v_heads": [r[3] for r in rows],
            "head_v_dim": [128] * len(rows),
            "d_conv": [4] * len(rows),
            "latency": [1.0] * len(rows),
        }
        predicted_s = fitting._predict_s(script._arrays(raw, key, "test"), fitting._rounded(entry))
        pricer = KernelPricer(get_device(B200), "sglang")
        for (b, s, k, v), mine in zip(rows, predicted_s, strict=True):
            row_key = (source, phase, b, s, k, 128, v, 128, 4)
            priced = pricer.price(KernelFamily.GDN, row_key).predicted_ms
            assert priced == pytest.approx(float(mine) * 1e3, rel=1e-9), (kernel, row_key)
