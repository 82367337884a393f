"""In-graph floors: a fitted kernel inside a served captured graph, and a quantized GEMM's floor.

A served runner (``ModelRunner``) prices a fitted kernel of a decode step replayed as a captured
graph at its engine's in-graph floor (``IN_GRAPH_FLOOR_US``), not at the floor the collectors
timed for the op alone; an eager step keeps the fitted floor; a quantized GEMM's floor is capped
at the 16-bit GEMM's. ``validate --kernels`` prices the kernels as they were measured.
"""

from __future__ import annotations

import pytest

from app.core.catalog import get_device, get_model
from app.core.catalog.quantization import parse_quantization
from app.core.cost import ForwardShape
from app.core.parallel import ParallelLayout
from app.core.runner import ModelRunner
from app.core.runner.kernel_fit import (
    IN_GRAPH_FLOOR_US,
    S_PER_US,
    in_graph_floor_s,
    kernel_fit,
)
from app.core.runner.ops import MS_PER_S, OpCategory
from app.core.validation.kernels import KernelFamily, KernelPricer

H100 = "NVIDIA_H100_SXM_80G"
LLAMA = "meta-llama/Llama-3.1-8B"
MIXTRAL = "mistralai/Mixtral-8x7B-v0.1"
DECODE = ForwardShape(is_decode=True, concurrency=8, query_len=1, seq_len=1024)
PREFILL = ForwardShape(is_decode=False, concurrency=1, query_len=2048, seq_len=2048)
FP8 = parse_quantization("FP8")


def _runner(
    engine: str, model: str = LLAMA, *, graphs: bool = True, fp8: bool = True
) -> ModelRunner:
    return ModelRunner(
        get_model(model),
        get_device(H100),
        ParallelLayout(),
        FP8 if fp8 else None,
        decode_graph_mode=graphs,
        kernel_engine=engine,
    )


def _fitted_launch_ms(runner: ModelRunner, shape: ForwardShape) -> dict[str, float]:
    """Each fitted kernel's launch (ms) in one forward of ``shape`` (the MoE's routing passes,
    priced as bandwidth without a launch of their own, left out)."""
    ops = runner.run_inference(shape).breakdown.ops
    return {
        o.name: o.launch_ms
        for o in ops
        if o.source.startswith("fitted:") and o.name != "moe_combine_sum" and o.comm_bytes == 0
    }


@pytest.mark.parametrize("engine", sorted(IN_GRAPH_FLOOR_US))
def test_a_captured_decode_prices_every_fitted_kernel_at_the_in_graph_floor(engine: str) -> None:
    runner = _runner(engine, MIXTRAL, fp8=False)
    moe = runner.plan.moe_fit
    assert moe is not None
    floor_ms = IN_GRAPH_FLOOR_US[engine] * S_PER_US * MS_PER_S
    touched = runner.plan.model.moe.num_experts  # type: ignore[union-attr]
    launches = _fitted_launch_ms(runner, DECODE)
    assert {"qkv_proj", "o_proj", "decode_attention", "experts_up", "experts_down"} <= set(launches)
    for name, launch_ms in launches.items():
        if name.startswith("experts_"):  # the per-touched-expert term stays (8 x top-2 of 8)
            extra_ms = touched * (1 - (1 - 2 / touched) ** DECODE.concurrency) * moe.expert_s
            assert launch_ms == pytest.approx(floor_ms + extra_ms * MS_PER_S), name
        else:
            assert launch_ms == pytest.approx(floor_ms), name
    assert moe.fixed_s > moe.graph_fixed_s  # the collectors' floor, above the in-graph one


def test_an_eager_step_keeps_the_fitted_floors() -> None:
    graph = _runner("vllm")
    eager = _runner("vllm", graphs=False)
    attention = eager.plan.decode_attention_fit
    assert attention is not None
    assert attention.fixed_s > get_device(H100).kernel_launch_us * S_PER_US
    decode = _fitted_launch_ms(eager, DECODE)
    assert decode["decode_attention"] == pytest.approx(attention.fixed_s * MS_PER_S)
    assert decode["decode_attention"] > _fitted_launch_ms(graph, DECODE)["decode_attention"]
    prefill = _fitted_launch_ms(graph, PREFILL)  # a prefill never runs in the graph
    prefill_attention = graph.plan.prefill_attention_fit
    assert prefill_attention is not None
    assert prefill["flash_attention"] == pytest.approx(prefill_attention.fixed_s * MS_PER_S)


def test_a_served_quantized_gemm_floor_is_capped_at_the_16_bit_floor() -> None:
    runner = _runner("trtllm")
    fp8, bf16 = runner.plan.gemm_fit, runner.plan.bf16_gemm_fit
    measured = kernel_fit().gemm_curve(H100, "trtllm", "fp8")
    assert fp8 is not None and bf16 is not None and measured is not None
    # TensorRT-LLM's torch_flow FP8 GEMM measures its unfused activation quantization too.
    assert measured.fixed_us * S_PER_US > bf16.fixed_s
    assert fp8.fixed_s == bf16.fixed_s
    # An eager step's kernels never cost less than an eager launch.
    eager_ms = get_device(H100).kernel_launch_us * S_PER_US * MS_PER_S
    assert _fitted_launch_ms(runner, PREFILL)["qkv_proj"] == pytest.approx(
        max(bf16.fixed_s * MS_PER_S, eager_ms)
    )


def test_validate_kernels_prices_the_kernels_as_measured() -> None:
    pricer = KernelPricer(get_device(H100), "trtllm")
    key = ("fp8", 1, 4096, 4096)
    predicted = pricer.price(KernelFamily.GEMM, key).predicted_ms
    served = _runner("trtllm")
    fit = served.plan.gemm_fit
    measured = kernel_fit().gemm_curve(H100, "trtllm", "fp8")
    assert fit is not None and measured is not None and predicted is not None
    # The standalone price carries the whole fitted floor, the served one the in-graph floor.
    assert predicted * 1e-3 > measured.fixed_us * S_PER_US
    assert fit.graph_fixed_s < measured.fixed_us * S_PER_US


def test_the_floors_apply_to_cuda_graph_engines_only() -> None:
    assert in_graph_floor_s("vllm", "nvidia") == pytest.approx(IN_GRAPH_FLOOR_US["vllm"] * 1e-6)
    assert in_graph_floor_s("vllm", "intel") is None
    assert in_graph_floor_s(None, "nvidia") is None
    assert in_graph_floor_s("msmodeling", "nvidia") is None
    assert all(value > 0 for value in IN_GRAPH_FLOOR_US.values())


def test_the_categories_priced_by_the_floor() -> None:
    ops = _runner("vllm", MIXTRAL).run_inference(DECODE).breakdown.ops
    fitted = {o.category for o in ops if o.source == "fitted:vllm"}
    assert {OpCategory.GEMM, OpCategory.ATTENTION, OpCategory.MOE} <= fitted
