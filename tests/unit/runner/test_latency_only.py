"""The latency-only forward (``forward_ms`` / ``mixed_ms``: no op records, no memory) and the
shared memo of device times (:data:`~app.core.runner.serving.ForwardMemo`)."""

from __future__ import annotations

import dataclasses
from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.catalog import get_device, get_model, parse_quantization
from app.core.cost import ForwardShape, MixedShape
from app.core.parallel import ParallelLayout
from app.core.profiles import get_profile
from app.core.runner import ModelRunner, RunnerServingModel
from app.core.runner.serving import ForwardMemo

# A dense GQA model, an MLA MoE with MTP layers and a sparse indexer's kin, a hybrid
# linear-attention MoE, a sliding-window MoE, and a pipeline layout: every builder path.
LAYOUTS = [
    ("Qwen/Qwen3-32B", ParallelLayout(tp=2), "FP8"),
    ("deepseek-ai/DeepSeek-V3", ParallelLayout(tp=8, ep=8), "FP8"),
    ("zhipuai/GLM-5", ParallelLayout(tp=8), "FP8"),
    ("Qwen/Qwen3.5-397B-A17B", ParallelLayout(tp=4), "FP8"),
    ("openai/gpt-oss-120b", ParallelLayout(tp=1), "MXFP4"),
    ("meta-llama/Llama-3.1-70B", ParallelLayout(tp=2, pp=2), "FP8"),
]


@cache
def runner(index: int, mtp: int = 0) -> ModelRunner:
    model, layout, quantization = LAYOUTS[index]
    return ModelRunner(
        get_model(model),
        get_device("NVIDIA_H200_SXM_141G"),
        layout,
        parse_quantization(quantization),
        num_mtp_tokens=mtp,
    )


shapes = st.builds(
    lambda decode, c, q, x: ForwardShape(
        is_decode=decode, concurrency=c, query_len=1 if decode else q, seq_len=q + x
    ),
    st.booleans(),
    st.integers(1, 256),
    st.integers(1, 8192),
    st.integers(0, 32768),
)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(LAYOUTS) - 1), shapes, st.integers(0, 2))
def test_forward_ms_is_the_detailed_forwards_latency_to_the_bit(
    index: int, shape: ForwardShape, drafts: int
) -> None:
    r = runner(index)
    assert r.forward_ms(shape, mtp_draft_tokens=drafts) == (
        r.run_inference(shape, mtp_draft_tokens=drafts).latency_ms
    )


@settings(max_examples=100, deadline=None)
@given(st.integers(0, len(LAYOUTS) - 1), shapes, st.integers(1, 128), st.integers(0, 2))
def test_mixed_ms_is_the_detailed_fused_latency_to_the_bit(
    index: int, prefill: ForwardShape, decodes: int, drafts: int
) -> None:
    chunk = dataclasses.replace(prefill, is_decode=False, query_len=prefill.seq_len)
    mixed = MixedShape(
        prefill=chunk,
        decode=ForwardShape(is_decode=True, concurrency=decodes, query_len=1, seq_len=2048),
    )
    r = runner(index)
    assert r.mixed_ms(mixed, mtp_draft_tokens=drafts) == (
        r.run_mixed(mixed, mtp_draft_tokens=drafts).latency_ms
    )


class CountingRunner(ModelRunner):
    """A runner that counts the forwards it is asked to cost."""

    calls = 0

    def forward_ms(self, shape: ForwardShape, *, mtp_draft_tokens: int | None = None) -> float:
        CountingRunner.calls += 1
        return super().forward_ms(shape, mtp_draft_tokens=mtp_draft_tokens)


def _counting(efficiency: float) -> CountingRunner:
    device = dataclasses.replace(get_device("NVIDIA_H200_SXM_141G"), memory_efficiency=efficiency)
    return CountingRunner(
        get_model("Qwen/Qwen3-32B"), device, ParallelLayout(tp=1), parse_quantization("FP8")
    )


PREFILL = (4, 1024, 1024)
DECODE = (32, 1, 3000)


def test_the_memo_serves_equal_runners_under_other_host_times() -> None:
    memo: ForwardMemo = {}
    vllm = get_profile("vllm")
    slower_host = dataclasses.replace(vllm, step_host_ms=vllm.step_host_ms + 3.0)
    first = RunnerServingModel(_counting(0.8), profile=vllm, forwards=memo)
    second = RunnerServingModel(_counting(0.8), profile=slower_host, forwards=memo)
    CountingRunner.calls = 0
    prefill, decode = first.prefill_ms(*PREFILL), first.decode_ms(*DECODE)
    assert CountingRunner.calls == 2
    # The second model's runner is equal (same identity): its forwards come from the memo,
    # and its own host time still applies on top.
    assert second.prefill_ms(*PREFILL) == prefill + 3.0
    assert second.decode_ms(*DECODE) == decode + 3.0
    assert CountingRunner.calls == 2
    assert len(memo) == 2


def test_the_memo_keeps_runners_with_other_efficiencies_apart() -> None:
    memo: ForwardMemo = {}
    vllm = get_profile("vllm")
    fast = RunnerServingModel(_counting(0.9), profile=vllm, forwards=memo)
    slow = RunnerServingModel(_counting(0.45), profile=vllm, forwards=memo)
    unmemoised = RunnerServingModel(_counting(0.45), profile=vllm)
    fast.decode_ms(*DECODE)
    CountingRunner.calls = 0
    assert slow.decode_ms(*DECODE) == unmemoised.decode_ms(*DECODE)
    assert CountingRunner.calls == 2  # costed afresh, not served the faster runner's time
    assert slow.decode_ms(*DECODE) > fast.decode_ms(*DECODE)
    assert len(memo) == 2
