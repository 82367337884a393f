"""The runner's Gated DeltaNet layers (Qwen3.5): cost without context growth, state memory.

Hand counts use the shipped Qwen3.5-397B-A17B config: 45 linear-attention layers (16 key /
64 value heads of 128, conv kernel 4, fp32 state) and 15 full-attention layers (2 KV heads of
256), hidden size 4096.
"""

from __future__ import annotations

import math

import pytest

from app.core.catalog import get_device, get_model, parse_quantization
from app.core.catalog.hardware import BYTES_PER_GB
from app.core.cost import ForwardShape
from app.core.errors import InvalidParameterError
from app.core.parallel import ParallelLayout
from app.core.runner import ModelRunner, OpCost, RunnerServingModel
from app.core.runner.runner import KV_BLOCK_TOKENS

QWEN35 = "Qwen/Qwen3.5-397B-A17B"
LINEAR_LAYERS, FULL_LAYERS = 45, 15
V_HEADS, K_HEADS, DK, DV, KERNEL = 64, 16, 128, 128, 4
FP32, B16 = 4, 2
CONV_CHANNELS = 2 * K_HEADS * DK + V_HEADS * DV


def _runner(tp: int = 4, quant: str = "NVFP4", **options: object) -> ModelRunner:
    return ModelRunner(
        get_model(QWEN35),
        get_device("NVIDIA_B300_SXM_288G"),
        ParallelLayout(tp=tp),
        parse_quantization(quant),
        **options,  # type: ignore[arg-type]
    )


def _decode(concurrency: int, seq_len: int) -> ForwardShape:
    return ForwardShape(is_decode=True, concurrency=concurrency, query_len=1, seq_len=seq_len)


def _scope_ms(ops: tuple[OpCost, ...], linear: bool) -> float:
    return math.fsum(op.total_ms for op in ops if ("linear_attention" in op.scope) is linear)


def _op(ops: tuple[OpCost, ...], name: str) -> OpCost:
    (op,) = [o for o in ops if o.name == name]
    return op


def _state_bytes(tp: int) -> float:
    ssm = V_HEADS // tp * DK * DV * FP32
    conv = (KERNEL - 1) * CONV_CHANNELS // tp * B16
    return LINEAR_LAYERS * (ssm + conv)


def test_linear_layers_run_gated_deltanet_ops_not_attention() -> None:
    ops = _runner().run_inference(_decode(8, 4096)).breakdown.ops
    linear = {op.name for op in ops if "linear_attention" in op.scope}
    assert {"gdn_in_proj_qkvz", "gdn_conv1d", "gdn_recurrent", "gdn_out_proj"} <= linear
    assert not linear & {"qkv_proj", "decode_attention", "rope"}
    assert all(op.count == LINEAR_LAYERS for op in ops if "linear_attention" in op.scope)
    full = [op for op in ops if op.name == "decode_attention"]
    assert [op.count for op in full] == [FULL_LAYERS]


def test_decode_cost_of_linear_layers_does_not_grow_with_context() -> None:
    runner = _runner()
    short = runner.run_inference(_decode(32, 1024)).breakdown.ops
    long = runner.run_inference(_decode(32, 131072)).breakdown.ops
    assert _scope_ms(short, linear=True) == _scope_ms(long, linear=True)
    assert _scope_ms(long, linear=False) > _scope_ms(short, linear=False)  # full attention reads KV


def test_recurrent_decode_reads_and_writes_each_requests_state() -> None:
    concurrency, tp = 16, 4
    op = _op(
        _runner(tp=tp).run_inference(_decode(concurrency, 2048)).breakdown.ops, "gdn_recurrent"
    )
    state = V_HEADS // tp * DK * DV
    io = concurrency * (2 * K_HEADS // tp * DK + 2 * V_HEADS // tp * DV) * B16
    assert op.hbm_bytes == 2 * concurrency * state * FP32 + io
    assert op.flops == 7 * concurrency * state  # decay, retrieval, update, readout


def test_chunked_prefill_of_linear_layers_is_linear_in_tokens() -> None:
    runner = _runner()
    one = _op(
        runner.run_inference(
            ForwardShape(is_decode=False, concurrency=1, query_len=4096, seq_len=4096)
        ).breakdown.ops,
        "gdn_chunked",
    )
    two = _op(
        runner.run_inference(
            ForwardShape(is_decode=False, concurrency=1, query_len=8192, seq_len=8192)
        ).breakdown.ops,
        "gdn_chunked",
    )
    assert two.flops == 2 * one.flops


def test_kv_per_token_counts_only_full_attention_layers() -> None:
    plan = _runner(tp=4).plan
    # 2 KV heads replicated over 4 ranks: one K and one V head of 256 per rank, 16-bit.
    assert plan.kv_bytes_per_token == FULL_LAYERS * 2 * 256 * B16
    assert plan.kv_bytes_per_token_sliding == 0


@pytest.mark.parametrize("tp", [1, 4, 8])
def test_state_bytes_per_request(tp: int) -> None:
    assert _runner(tp=tp).state_bytes_per_request() == _state_bytes(tp)
    assert _state_bytes(4) == pytest.approx(48.0e6, rel=1e-3)  # ~48 MB per request at TP 4


def test_kv_cache_bytes_hold_one_state_per_request() -> None:
    runner = _runner()
    context = 1000
    blocks = math.ceil(context / KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS
    per_request = blocks * runner.plan.kv_bytes_per_token + _state_bytes(4)
    assert runner.kv_cache_bytes(3, context) == 3 * per_request
    softmax = ModelRunner(get_model("Qwen/Qwen3-8B"), get_device("NVIDIA_H100_SXM_80G"))
    assert softmax.state_bytes_per_request() == 0.0


def test_kv_capacity_counts_the_state_of_each_request() -> None:
    runner = _runner()
    serving = RunnerServingModel(runner)
    context, budget = 2048, 8192
    capacity = serving.kv_capacity_requests(context, budget)
    peak = runner.memory(
        ForwardShape(is_decode=False, concurrency=1, query_len=budget, seq_len=budget)
    )
    free_bytes = (peak.available_gb + peak.kv_cache_gb) * BYTES_PER_GB
    kv_only = context * runner.plan.kv_bytes_per_token
    assert capacity == math.floor(free_bytes / (kv_only + _state_bytes(4)))
    assert capacity < math.floor(free_bytes / kv_only) / 2  # the state dominates at 2 K tokens


def test_linear_heads_must_split_over_tp() -> None:
    with pytest.raises(InvalidParameterError, match="linear_num_key_heads=16"):
        _runner(tp=32)


def test_weights_match_the_parameter_count_in_16_bit() -> None:
    runner = _runner(tp=1, quant="DISABLED")
    model = runner.model
    # Everything but the q/k norm weights of the full-attention layers (15 x 2 x 256), which
    # the runner's weights leave out for every qk-norm model.
    qk_norms = FULL_LAYERS * 2 * 256
    assert runner.weights_bytes() == B16 * (model.num_params - qk_norms)
