"""TensorRT-LLM's MXFP4 experts on Hopper: the TRITON MoE call in a captured decode step costs
its measured small-call floor (docs/kernels.md, "TensorRT-LLM's TRITON MoE on Hopper in a
captured graph"); Blackwell's fused TRTLLM-gen kernel and eager forwards keep their floors."""

from __future__ import annotations

import dataclasses

import pytest

from app.core.catalog import get_device, get_model
from app.core.catalog.quantization import parse_quantization
from app.core.cost import ForwardShape
from app.core.parallel import ParallelLayout
from app.core.profiles import TRTLLM
from app.core.runner import ModelRunner
from app.core.runner.kernel_fit import IN_GRAPH_FLOOR_US, S_PER_US
from app.core.runner.kernel_fit_moe import GROUPED_GEMMS, kernel_fit_moe, served_moe_kernels
from app.core.runner.serving import engine_runner

H100 = "NVIDIA_H100_SXM_80G"
H200 = "NVIDIA_H200_SXM_141G"
B200 = "NVIDIA_B200_SXM_180G"
GPT_OSS = "openai/gpt-oss-120b"
LABEL = "w4a16_mxfp4"
MOE_CALL = ("experts_up", "experts_down", "moe_combine_sum")
DECODE = ForwardShape(is_decode=True, concurrency=4, query_len=1, seq_len=1500)
PREFILL = ForwardShape(is_decode=False, concurrency=1, query_len=8192, seq_len=8192)


def _moe_call_ms(runner: ModelRunner, shape: ForwardShape) -> float:
    ops = runner.run_inference(shape).breakdown.ops
    return sum(o.total_ms for o in ops if o.name in MOE_CALL)


def test_hopper_triton_moe_curves_carry_a_call_floor_and_blackwells_do_not() -> None:
    fit = kernel_fit_moe()
    for device in (H100, H200):
        curve = fit.curve(device, "trtllm", LABEL)
        assert curve is not None and curve.graph_call_floor_us is not None
        # the measured floor of a near-empty call, far above two in-graph kernel nodes
        assert curve.graph_call_floor_us > 10 * IN_GRAPH_FLOOR_US["trtllm"]
        assert served_moe_kernels(device, "trtllm", LABEL) > GROUPED_GEMMS
    blackwell = fit.curve(B200, "trtllm", LABEL)
    assert blackwell is not None and blackwell.graph_call_floor_us is None
    assert served_moe_kernels(B200, "trtllm", LABEL) == GROUPED_GEMMS


@pytest.mark.parametrize("tp", [1, 4])
def test_a_captured_triton_moe_call_costs_its_measured_floor_and_prefill_is_unchanged(
    tp: int,
) -> None:
    runner = engine_runner(
        TRTLLM,
        get_model(GPT_OSS),
        get_device(H200),
        ParallelLayout(tp=tp, ep=tp),
        parse_quantization("MXFP4"),
    )
    fit = runner.plan.moe_fit
    assert fit is not None and fit.label == LABEL
    floor_us = fit.curve.graph_call_floor_us
    assert floor_us is not None
    assert GROUPED_GEMMS * fit.graph_fixed_s + fit.graph_extra_s == pytest.approx(
        floor_us * S_PER_US
    )
    layers = get_model(GPT_OSS).num_moe_layers
    decode, prefill = _moe_call_ms(runner, DECODE), _moe_call_ms(runner, PREFILL)
    assert decode > layers * floor_us / 1000
    without = dataclasses.replace(
        fit, curve=dataclasses.replace(fit.curve, graph_call_floor_us=None)
    )
    runner.plan = dataclasses.replace(runner.plan, moe_fit=without)
    assert _moe_call_ms(runner, DECODE) < decode
    assert _moe_call_ms(runner, PREFILL) == pytest.approx(prefill)
