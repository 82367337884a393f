"""MXFP4 GEMMs run with the engine's activations (``mxfp4_activation``).

vLLM dequantizes gpt-oss's MXFP4 experts into BF16 matrix operations on Hopper and Blackwell;
TensorRT-LLM and SGLang run MXFP8 activations on Blackwell's block-scaled FP8 x FP4 matrix unit
and BF16 on Hopper. The matrix rate follows those activations; the small-M GEMM's fixed cost
(its weight tiles) stays the stored format's path's, so a decode step barely moves while a long
prefill slows by up to the ratio of the matrix rates.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.catalog import get_device, get_model
from app.core.catalog.quantization import DType, parse_quantization
from app.core.cost import ForwardShape
from app.core.errors import InvalidParameterError
from app.core.parallel import ParallelLayout
from app.core.profiles import MSMODELING, PROFILES, SGLANG, TRTLLM, VLLM, Mxfp4Activation
from app.core.runner import ModelRunner
from app.core.runner.plan import FLOPS_PER_TFLOP, GEMM_INPUT_BYTES
from app.core.runner.serving import engine_runner

GPT_OSS = "openai/gpt-oss-120b"
B200 = "NVIDIA_B200_SXM_180G"
H200 = "NVIDIA_H200_SXM_141G"
MXFP4 = parse_quantization("MXFP4")
LONG_PREFILL = ForwardShape(is_decode=False, concurrency=1, query_len=8192, seq_len=8192)
DECODE = ForwardShape(is_decode=True, concurrency=4, query_len=1, seq_len=2048)


def _runner(device: str, activation: Mxfp4Activation, quantization: str = "MXFP4") -> ModelRunner:
    return ModelRunner(
        get_model(GPT_OSS),
        get_device(device),
        ParallelLayout(tp=1),
        parse_quantization(quantization),
        mxfp4_activation=activation,
    )


def test_engines_name_their_kernels_activations() -> None:
    assert VLLM.mxfp4_activation == "bf16"
    assert TRTLLM.mxfp4_activation == "fp8" and SGLANG.mxfp4_activation == "fp8"
    assert MSMODELING.mxfp4_activation == "fp4"  # the RFC's FP4 path
    runner = engine_runner(VLLM, get_model(GPT_OSS), get_device(B200), ParallelLayout(), MXFP4)
    assert runner.mxfp4_activation == "bf16"


def test_the_matrix_rate_follows_the_activations_on_blackwell() -> None:
    device = get_device(B200)
    plans = {a: _runner(B200, a).plan for a in ("fp4", "fp8", "bf16")}
    for activation, dtype in (("fp4", DType.FP4), ("fp8", DType.FP8), ("bf16", DType.BF16)):
        peak = device.peak_tflops(dtype)
        assert peak is not None
        expected = peak * FLOPS_PER_TFLOP * device.gemm_efficiency(dtype)
        assert plans[activation].gemm_flops_per_s == pytest.approx(expected, rel=1e-12)
        assert plans[activation].gemm_input_bytes == GEMM_INPUT_BYTES[dtype]
    # The small-M fixed cost stays the FP4 path's: the half-efficiency M scales with the rate.
    fp4 = plans["fp4"]
    for activation in ("fp8", "bf16"):
        plan = plans[activation]
        assert plan.gemm_half_efficiency_tokens == pytest.approx(
            fp4.gemm_half_efficiency_tokens * plan.gemm_flops_per_s / fp4.gemm_flops_per_s
        )
        assert plan.bf16_half_efficiency_tokens == fp4.bf16_half_efficiency_tokens
    assert any("bf16 activations" in note for note in plans["bf16"].notes)


def test_hopper_has_no_block_scaled_fp4_unit_so_fp8_means_bf16() -> None:
    fp8, bf16 = _runner(H200, "fp8").plan, _runner(H200, "bf16").plan
    assert fp8.gemm_flops_per_s == bf16.gemm_flops_per_s
    assert fp8.gemm_input_bytes == GEMM_INPUT_BYTES[DType.BF16]
    # "fp4" keeps the old reading on Hopper: no FP4 peak, the FP8 fallback.
    assert _runner(H200, "fp4").plan.gemm_input_bytes == GEMM_INPUT_BYTES[DType.FP8]


def test_a_long_prefill_slows_with_the_matrix_rate_and_a_decode_step_barely_moves() -> None:
    fp4, fp8, bf16 = (_runner(B200, a) for a in ("fp4", "fp8", "bf16"))
    prefill = [r.forward_ms(LONG_PREFILL) for r in (fp4, fp8, bf16)]
    assert prefill[0] < prefill[1] < prefill[2]
    assert prefill[2] < 4 * prefill[0]  # the experts are most, not all, of the forward
    decode = [r.forward_ms(DECODE) for r in (fp4, fp8, bf16)]
    assert decode[0] <= decode[2] < 1.05 * decode[0]


@pytest.mark.parametrize("quantization", ["FP8", "DISABLED", "NVFP4"])
def test_other_formats_ignore_the_option(quantization: str) -> None:
    plain = _runner(B200, "fp4", quantization)
    for activation in ("fp8", "bf16"):
        other = _runner(B200, activation, quantization)
        assert other.identity() == plain.identity()
        assert other.forward_ms(LONG_PREFILL) == plain.forward_ms(LONG_PREFILL)


def test_the_identity_names_the_activations_of_an_mxfp4_run() -> None:
    identities = {_runner(B200, a).identity() for a in ("fp4", "fp8", "bf16")}
    assert len(identities) == 3
    assert "mxfp4_activation" not in _runner(B200, "fp4").identity_dict()


def test_an_unknown_activation_is_refused() -> None:
    with pytest.raises(InvalidParameterError, match="mxfp4_activation"):
        _runner(B200, "int8")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="mxfp4_activation"):
        VLLM.with_overrides({"mxfp4_activation": "fp16"})


@settings(max_examples=60, deadline=None)
@given(
    engine=st.sampled_from(sorted(PROFILES)),
    tokens=st.integers(1, 16384),
    device=st.sampled_from([B200, H200]),
)
def test_no_engine_runs_mxfp4_faster_than_the_fp4_path(
    engine: str, tokens: int, device: str
) -> None:
    """FP4 is the fastest matrix path a device has, and the ramp's fixed cost is kept, so no
    engine's activations make an MXFP4 forward faster than the FP4 reading."""
    shape = ForwardShape(is_decode=False, concurrency=1, query_len=tokens, seq_len=tokens)
    fp4 = _runner(device, "fp4").forward_ms(shape)
    assert _runner(device, PROFILES[engine].mxfp4_activation).forward_ms(shape) >= fp4


@pytest.mark.parametrize(
    ("quantization", "weights", "matrix"),
    [
        ("W4A16", DType.INT4, DType.BF16),
        ("W8A16_DYNAMIC", DType.INT8, DType.BF16),
        ("FP8", DType.FP8, DType.FP8),
        ("W8A8_DYNAMIC", DType.INT8, DType.INT8),
        ("DISABLED", DType.BF16, DType.BF16),
    ],
)
def test_a_weight_only_format_keeps_its_stored_weights_small_m_cost(
    quantization: str, weights: DType, matrix: DType
) -> None:
    """W4A16 / W8A16 dequantize INT4 / INT8 weights into BF16 matrix operations: their
    small-M fixed cost is the stored weights' (the INT8 path on Hopper), not a BF16 tile's,
    so a decode GEMM stays bound by its weight bytes. Formats whose weights and matrix share a
    dtype keep the device's ramp as it is."""
    device = get_device(H200)
    plan = _runner(H200, "fp4", quantization).plan
    half = device.gemm_half_efficiency_tokens
    stored = device.compute_path(weights)
    if stored is matrix:
        assert plan.gemm_half_efficiency_tokens == half
        return
    ratio = (
        device.peak_tflops(matrix) * device.gemm_efficiency(matrix)  # type: ignore[operator]
    ) / (device.peak_tflops(stored) * device.gemm_efficiency(stored))  # type: ignore[operator]
    assert plan.gemm_half_efficiency_tokens == pytest.approx(half * ratio)
    assert plan.gemm_half_efficiency_tokens < half


def test_trtllms_hopper_experts_are_priced_from_the_bf16_activation_table() -> None:
    """TensorRT-LLM's MXFP8 x MXFP4 experts fall back to BF16 x MXFP4 on Hopper (its TRITON MoE
    backend, the gpt-oss H200 script's ``moe_config.backend``): the measured ``w4a16_mxfp4``
    table prices them there, the ``w4a8_mxfp4_mxfp8`` one on Blackwell. Before, the fallback's
    BF16 matrix path matched no table and the experts kept the defaults."""
    labels = {}
    for device in (H200, B200):
        runner = engine_runner(
            TRTLLM, get_model(GPT_OSS), get_device(device), ParallelLayout(tp=1), MXFP4
        )
        assert runner.plan.moe_fit is not None
        labels[device] = runner.plan.moe_fit.label
        sources = {
            o.source for o in runner.run_inference(DECODE).breakdown.ops if o.name == "experts_up"
        }
        assert sources == {"fitted:trtllm"}
    assert labels == {H200: "w4a16_mxfp4", B200: "w4a8_mxfp4_mxfp8"}
