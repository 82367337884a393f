"""The fused mixed forward: a prefill chunk and decodes as ONE forward (``run_mixed``).

Properties over real catalog models and devices (dense, MoE with and without expert
parallelism, MLA, sliding windows, MTP):

- a part alone is exactly that part's ordinary forward;
- ``max(prefill, decode) <= fused <= prefill + decode``;
- the fused forward grows with either part.

Why the upper bound can fail (and is only asserted on catalog devices): a forward that carries
prefill tokens runs eager, so the decode part's own kernels (its attention; for MLA also the
absorbed projections) pay the eager launch cost inside the fused step, while the decode forward
alone pays the captured-graph cost on every kernel. The dense parts are subadditive in tokens
(weights read once, the GEMM ramp only improves, one launch and one forward overhead), which
pays for that on every catalog device (eager 10 us vs graph 3 us on NVIDIA, equal on Ascend);
a custom device whose graph launch is far below its eager launch (0 vs 20 us) breaks it, as the
last test shows.
"""

from __future__ import annotations

from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.catalog import device_from_dict, get_device, get_model, parse_quantization
from app.core.cost import ForwardShape, MixedShape
from app.core.errors import InvalidParameterError
from app.core.parallel import ParallelLayout
from app.core.runner import ModelRunner, OpCategory, RunnerServingModel

#: (model, tp, ep): dense GQA, MoE without and with expert parallelism, MLA, sliding windows.
DEPLOYMENTS = [
    ("Qwen/Qwen3-32B", 8, 1),
    ("Qwen/Qwen3-8B", 1, 1),
    ("Qwen/Qwen3-235B-A22B", 8, 8),
    ("mistralai/Mixtral-8x7B-v0.1", 2, 1),
    ("deepseek-ai/DeepSeek-V3", 8, 8),
    ("openai/gpt-oss-20b", 1, 1),
]
DEVICES = ["NVIDIA_H100_SXM_80G", "NVIDIA_H200_SXM_141G", "ATLAS_800_A2_376T_64G"]


@cache
def runner(name: str, tp: int, ep: int, device: str, num_mtp_tokens: int = 0) -> ModelRunner:
    return ModelRunner(
        get_model(name),
        get_device(device),
        ParallelLayout(tp=tp, ep=ep),
        parse_quantization("FP8"),
        num_mtp_tokens=num_mtp_tokens,
    )


def prefill(concurrency: int, query: int, context: int) -> ForwardShape:
    return ForwardShape(
        is_decode=False, concurrency=concurrency, query_len=query, seq_len=query + context
    )


def decode(concurrency: int, context: int, mtp: int = 0) -> ForwardShape:
    return ForwardShape(
        is_decode=True, concurrency=concurrency, query_len=1 + mtp, seq_len=1 + mtp + context
    )


def mixed(p: ForwardShape, d: ForwardShape) -> MixedShape:
    return MixedShape(prefill=p, decode=d)


deployments = st.tuples(st.sampled_from(DEPLOYMENTS), st.sampled_from(DEVICES))
prefills = st.builds(
    prefill, st.integers(1, 4), st.integers(1, 8192), st.sampled_from([0, 1000, 30000])
)
decodes = st.builds(decode, st.integers(1, 1024), st.integers(1, 32768))


@settings(max_examples=150, deadline=None)
@given(deployments, prefills, decodes)
def test_fused_lies_between_max_and_sum(
    where: tuple[tuple[str, int, int], str], p: ForwardShape, d: ForwardShape
) -> None:
    (name, tp, ep), device = where
    model = runner(name, tp, ep, device)
    prefill_ms = model.run_inference(p).latency_ms
    decode_ms = model.run_inference(d).latency_ms
    fused_ms = model.run_mixed(mixed(p, d)).latency_ms
    assert max(prefill_ms, decode_ms) <= fused_ms <= prefill_ms + decode_ms


@settings(max_examples=100, deadline=None)
@given(
    deployments,
    prefills,
    decodes,
    st.sampled_from(["prefill_query", "prefill_requests", "decode_requests", "decode_context"]),
    st.integers(1, 2048),
)
def test_fused_grows_with_either_part(
    where: tuple[tuple[str, int, int], str],
    p: ForwardShape,
    d: ForwardShape,
    grow: str,
    extra: int,
) -> None:
    (name, tp, ep), device = where
    model = runner(name, tp, ep, device)
    context = p.seq_len - p.query_len
    bigger_p, bigger_d = p, d
    if grow == "prefill_query":
        bigger_p = prefill(p.concurrency, p.query_len + extra, context)
    elif grow == "prefill_requests":
        bigger_p = prefill(p.concurrency + extra, p.query_len, context)
    elif grow == "decode_requests":
        bigger_d = decode(d.concurrency + extra, d.seq_len - 1)
    else:
        bigger_d = decode(d.concurrency, d.seq_len - 1 + extra)
    base = model.run_mixed(mixed(p, d)).latency_ms
    assert model.run_mixed(mixed(bigger_p, bigger_d)).latency_ms >= base


def test_dense_parts_see_every_token_attention_each_part_overhead_once() -> None:
    model = runner("Qwen/Qwen3-32B", 8, 1, "NVIDIA_H100_SXM_80G")
    p, d = prefill(1, 2048, 0), decode(64, 2048)
    total = ForwardShape(is_decode=False, concurrency=1, query_len=2048 + 64, seq_len=2048 + 64)
    fused = {(op.scope, op.name): op for op in model.run_mixed(mixed(p, d)).breakdown.ops}
    flat = {(op.scope, op.name): op for op in model.run_inference(total).breakdown.ops}
    alone = {(op.scope, op.name): op for op in model.run_inference(p).breakdown.ops}
    layer = next(scope for scope, name in fused if name == "qkv_proj")
    for name in ("qkv_proj", "o_proj", "mlp_up", "mlp_down", "input_norm", "mlp_all_reduce"):
        assert fused[(layer, name)].flops == flat[(layer, name)].flops
        assert fused[(layer, name)].comm_bytes == flat[(layer, name)].comm_bytes
    # Attention per part: the prefill kernel is the prefill forward's, plus a decode kernel.
    assert fused[(layer, "flash_attention")] == alone[(layer, "flash_attention")]
    assert fused[(layer, "decode_attention")].flops > 0
    # One lm_head over the 64 decode tokens and the prefill request's last token.
    assert fused[("model", "lm_head")].flops == 65 * flat[("model", "lm_head")].flops
    assert [op.name for op in model.run_mixed(mixed(p, d)).breakdown.ops].count(
        "forward_overhead"
    ) == 1


def test_mla_parts_take_their_own_attention_paths() -> None:
    model = runner("deepseek-ai/DeepSeek-V3", 8, 8, "NVIDIA_H200_SXM_141G")
    names = {
        op.name
        for op in model.run_mixed(mixed(prefill(1, 1024, 0), decode(32, 4096))).breakdown.ops
    }
    assert {"kv_b_proj", "flash_attention", "q_absorb", "decode_attention", "v_up"} <= names


def test_memory_holds_both_parts() -> None:
    model = runner("Qwen/Qwen3-32B", 8, 1, "NVIDIA_H100_SXM_80G")
    p, d = prefill(1, 2048, 2048), decode(64, 4096)
    fused = model.run_mixed(mixed(p, d)).memory
    assert fused.kv_cache_gb == pytest.approx(
        model.memory(p).kv_cache_gb + model.memory(d).kv_cache_gb
    )
    assert fused.activation_gb > max(model.memory(p).activation_gb, model.memory(d).activation_gb)
    assert fused.weights_gb == model.memory(p).weights_gb


def test_run_mixed_checks_its_parts() -> None:
    model = runner("Qwen/Qwen3-8B", 1, 1, "NVIDIA_H100_SXM_80G")
    with pytest.raises(InvalidParameterError, match="seq_len"):
        model.run_mixed(
            mixed(
                prefill(1, 10, 0),
                ForwardShape(is_decode=True, concurrency=3, query_len=4, seq_len=2),
            )
        )
    with pytest.raises(InvalidParameterError, match="concurrency"):
        model.run_mixed(
            mixed(
                ForwardShape(is_decode=False, concurrency=0, query_len=10, seq_len=10),
                decode(3, 10),
            )
        )
    result = model.run_mixed(mixed(prefill(1, 10, 0), decode(3, 10)))
    expected = {**_shape_doc(decode(3, 10)), "mtp_draft_tokens": 0}
    assert result.to_dict()["fused_decode"] == expected
    assert result.to_dict()["request"] == {**_shape_doc(prefill(1, 10, 0)), "mtp_draft_tokens": 0}
    assert "fused_decode" not in model.run_inference(decode(3, 10)).to_dict()


def _shape_doc(shape: ForwardShape) -> dict[str, object]:
    return {
        "is_decode": shape.is_decode,
        "concurrency": shape.concurrency,
        "query_len": shape.query_len,
        "seq_len": shape.seq_len,
    }


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from([("deepseek-ai/DeepSeek-V3", 8, 8), ("Qwen/Qwen3-235B-A22B", 8, 8)]),
    st.sampled_from(DEVICES),
    st.integers(1, 3),
    prefills,
    st.integers(1, 512),
    st.integers(1, 16384),
)
def test_serving_model_folds_mtp_into_the_decode_part_only(
    deployment: tuple[str, int, int],
    device: str,
    mtp: int,
    p: ForwardShape,
    requests: int,
    context: int,
) -> None:
    """MTP: ``mixed_ms`` is ``prefill_ms`` plus the fused forward's extra over it per emitted
    token, so the serving model keeps max <= fused <= sum and the one-part identities."""
    name, tp, ep = deployment
    serving = RunnerServingModel(runner(name, tp, ep, device, mtp), mtp, [0.8] * mtp)
    p_shape = ForwardShape(
        is_decode=False, concurrency=p.concurrency, query_len=p.query_len, seq_len=p.seq_len
    )
    d_shape = ForwardShape(
        is_decode=True, concurrency=requests, query_len=1 + mtp, seq_len=1 + mtp + context
    )
    prefill_ms = serving.prefill_ms(p.concurrency, p.query_len, p.seq_len)
    decode_ms = serving.decode_ms(requests, 1 + mtp, 1 + mtp + context)
    fused_ms = serving.mixed_ms(MixedShape(prefill=p_shape, decode=d_shape))
    assert max(prefill_ms, decode_ms) <= fused_ms <= prefill_ms + decode_ms
    raw = serving.runner.run_mixed(
        mixed(p, decode(requests, context, mtp)), mtp_draft_tokens=mtp
    ).latency_ms
    assert fused_ms == pytest.approx(
        prefill_ms + (raw - prefill_ms) / serving.tokens_per_decode_step
    )


def test_upper_bound_needs_graph_launch_not_far_below_eager() -> None:
    """The documented exception: graph launches free, eager ones 20 us, tiny parts."""
    device = device_from_dict(
        {
            "name": "graph_for_free",
            "base": "NVIDIA_H100_SXM_80G",
            "kernel_launch_us": 20.0,
            "graph_kernel_launch_us": 0.0,
        }
    )
    model = ModelRunner(get_model("Qwen/Qwen3-0.6B"), device)
    p, d = prefill(1, 1, 0), decode(1, 1)
    prefill_ms = model.run_inference(p).latency_ms
    decode_ms = model.run_inference(d).latency_ms
    assert model.run_mixed(mixed(p, d)).latency_ms > prefill_ms + decode_ms
    # The excess is the decode attention kernels paying the eager launch in the fused step.
    decode_attention = [
        op for op in model.run_mixed(mixed(p, d)).breakdown.ops if op.name == "decode_attention"
    ]
    assert all(op.category is OpCategory.ATTENTION and op.launch_ms > 0 for op in decode_attention)
