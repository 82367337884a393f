"""vLLM-Ascend's eager execution: every operator of the forward plan dispatched from the host."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.catalog import get_device, get_model, parse_quantization
from app.core.cost import ForwardShape, MixedShape
from app.core.parallel import ParallelLayout
from app.core.profiles import (
    NPU_EAGER_OP_HOST_MS,
    NPU_GRAPH_MODES,
    NPU_PIECEWISE_LAYER_HOST_MS,
    EngineProfile,
    device_profile,
)
from app.core.runner import RunnerServingModel
from app.core.runner.serving import engine_runner

A2 = "ATLAS_800_A2_313T_64G"
A3 = "ATLAS_800_A3_752T_128G_DIE"
NPU = device_profile("vllm", vendor="huawei", device_name=A2)
EAGER = NPU.with_overrides({"npu_graph_mode": "eager"})


def _serving(
    profile: EngineProfile, model: str, device: str = A2, tp: int = 1
) -> RunnerServingModel:
    runner = engine_runner(
        profile, get_model(model), get_device(device), ParallelLayout(tp=tp), parse_quantization()
    )
    return RunnerServingModel(runner, profile=profile)


def test_operators_are_counted_from_the_forward_plan() -> None:
    """Qwen2.5-7B's decode plan: 9 operators per layer (two norms, QKV, RoPE, attention, O,
    gate-up, SwiGLU, down) over 28 layers, plus embedding, final norm, LM head and sampling;
    tensor parallelism adds each layer's two all-reduces."""
    serving = _serving(EAGER, "Qwen/Qwen2.5-7B-Instruct")
    decode = ForwardShape(is_decode=True, concurrency=4, query_len=1, seq_len=300)
    assert serving.runner.operators(decode) == 28 * 9 + 4
    tp2 = _serving(EAGER, "Qwen/Qwen2.5-7B-Instruct", tp=2)
    assert tp2.runner.operators(decode) == 28 * 11 + 4 + 1  # + the LM head's gather


def test_the_operator_memo_is_bounded_and_answers_the_same_after_it_forgets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A serving model lives as long as the process's runner memo: the operator counts it
    remembers are forgotten at :data:`OPERATOR_MEMO_LIMIT` shapes, and a step is the same
    whether its count was remembered or counted again."""
    monkeypatch.setattr("app.core.runner.serving.OPERATOR_MEMO_LIMIT", 3)
    serving = _serving(EAGER, "Qwen/Qwen2.5-7B-Instruct")
    first = serving.decode_ms(4, 1, 300)
    for seq in range(301, 309):
        serving.decode_ms(4, 1, seq)
        assert len(serving._operators) <= 3
    assert serving.decode_ms(4, 1, 300) == first


def test_a_host_bound_eager_decode_step_is_its_operators_dispatch_time() -> None:
    """The calibration point: Qwen2.5-7B TP 1 at a few requests decodes in ~16.5 ms on the
    device, and the eager host dispatches 256 operators at 0.1 ms: the step is the dispatch
    plus vLLM's step host time, 26.4 ms (the guide's 27.56 ms mean TPOT)."""
    serving = _serving(EAGER, "Qwen/Qwen2.5-7B-Instruct")
    plain = _serving(
        dataclasses.replace(EAGER, npu_graph_mode=None, step_host_ms=0.0),
        "Qwen/Qwen2.5-7B-Instruct",
    )
    assert plain.decode_ms(4, 1, 300) < 256 * NPU_EAGER_OP_HOST_MS
    assert serving.decode_ms(4, 1, 300) == pytest.approx(
        256 * NPU_EAGER_OP_HOST_MS + EAGER.step_host_ms
    )


def test_a_device_bound_eager_step_hides_the_dispatch_but_not_below_graph_pieces() -> None:
    """A long prefill runs longer on the device than its dispatch: the step is the piecewise
    step (the device plus each layer's eagerly launched attention and the step host time)."""
    model = "Qwen/Qwen2.5-7B-Instruct"
    eager = _serving(EAGER, model).prefill_ms(1, 8192, 8192)
    piecewise = _serving(NPU.with_overrides({"npu_graph_mode": "piecewise"}), model)
    device = _serving(dataclasses.replace(NPU, npu_graph_mode=None, step_host_ms=0.0), model)
    assert device.prefill_ms(1, 8192, 8192) > 256 * NPU_EAGER_OP_HOST_MS
    assert eager == pytest.approx(piecewise.prefill_ms(1, 8192, 8192))
    assert eager == pytest.approx(
        device.prefill_ms(1, 8192, 8192) + NPU.step_host_ms + 28 * NPU_PIECEWISE_LAYER_HOST_MS
    )


def test_async_scheduling_hides_only_the_step_host_time_of_an_eager_step() -> None:
    model = "Qwen/Qwen2.5-7B-Instruct"
    overlapped = _serving(EAGER.with_overrides({"overlap_scheduling": True}), model)
    assert overlapped.decode_ms(4, 1, 300) == pytest.approx(256 * NPU_EAGER_OP_HOST_MS)


def test_eager_is_one_of_the_npu_graph_modes() -> None:
    assert "eager" in NPU_GRAPH_MODES and EAGER.eager and not NPU.eager
    assert EAGER.layer_host_ms(decode_only=True) == NPU_PIECEWISE_LAYER_HOST_MS


MODELS = ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3.5-4B", "Qwen/Qwen3-32B")


@settings(max_examples=60, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    device=st.sampled_from((A2, A3)),
    tp=st.sampled_from((1, 2, 4)),
    overlap=st.booleans(),
    concurrency=st.integers(1, 256),
    context=st.integers(1, 16384),
    chunk=st.integers(1, 8192),
)
def test_eager_is_never_faster_than_a_graph_mode(
    model: str,
    device: str,
    tp: int,
    overlap: bool,
    concurrency: int,
    context: int,
    chunk: int,
) -> None:
    """For the same deployment and step, eager execution takes at least as long as every
    graph mode, in decode, prefill and mixed steps, with and without async scheduling."""
    base = NPU.with_overrides({"overlap_scheduling": overlap})
    eager = _serving(base.with_overrides({"npu_graph_mode": "eager"}), model, device, tp)
    decode = (concurrency, 1, context)
    prefill = (1, chunk, chunk)
    mixed = MixedShape(
        prefill=ForwardShape(is_decode=False, concurrency=1, query_len=chunk, seq_len=chunk),
        decode=ForwardShape(is_decode=True, concurrency=concurrency, query_len=1, seq_len=context),
    )
    for mode in NPU_GRAPH_MODES:
        if mode == "eager":
            continue
        graph = _serving(base.with_overrides({"npu_graph_mode": mode}), model, device, tp)
        assert eager.decode_ms(*decode) >= graph.decode_ms(*decode) - 1e-9
        assert eager.prefill_ms(*prefill) >= graph.prefill_ms(*prefill) - 1e-9
        assert eager.mixed_ms(mixed) >= graph.mixed_ms(mixed) - 1e-9
