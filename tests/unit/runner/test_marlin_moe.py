"""MXFP4 experts on Marlin: a kernel of their own (``mxfp4_moe_kernel``, docs/kernels.md "vLLM on
Hopper").

The fit splits the measured ``w4a16_mxfp4`` rows by kernel (Marlin apart from the OAI Triton /
FlashInfer rows); a vLLM run on Hopper whose recipe selects Marlin prices its experts from the
Marlin curve, which is slower per flop at large M; the other kernels of vLLM's
``fused_marlin_moe`` pay their in-graph floors in a captured decode step, and nowhere else.
"""

from __future__ import annotations

import dataclasses

import pytest

from app.core.catalog import get_device, get_model
from app.core.catalog.quantization import parse_quantization
from app.core.cost import ForwardShape
from app.core.errors import InvalidParameterError
from app.core.parallel import ParallelLayout
from app.core.profiles import SGLANG, VLLM, EngineProfile
from app.core.runner import ModelRunner
from app.core.runner.kernel_fit import IN_GRAPH_FLOOR_US, S_PER_US
from app.core.runner.kernel_fit_moe import (
    GROUPED_GEMMS,
    MXFP4_MARLIN_MOE_LABEL,
    SERVED_MOE_KERNELS,
    kernel_fit_moe,
    moe_table_label,
)
from app.core.runner.ops import MS_PER_S
from app.core.runner.serving import engine_runner
from app.core.validation.kernels import KernelFamily, KernelPricer

H100 = "NVIDIA_H100_SXM_80G"
H200 = "NVIDIA_H200_SXM_141G"
GPT_OSS = "openai/gpt-oss-120b"
KIMI = "moonshotai/Kimi-K2.5"
PREFILL = ForwardShape(is_decode=False, concurrency=1, query_len=8192, seq_len=8192)
DECODE = ForwardShape(is_decode=True, concurrency=4, query_len=1, seq_len=1500)
MARLIN = VLLM.with_overrides({"mxfp4_moe_kernel": "marlin"})


def _op_ms(runner: ModelRunner, shape: ForwardShape, name: str) -> float:
    return sum(o.total_ms for o in runner.run_inference(shape).breakdown.ops if o.name == name)


def _gpt_oss(profile: EngineProfile = VLLM, device: str = H200, tp: int = 1) -> ModelRunner:
    return engine_runner(
        profile,
        get_model(GPT_OSS),
        get_device(device),
        ParallelLayout(tp=tp),
        parse_quantization("MXFP4"),
    )


def test_marlin_rows_get_a_label_of_their_own() -> None:
    marlin = "vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu"
    triton = "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"
    assert moe_table_label("w4a16_mxfp4", marlin) == MXFP4_MARLIN_MOE_LABEL
    assert moe_table_label("w4a16_mxfp4", triton) == "w4a16_mxfp4"
    # INT4 weight-only experts are Marlin in every table: the dtype keeps its name.
    marlin_int4 = "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts"
    assert moe_table_label("int4_wo", marlin_int4) == "int4_wo"
    assert moe_table_label("w4a8_mxfp4_mxfp8", "sglang_marlin_moe") == "w4a8_mxfp4_mxfp8"


@pytest.mark.parametrize("device", [H100, H200])
def test_hopper_has_a_marlin_and_a_triton_mxfp4_curve(device: str) -> None:
    fit = kernel_fit_moe()
    assert fit.curve(device, "vllm", "w4a16_mxfp4") is not None
    assert fit.curve(device, "vllm", MXFP4_MARLIN_MOE_LABEL) is not None


@pytest.mark.parametrize("device", [H100, H200])
def test_a_marlin_prefill_is_priced_from_marlins_slower_curve(device: str) -> None:
    """The measured Marlin MXFP4 kernel runs at 195-250 TFLOPS at large M on H100 / H200, the
    OAI Triton one at about 560: the served Marlin prefill's experts cost more than twice the
    Triton-priced ones, and the runners differ in their identity."""
    triton, marlin = _gpt_oss(device=device), _gpt_oss(MARLIN, device)
    assert triton.plan.moe_fit is not None and triton.plan.moe_fit.label == "w4a16_mxfp4"
    assert marlin.plan.moe_fit is not None
    assert marlin.plan.moe_fit.label == MXFP4_MARLIN_MOE_LABEL
    experts = ("experts_up", "experts_down")
    slow = sum(_op_ms(marlin, PREFILL, name) for name in experts)
    fast = sum(_op_ms(triton, PREFILL, name) for name in experts)
    assert slow > 2 * fast
    assert marlin.identity() != triton.identity()
    assert marlin.identity_dict()["mxfp4_moe_kernel"] == "marlin"
    assert "mxfp4_moe_kernel" not in triton.identity_dict()


def test_marlin_without_fitted_kernels_keeps_the_defaults_and_the_key() -> None:
    """Off the fitted devices the kernel choice moves nothing: same price, same cache key."""
    a100 = "NVIDIA_A100_SXM_80G"
    default, marlin = _gpt_oss(device=a100), _gpt_oss(MARLIN, a100)
    assert marlin.kernel_engine is None and marlin.plan.moe_fit is None
    assert marlin.identity() == default.identity()
    assert marlin.forward_ms(PREFILL) == default.forward_ms(PREFILL)


def test_marlins_other_kernels_pay_the_in_graph_floor_in_a_captured_decode_only() -> None:
    """vLLM's ``fused_marlin_moe`` launches five kernels (align, two GEMMs, activation, top-k
    sum): in a captured decode step the three besides the grouped GEMMs cost the in-graph floor
    each, on ``moe_combine_sum``; an eager prefill keeps the collectors' whole-call floors."""
    marlin = _gpt_oss(MARLIN)
    fit = marlin.plan.moe_fit
    assert fit is not None and fit.served_kernels == SERVED_MOE_KERNELS[("vllm", fit.label)] == 5
    extra_s = (5 - GROUPED_GEMMS) * IN_GRAPH_FLOOR_US["vllm"] * S_PER_US
    assert fit.graph_extra_s == pytest.approx(extra_s)
    layers = get_model(GPT_OSS).num_layers
    without = dataclasses.replace(fit, served_kernels=GROUPED_GEMMS)
    assert without.graph_extra_s == 0
    decode = _op_ms(marlin, DECODE, "moe_combine_sum")
    marlin.plan = dataclasses.replace(marlin.plan, moe_fit=without)
    assert decode - _op_ms(marlin, DECODE, "moe_combine_sum") == pytest.approx(
        layers * extra_s * MS_PER_S
    )
    prefill_without = _op_ms(marlin, PREFILL, "moe_combine_sum")
    marlin.plan = dataclasses.replace(marlin.plan, moe_fit=fit)
    assert _op_ms(marlin, PREFILL, "moe_combine_sum") == pytest.approx(prefill_without)


def test_only_vllms_marlin_paths_launch_extra_kernels() -> None:
    kimi = (get_model(KIMI), get_device(H200), ParallelLayout(tp=8), parse_quantization("W4A16"))
    vllm_int4 = engine_runner(VLLM, *kimi).plan.moe_fit
    assert vllm_int4 is not None and vllm_int4.label == "int4_wo"
    assert vllm_int4.served_kernels == 5
    sglang_int4 = engine_runner(SGLANG, *kimi).plan.moe_fit
    assert sglang_int4 is not None and sglang_int4.graph_extra_s == 0
    triton = _gpt_oss().plan.moe_fit
    assert triton is not None and triton.graph_extra_s == 0


def test_an_unknown_moe_kernel_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidParameterError) as err:
        VLLM.with_overrides({"mxfp4_moe_kernel": "cutlass"})
    assert err.value.field == "mxfp4_moe_kernel"
    with pytest.raises(InvalidParameterError) as err:
        ModelRunner(get_model(GPT_OSS), get_device(H200), mxfp4_moe_kernel="cutlass")  # type: ignore[arg-type]
    assert err.value.field == "mxfp4_moe_kernel"
    assert "mxfp4_moe_kernel" not in VLLM.to_dict()
    assert MARLIN.to_dict()["mxfp4_moe_kernel"] == "marlin"


def test_validate_kernels_prices_marlin_rows_with_the_marlin_curve() -> None:
    """One measured shape, the two kernels' rows: each priced by its own curve."""
    pricer = KernelPricer(get_device(H200), "vllm", "0.24.0")
    key = ("w4a16_mxfp4", 8192, 2880, 2880, 4, 128, 1, 1, "balanced")
    triton = pricer.price(
        KernelFamily.MOE, (*key, "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic")
    )
    marlin = pricer.price(
        KernelFamily.MOE, (*key, "vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts")
    )
    assert triton.quantization == "w4a16_mxfp4"
    assert marlin.quantization == MXFP4_MARLIN_MOE_LABEL
    assert marlin.predicted_ms is not None and triton.predicted_ms is not None
    assert marlin.predicted_ms > 2 * triton.predicted_ms


B200 = "NVIDIA_B200_SXM_180G"


def _kimi_int4(device: str) -> ModelRunner:
    return engine_runner(
        VLLM, get_model(KIMI), get_device(device), ParallelLayout(tp=8), parse_quantization("W4A16")
    )


@pytest.mark.parametrize("device", [H200, B200])
def test_int4_marlins_captured_call_costs_its_measured_small_call_floor(device: str) -> None:
    """vLLM's INT4 Marlin call runs in the served graph the kernels the collector graph-replayed:
    in a captured decode step its floors (two grouped GEMMs and the other three kernels) add up
    to the fitted ``graph_call_floor_us``, well above the in-graph floors alone; an eager
    prefill keeps the fitted floors."""
    runner = _kimi_int4(device)
    fit = runner.plan.moe_fit
    assert fit is not None and fit.label == "int4_wo"
    call_floor_us = fit.curve.graph_call_floor_us
    assert call_floor_us is not None
    call_floor_s = call_floor_us * S_PER_US
    assert GROUPED_GEMMS * fit.graph_fixed_s + fit.graph_extra_s == pytest.approx(call_floor_s)
    assert fit.graph_fixed_s > 3 * IN_GRAPH_FLOOR_US["vllm"] * S_PER_US
    layers = get_model(KIMI).num_moe_layers
    experts = ("experts_up", "experts_down")
    decode = sum(_op_ms(runner, DECODE, name) for name in experts)
    prefill = sum(_op_ms(runner, PREFILL, name) for name in experts)
    floor = dataclasses.replace(fit, curve=dataclasses.replace(fit.curve, graph_call_floor_us=None))
    assert floor.graph_fixed_s == pytest.approx(IN_GRAPH_FLOOR_US["vllm"] * S_PER_US)
    runner.plan = dataclasses.replace(runner.plan, moe_fit=floor)
    gap_ms = decode - sum(_op_ms(runner, DECODE, name) for name in experts)
    assert gap_ms == pytest.approx(
        layers * GROUPED_GEMMS * (fit.graph_fixed_s - floor.graph_fixed_s) * MS_PER_S
    )
    assert sum(_op_ms(runner, PREFILL, name) for name in experts) == pytest.approx(prefill)


def test_of_vllms_curves_only_int4_marlin_carries_a_call_floor() -> None:
    """MXFP4 on Marlin keeps the in-graph floors: its SM90 / SM100 tables hold another model's
    shape, whose small-call floor does not transfer (docs/kernels.md)."""
    fit = kernel_fit_moe()
    for device in (H100, H200, B200):
        int4 = fit.curve(device, "vllm", "int4_wo")
        assert int4 is not None and int4.graph_call_floor_us is not None
        mxfp4 = fit.curve(device, "vllm", MXFP4_MARLIN_MOE_LABEL)
        assert mxfp4 is not None and mxfp4.graph_call_floor_us is None
    sglang = fit.curve(H200, "sglang", "int4_wo")
    assert sglang is None or sglang.graph_call_floor_us is None
