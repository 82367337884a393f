"""The fitted attention table (``app/core/runner/data/kernel_fit_attention.json``) and its use.

Known answers: the curve at knots and halfway (in log2) between two, and at a query group
(heads per KV head) between two group levels; a fitted attention kernel's time by hand from its
curve, its group levels included. The loader refuses a missing or malformed table loudly (an
attention entry without its group levels too); attention tables may decrease, the Gated
DeltaNet / DSA ones in the same form may not; every packaged curve is within (0, 1]; a device
or engine without a curve
keeps the defaults and says so per op; the fit script's prediction of a measured point is the
one ``validate --kernels`` makes (so the file's train / test residuals are reproducible).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from app.core.catalog import get_device, get_model
from app.core.catalog.quantization import AttentionQuantAction
from app.core.cost import ForwardShape
from app.core.parallel import ParallelLayout
from app.core.runner import ModelRunner
from app.core.runner.fit_tables import KernelFitError
from app.core.runner.kernel_fit import DEFAULT_SOURCE, IN_GRAPH_FLOOR_US
from app.core.runner.kernel_fit_attention import (
    ATTENTION_FIT_FORMAT,
    ATTENTION_FIT_PATH,
    BF16_KV_BF16,
    BF16_KV_FP8,
    CONTEXT_ATTENTION,
    FAMILIES,
    FP8_KV_FP8,
    GENERATION_ATTENTION,
    AttentionCurve,
    attention_curve,
    attention_fit,
    attention_labels,
    load_attention_fit,
    parse_attention_fit,
)
from app.core.runner.ops import MS_PER_S, OpCategory
from app.core.validation.kernels import KernelFamily, KernelPricer

H100 = "NVIDIA_H100_SXM_80G"
ATLAS = "ATLAS_800_A2_376T_64G"
LLAMA = "meta-llama/Llama-3.1-8B"
DEEPSEEK = "deepseek-ai/DeepSeek-V3"
DECODE = ForwardShape(is_decode=True, concurrency=8, query_len=1, seq_len=1024)
PREFILL = ForwardShape(is_decode=False, concurrency=1, query_len=2048, seq_len=2048)
CURVE = AttentionCurve(
    row_knots=(1.0, 4.0, 16.0),
    context_knots=(16.0, 256.0),
    head_dim_knots=(64.0, 256.0),
    compute_efficiency=((0.1, 0.2), (0.3, 0.4), (0.9, 1.0)),
    memory_efficiency=((0.5, 0.6), (0.6, 0.7), (0.7, 0.8)),
    head_dim_factor=(0.5, 1.0),
    row_ns=2.0,
    fixed_us=5.0,
    group_knots=(1.0, 4.0, 16.0),
    group_factor=(1.0, 0.8, 0.4),
    group_row_factor=(1.0, 3.0, 4.0),
)


def _entry(**change: Any) -> dict[str, Any]:
    entry = {
        "device": H100,
        "engine": "vllm",
        "family": GENERATION_ATTENTION,
        "label": BF16_KV_BF16,
        "row_knots": [1, 4, 16],
        "context_knots": [16, 256],
        "head_dim_knots": [64, 256],
        "compute_efficiency": [[0.1, 0.2], [0.3, 0.4], [0.9, 1.0]],
        "memory_efficiency": [[0.5, 0.6], [0.6, 0.7], [0.7, 0.8]],
        "head_dim_factor": [0.5, 1.0],
        "row_ns": 2.0,
        "fixed_us": 5.0,
        "group_knots": [1, 4, 16],
        "group_factor": [1.0, 0.8, 0.4],
        "group_row_factor": [1.0, 3.0, 4.0],
    }
    entry.update(change)
    for name in [k for k, v in change.items() if v is None]:
        del entry[name]
    return entry


def _doc(*entries: dict[str, Any]) -> dict[str, Any]:
    return {
        "format": ATTENTION_FIT_FORMAT,
        "source": {"version": "0.12.0"},
        "attention": list(entries),
    }


def test_curve_is_bilinear_in_log2_between_knots_and_clamped_outside() -> None:
    assert CURVE.compute_efficiency_at(4, 16, 256) == pytest.approx(0.3)
    assert CURVE.compute_efficiency_at(2, 16, 256) == pytest.approx(0.2)  # halfway 1 -> 4
    assert CURVE.compute_efficiency_at(2, 64, 256) == pytest.approx(0.25)  # both halfway
    assert CURVE.compute_efficiency_at(4, 16, 128) == pytest.approx(0.3 * 0.75)  # head width
    assert CURVE.compute_efficiency_at(0.5, 1, 32) == pytest.approx(0.1 * 0.5)
    assert CURVE.memory_efficiency_at(1e9, 1e9, 256) == pytest.approx(0.8)
    assert CURVE.memory_efficiency_at(8, 64, 1024) == pytest.approx(0.7)
    assert CURVE.memory_efficiency_at(8, 64, 128) == pytest.approx(0.7 * 0.75)


def test_group_levels_scale_both_rates_and_the_row_floor() -> None:
    """Query heads per KV head: a level of both rates and of ``row_ns`` at each group knot,
    linear in log2 between them, clamped outside."""
    assert CURVE.efficiencies_at(4, 16, 256, 4.0) == pytest.approx((0.3 * 0.8, 0.6 * 0.8))
    assert CURVE.efficiencies_at(4, 16, 256, 2.0) == pytest.approx((0.3 * 0.9, 0.6 * 0.9))
    assert CURVE.group_factor_at(8.0) == pytest.approx(0.6)  # halfway 4 -> 16
    assert CURVE.group_factor_at(64.0) == pytest.approx(0.4)
    assert CURVE.row_factor_at(2.0) == pytest.approx(2.0)
    assert CURVE.row_factor_at(8.0) == pytest.approx(3.5)
    # Without group levels (the Gated DeltaNet / DSA curves): one level of 1.
    plain = attention_curve(_entry(group_knots=None, group_factor=None, group_row_factor=None), 0)
    assert plain.efficiencies_at(4, 16, 256, 8.0) == pytest.approx((0.3, 0.6))
    assert plain.row_factor_at(8.0) == 1.0


def test_parse_reads_a_well_formed_table() -> None:
    fit = parse_attention_fit(_doc(_entry()))
    assert fit.curve(H100, "vllm", GENERATION_ATTENTION, BF16_KV_BF16) == CURVE
    assert fit.curve(H100, "vllm", CONTEXT_ATTENTION, BF16_KV_BF16) is None


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"format": "other", "source": {}, "attention": []},
        {"format": ATTENTION_FIT_FORMAT, "attention": []},
        _doc(_entry(device="")),
        _doc(_entry(family="moe")),
        _doc(_entry(memory_efficiency=[[0.5, 0.6], [0.6, 0.7], [0.7, 1.5]])),
        _doc(_entry(compute_efficiency=[[0.1, 0.2], [0.3, 0.4]])),
        _doc(_entry(group_knots=None)),  # an attention curve carries its group levels
        _doc(_entry(group_factor=[1.0, 0.8])),
        _doc(_entry(group_factor=[1.0, 1.2, 0.4])),
        _doc(_entry(group_row_factor=[1.0, 0.0, 4.0])),
        _doc(_entry(group_knots=[4, 1, 16])),
        _doc(_entry(head_dim_factor=[0.5])),
        _doc(_entry(head_dim_knots=[256, 64])),
        _doc(_entry(row_ns="2")),
        _doc(_entry(fixed_us=-1)),
        _doc(_entry(), _entry()),
    ],
)
def test_parse_refuses_a_malformed_table(body: Any) -> None:
    with pytest.raises(KernelFitError):
        parse_attention_fit(body)


def test_attention_tables_may_decrease_the_gdn_and_dsa_ones_may_not() -> None:
    """The attention kernels change tile and kernel with the shape, so their tables are free
    in (0, 1]; the Gated DeltaNet and DSA tables in the same form are fitted non-decreasing and
    their loader holds them to it."""
    from app.core.runner.kernel_fit_attention import parse_kernel_curves

    falling = [[0.2, 0.1], [0.3, 0.4], [0.9, 1.0]]
    fit = parse_attention_fit(_doc(_entry(compute_efficiency=falling)))
    curve = fit.curve(H100, "vllm", GENERATION_ATTENTION, BF16_KV_BF16)
    assert curve is not None and curve.compute_efficiency_at(1, 256, 256) == pytest.approx(0.1)
    kernel = {k: v for k, v in _entry().items() if not k.startswith("group")}
    kernel = {**kernel, "kernel": "k"}
    body = {"format": "f", "source": {}, "kernels": [kernel]}
    curves, _ = parse_kernel_curves(body, what="w", document="f", entries="kernels", kernels=("k",))
    assert curves[(H100, "vllm", "k")].group_knots == (1.0, 2.0)
    with pytest.raises(KernelFitError, match="decrease"):
        parse_kernel_curves(
            {**body, "kernels": [{**kernel, "compute_efficiency": falling}]},
            what="w",
            document="f",
            entries="kernels",
            kernels=("k",),
        )


def test_load_refuses_a_missing_or_non_json_file(tmp_path: Path) -> None:
    with pytest.raises(KernelFitError, match="cannot read"):
        load_attention_fit(tmp_path / "absent.json")
    broken = tmp_path / "broken.json"
    broken.write_text("[", encoding="utf-8")
    with pytest.raises(KernelFitError, match="not json"):
        load_attention_fit(broken)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_doc(_entry())), encoding="utf-8")
    assert load_attention_fit(good).curve(H100, "vllm", GENERATION_ATTENTION, BF16_KV_BF16)


def _efficiency(curve: AttentionCurve, name: str, rows: float, context: float) -> float:
    if name == "compute":
        return curve.compute_efficiency_at(rows, context, 128)
    return curve.memory_efficiency_at(rows, context, 128)


def test_packaged_table_carries_its_provenance_and_sane_curves() -> None:
    fit = attention_fit()
    assert fit.source["package"] == "aiconfigurator-core"
    assert fit.source["version"] == "0.12.0"
    body = json.loads(ATTENTION_FIT_PATH.read_text(encoding="utf-8"))
    assert {entry["family"] for entry in body["attention"]} == set(FAMILIES)
    for entry in body["attention"]:
        assert entry["train"]["points"] >= 20
        assert entry["engine_versions"]
        assert math.isfinite(entry["train"]["median_abs_error_pct"])
    for key, curve in fit.curves.items():
        # Within (0, 1] at and between the knots; GQA curves carry every measured group size.
        rows = [curve.row_knots[0] / 2, *curve.row_knots, curve.row_knots[-1] * 2]
        contexts = [c * f for c in curve.context_knots for f in (1.0, 1.5)]
        for name in ("compute", "memory"):
            grid = [[_efficiency(curve, name, r, c) for c in contexts] for r in rows]
            assert all(0 < e <= 1 for row in grid for e in row)
        grouped = key[2] in (CONTEXT_ATTENTION, GENERATION_ATTENTION)
        assert (curve.group_knots[-1] == 128.0) is grouped, key
    for engine in ("vllm", "sglang", "trtllm"):
        for family in (CONTEXT_ATTENTION, GENERATION_ATTENTION):
            assert fit.curve(H100, engine, family, BF16_KV_BF16) is not None


def test_fp8_attention_falls_back_to_16_bit_math_over_an_fp8_cache() -> None:
    assert attention_labels(AttentionQuantAction.FP8) == (FP8_KV_FP8, BF16_KV_FP8)
    assert attention_labels(AttentionQuantAction.INT8) == (BF16_KV_FP8,)
    assert attention_labels(AttentionQuantAction.DISABLED) == (BF16_KV_BF16,)


def _runner(device: str, model: str = LLAMA, engine: str | None = "vllm") -> ModelRunner:
    return ModelRunner(
        get_model(model),
        get_device(device),
        ParallelLayout(tp=1 if model == LLAMA else 8),
        kernel_engine=engine,
    )


def test_fitted_decode_attention_time_is_the_curve_by_hand() -> None:
    runner = _runner(H100)
    fit = runner.plan.decode_attention_fit
    assert fit is not None and runner.plan.prefill_attention_fit is not None
    op = next(o for o in runner.run_inference(DECODE).breakdown.ops if o.name == "decode_attention")
    model, device = get_model(LLAMA), get_device(H100)
    rows = DECODE.concurrency * model.num_heads
    group = model.num_heads / model.num_kv_heads  # 32 query heads over 8 KV heads
    assert group == 4
    level = fit.curve.group_factor_at(group)
    compute_s = max(
        op.flops
        / (
            device.peak_bf16_tflops
            * 1e12
            * fit.curve.compute_efficiency_at(rows, 1024, 128)
            * level
        ),
        rows * fit.curve.row_ns * 1e-9 * fit.curve.row_factor_at(group),
    )
    memory_s = op.hbm_bytes / (
        device.hbm_bandwidth_gb_s * 1e9 * fit.curve.memory_efficiency_at(rows, 1024, 128) * level
    )
    fixed_s = IN_GRAPH_FLOOR_US["vllm"] * 1e-6  # a decode step: the in-graph floor
    assert fit.fixed_s == max(fit.curve.fixed_us * 1e-6, device.graph_kernel_launch_us * 1e-6)
    assert op.source == "fitted:vllm"
    assert op.time_ms == pytest.approx((max(compute_s, memory_s) + fixed_s) * MS_PER_S)


@pytest.mark.parametrize(("model", "engine"), [(LLAMA, "vllm"), (DEEPSEEK, "trtllm")])
def test_attention_ops_say_they_are_fitted(model: str, engine: str) -> None:
    for shape in (PREFILL, DECODE):
        ops = _runner(H100, model, engine).run_inference(shape).breakdown.ops
        attention = [o for o in ops if o.category is OpCategory.ATTENTION]
        assert attention and all(o.source == f"fitted:{engine}" for o in attention)
        default = _runner(H100, model, None).run_inference(shape).breakdown.ops
        assert all(o.source == DEFAULT_SOURCE for o in default)


@pytest.mark.parametrize(("device", "engine"), [(ATLAS, "vllm"), (H100, "msmodeling")])
def test_without_a_curve_attention_keeps_the_defaults(device: str, engine: str) -> None:
    runner = _runner(device, engine=engine)
    assert runner.plan.prefill_attention_fit is None
    assert runner.plan.decode_attention_fit is None
    assert runner.kernel_engine is None


def test_the_fit_script_predicts_what_validate_prices() -> None:
    """The residuals in the file are ``validate --kernels``'s on the same points: the fit
    script's features and the runner's op agree point by point (GQA with a window, MLA)."""
    pytest.importorskip("numpy")
    script = pytest.importorskip("scripts.fit_kernels_attention")
    body = json.loads(ATTENTION_FIT_PATH.read_text(encoding="utf-8"))
    device = get_device(H100)
    cases = {
        ("h100_sxm", "vllm", CONTEXT_ATTENTION, BF16_KV_FP8): KernelFamily.CONTEXT_ATTENTION,
        ("h100_sxm", "vllm", GENERATION_ATTENTION, BF16_KV_BF16): (
            KernelFamily.GENERATION_ATTENTION
        ),
        ("h100_sxm", "trtllm", "generation_mla", BF16_KV_BF16): KernelFamily.GENERATION_MLA,
        ("h100_sxm", "trtllm", "context_mla", BF16_KV_FP8): KernelFamily.CONTEXT_MLA,
    }
    shapes = [  # batch, isl, step, heads, kv heads, head_dim, window
        (1, 1, 0, 32, 8, 128, 0),
        (4, 1, 4095, 32, 8, 128, 0),
        (64, 1, 511, 16, 16, 64, 128),
        (2, 3072, 0, 64, 8, 128, 1024),
        (256, 16, 0, 16, 16, 128, 0),
    ]
    for key, family in cases.items():
        entry = next(
            e
            for e in body["attention"]
            if (e["system"], e["engine"], e["family"], e["label"]) == key
        )
        mla = family in (KernelFamily.CONTEXT_MLA, KernelFamily.GENERATION_MLA)
        decode = family in (KernelFamily.GENERATION_ATTENTION, KernelFamily.GENERATION_MLA)
        rows = [(b, 1 if decode else q, s, h, k, d, w) for b, q, s, h, k, d, w in shapes]
        raw: dict[str, list[Any]] = {
            "split": ["test"] * len(rows),
            "batch_size": [r[0] for r in rows],
            "isl": [r[1] for r in rows],
            "step": [r[2] for r in rows],
            "num_heads": [r[3] for r in rows],
            "num_key_value_heads": [r[4] for r in rows],
            "head_dim": [r[5] for r in rows],
            "window_size": [0 if mla else r[6] for r in rows],
            "latency": [1.0] * len(rows),
        }
        points = script._arrays(raw, key, "test")
        predicted_s = script._predict_s(points, script._rounded(entry))
        compute, kv = key[3].split("/kv ")
        pricer = KernelPricer(device, key[1])
        for (b, q, s, h, k, d, w), mine in zip(rows, predicted_s, strict=True):
            row_key: tuple[object, ...] = (
                (compute, kv, b, q, s, h) if mla else (compute, kv, b, q, s, h, k, d, w)
            )
            priced = pricer.price(family, row_key).predicted_ms
            assert priced == pytest.approx(float(mine) * 1e3, rel=1e-9), (key, row_key)
