"""Monotonicity and structure properties of the forward-latency model (hypothesis)."""

from __future__ import annotations

from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.catalog import get_device, get_model, parse_quantization
from app.core.cost import ForwardShape
from app.core.parallel import ParallelLayout
from app.core.runner import ModelRunner, OpCategory

MODELS = [
    "Qwen/Qwen3-8B",
    "mistralai/Mixtral-8x7B-v0.1",
    "deepseek-ai/DeepSeek-V3",
    "openai/gpt-oss-20b",
]


@cache
def runner(name: str, tp: int = 1) -> ModelRunner:
    return ModelRunner(
        get_model(name),
        get_device("NVIDIA_H200_SXM_141G"),
        ParallelLayout(tp=tp),
        parse_quantization("FP8"),
    )


def latency(name: str, decode: bool, concurrency: int, query: int, context: int) -> float:
    request = ForwardShape(
        is_decode=decode, concurrency=concurrency, query_len=query, seq_len=query + context
    )
    return runner(name).run_inference(request).latency_ms


shapes = st.tuples(
    st.sampled_from(MODELS),
    st.booleans(),
    st.integers(1, 512),
    st.integers(1, 4096),
    st.integers(0, 32768),
)


@settings(max_examples=150, deadline=None)
@given(shapes, st.integers(1, 4096))
def test_latency_non_decreasing_in_query_tokens(
    shape: tuple[str, bool, int, int, int], extra: int
) -> None:
    name, decode, c, q, x = shape
    assert latency(name, decode, c, q + extra, x) >= latency(name, decode, c, q, x)


@settings(max_examples=150, deadline=None)
@given(shapes, st.integers(1, 65536))
def test_latency_non_decreasing_in_context(
    shape: tuple[str, bool, int, int, int], extra: int
) -> None:
    name, decode, c, q, x = shape
    assert latency(name, decode, c, q, x + extra) >= latency(name, decode, c, q, x)


@settings(max_examples=150, deadline=None)
@given(shapes, st.integers(1, 4096))
def test_latency_non_decreasing_in_concurrency(
    shape: tuple[str, bool, int, int, int], extra: int
) -> None:
    name, decode, c, q, x = shape
    assert latency(name, decode, c + extra, q, x) >= latency(name, decode, c, q, x)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["Qwen/Qwen3-32B", "meta-llama/Llama-3.1-70B"]), st.integers(1, 8192))
def test_tensor_parallel_reduces_compute_per_device(name: str, tokens: int) -> None:
    request = ForwardShape(is_decode=False, concurrency=1, query_len=tokens, seq_len=tokens)

    def flops(tp: int) -> float:
        ops = runner(name, tp).run_inference(request).breakdown.ops
        return sum(op.flops * op.count for op in ops if op.category is OpCategory.GEMM)

    assert flops(1) > flops(2) > flops(4) > flops(8)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(MODELS), st.booleans(), st.integers(1, 8), st.integers(2, 4096))
def test_ops_do_not_grow_with_concurrency(
    name: str, decode: bool, query: int, concurrency: int
) -> None:
    """Cost is closed-form: the op list is the same for 1 and 4096 requests."""
    small = ForwardShape(is_decode=decode, concurrency=1, query_len=query, seq_len=query + 100)
    large = ForwardShape(
        is_decode=decode, concurrency=concurrency, query_len=query, seq_len=query + 100
    )
    a = runner(name).run_inference(small).breakdown.ops
    b = runner(name).run_inference(large).breakdown.ops
    assert [op.name for op in a] == [op.name for op in b]


def test_same_input_same_output() -> None:
    request = ForwardShape(is_decode=True, concurrency=17, query_len=2, seq_len=3000)
    first = runner("deepseek-ai/DeepSeek-V3").run_inference(request)
    second = ModelRunner(
        get_model("deepseek-ai/DeepSeek-V3"),
        get_device("NVIDIA_H200_SXM_141G"),
        ParallelLayout(tp=1),
        parse_quantization("FP8"),
    ).run_inference(request)
    assert first == second
