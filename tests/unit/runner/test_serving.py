"""The ServingModel adapter, MTP folding and the runner identity."""

from __future__ import annotations

import pytest

from app.core.catalog import device_from_dict, get_device, get_model, parse_quantization
from app.core.cost import ForwardShape, ServingModel
from app.core.errors import InvalidParameterError
from app.core.parallel import ParallelLayout
from app.core.runner import ModelRunner, RunnerServingModel
from app.core.runner.runner import RUNNER_MODEL_VERSION


def _runner(**options: object) -> ModelRunner:
    return ModelRunner(
        get_model("deepseek-ai/DeepSeek-V3"),
        get_device("NVIDIA_H200_SXM_141G"),
        ParallelLayout(tp=8),
        parse_quantization("FP8"),
        **options,  # type: ignore[arg-type]
    )


def test_adapter_implements_the_protocol() -> None:
    serving = RunnerServingModel(_runner())
    assert isinstance(serving, ServingModel)
    direct = _runner().run_inference(
        ForwardShape(is_decode=False, concurrency=2, query_len=512, seq_len=1024)
    )
    assert serving.prefill_ms(2, 512, 1024) == direct.latency_ms


def test_mtp_decode_is_folded_with_acceptance_rates() -> None:
    runner = _runner(num_mtp_tokens=2)
    serving = RunnerServingModel(runner, num_mtp_tokens=2, mtp_acceptance_rates=(0.8, 0.5, 0.1))
    step = runner.run_inference(
        ForwardShape(is_decode=True, concurrency=32, query_len=3, seq_len=3000), mtp_draft_tokens=2
    )
    assert serving.tokens_per_decode_step == pytest.approx(2.3)
    assert serving.decode_ms(32, 1, 3000) == pytest.approx(step.latency_ms / 2.3)
    assert serving.decode_ms(32, 3, 3000) == pytest.approx(step.latency_ms / 2.3)
    plain = RunnerServingModel(_runner())
    assert plain.decode_ms(32, 1, 3000) < step.latency_ms


def test_mtp_rates_are_checked() -> None:
    with pytest.raises(InvalidParameterError):
        RunnerServingModel(_runner(), num_mtp_tokens=2, mtp_acceptance_rates=(0.5,))
    with pytest.raises(InvalidParameterError):
        RunnerServingModel(_runner(), num_mtp_tokens=1, mtp_acceptance_rates=(1.5,))


def test_memory_left_goes_negative_with_concurrency() -> None:
    serving = RunnerServingModel(_runner())
    assert serving.memory_left_gb(True, 1, 1, 4096) > 0
    assert serving.memory_left_gb(True, 100_000, 1, 4096) < 0
    assert serving.memory_left_gb(True, 64, 1, 4096) > serving.memory_left_gb(True, 128, 1, 4096)


def test_identity_is_stable_and_sensitive() -> None:
    base = _runner().identity()
    assert base == _runner().identity()
    assert base.startswith(f"{RUNNER_MODEL_VERSION}:")
    assert _runner(reserved_memory_gb=20).identity() != base
    assert _runner(num_mtp_tokens=1).identity() != base
    other_device = ModelRunner(
        get_model("deepseek-ai/DeepSeek-V3"),
        device_from_dict({"base": "NVIDIA_H200_SXM_141G", "memory_efficiency": 0.5}),
        ParallelLayout(tp=8),
        parse_quantization("FP8"),
    )
    assert other_device.identity() != base
    kv8 = ModelRunner(
        get_model("deepseek-ai/DeepSeek-V3"),
        get_device("NVIDIA_H200_SXM_141G"),
        ParallelLayout(tp=8),
        parse_quantization("FP8", "FP8"),
    )
    assert kv8.identity() != base


@pytest.mark.parametrize(
    ("tp", "ep", "dp"),
    [(3, 1, 1), (8, 3, 1)],
)
def test_invalid_layouts(tp: int, ep: int, dp: int) -> None:
    with pytest.raises(InvalidParameterError):
        ModelRunner(
            get_model("Qwen/Qwen3-30B-A3B"),
            get_device("NVIDIA_H100_SXM_80G"),
            ParallelLayout(tp=tp, ep=ep, dp=dp),
        )


def test_request_validation() -> None:
    runner = _runner()
    with pytest.raises(InvalidParameterError, match="concurrency"):
        runner.run_inference(ForwardShape(is_decode=False, concurrency=0, query_len=1, seq_len=1))
    with pytest.raises(InvalidParameterError, match="seq_len"):
        runner.memory(ForwardShape(is_decode=False, concurrency=1, query_len=10, seq_len=5))
    with pytest.raises(InvalidParameterError, match="mtp_draft_tokens"):
        runner.run_inference(
            ForwardShape(is_decode=True, concurrency=1, query_len=1, seq_len=5),
            mtp_draft_tokens=-1,
        )
