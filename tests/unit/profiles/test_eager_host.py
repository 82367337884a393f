"""The host time of the prefill forwards an engine runs without a captured graph
(``eager_layer_host_ms``): SGLang's prefill batches."""

from __future__ import annotations

import dataclasses

import pytest

from app.core.catalog import get_device, get_model, parse_quantization
from app.core.errors import InvalidParameterError
from app.core.parallel import ParallelLayout
from app.core.profiles import (
    SGLANG,
    SGLANG_EAGER_LAYER_HOST_MS,
    TRTLLM,
    VLLM,
    EngineProfile,
    device_profile,
)
from app.core.runner import RunnerServingModel
from app.core.runner.serving import engine_runner

H100 = "NVIDIA_H100_SXM_80G"
A2 = "ATLAS_800_A2_376T_64G"
QWEN = "Qwen/Qwen3-32B"  # 64 layers


def _serving(profile: EngineProfile, *, graph_max: int | None = None) -> RunnerServingModel:
    prof = dataclasses.replace(profile, cuda_graph_max_batch=graph_max)
    device = get_device(H100)
    layout = ParallelLayout(tp=2)
    runner = engine_runner(prof, get_model(QWEN), device, layout, parse_quantization())
    return RunnerServingModel(runner, profile=prof)


def test_the_sglang_value_is_the_published_one_token_prefill_per_layer() -> None:
    # sgl-project/sglang#12160: DeepSeek-V3 (61 layers), one new token, 82.6 ms eagerly.
    assert round(82.6 / 61, 2) == SGLANG_EAGER_LAYER_HOST_MS
    assert SGLANG.eager_layer_host_ms == SGLANG_EAGER_LAYER_HOST_MS
    assert VLLM.eager_layer_host_ms == TRTLLM.eager_layer_host_ms == 0.0


def test_a_short_eager_prefill_takes_the_host_time_a_long_one_its_device_time() -> None:
    layers = get_model(QWEN).num_layers
    host_ms = 1.35 * layers  # 86.4 ms
    plain = _serving(dataclasses.replace(SGLANG, eager_layer_host_ms=0.0))
    eager = _serving(dataclasses.replace(SGLANG, eager_layer_host_ms=1.35))
    short_device = plain.prefill_ms(1, 16, 16) - SGLANG.step_sync_ms
    assert short_device < host_ms
    # the overlap scheduler launches while the GPU runs: the step is the longer of the two
    assert eager.prefill_ms(1, 16, 16) == pytest.approx(host_ms + SGLANG.step_sync_ms)
    long_device = plain.prefill_ms(1, 16384, 16384) - SGLANG.step_sync_ms
    assert long_device > host_ms
    assert eager.prefill_ms(1, 16384, 16384) == pytest.approx(plain.prefill_ms(1, 16384, 16384))
    assert eager.identity() != plain.identity()


def test_without_overlap_the_host_time_adds_to_the_forward() -> None:
    layers = get_model(QWEN).num_layers
    base = dataclasses.replace(SGLANG, overlap_scheduling=False, eager_layer_host_ms=0.0)
    plain = _serving(base)
    eager = _serving(dataclasses.replace(base, eager_layer_host_ms=0.5))
    gap = eager.prefill_ms(1, 4096, 4096) - plain.prefill_ms(1, 4096, 4096)
    assert gap == pytest.approx(0.5 * layers)


def test_decodes_pay_nothing_a_mixed_step_pays_the_host_time() -> None:
    layers = get_model(QWEN).num_layers
    base = dataclasses.replace(SGLANG, overlap_scheduling=False)
    plain = _serving(dataclasses.replace(base, eager_layer_host_ms=0.0), graph_max=16)
    eager = _serving(base, graph_max=16)
    # decode steps, captured or not (32 > 16): the runner's launch costs alone
    for batch in (16, 32):
        assert eager.decode_ms(batch, 1, 2048) == pytest.approx(plain.decode_ms(batch, 1, 2048))
    # a mixed step (a prefill chunk with decodes) is never a captured graph
    from app.core.cost import ForwardShape, MixedShape

    mixed = MixedShape(
        prefill=ForwardShape(is_decode=False, concurrency=1, query_len=256, seq_len=256),
        decode=ForwardShape(is_decode=True, concurrency=8, query_len=1, seq_len=2048),
    )
    assert eager.mixed_ms(mixed) - plain.mixed_ms(mixed) == pytest.approx(
        SGLANG_EAGER_LAYER_HOST_MS * layers
    )


def test_an_npu_build_does_not_take_the_cuda_figure() -> None:
    npu = device_profile("sglang", vendor="huawei", device_name=A2)
    assert npu.eager_layer_host_ms == 0.0
    gpu = device_profile("sglang", vendor="nvidia", device_name=H100)
    assert gpu.eager_layer_host_ms == SGLANG_EAGER_LAYER_HOST_MS
    # vLLM-Ascend keeps its own per-layer graph-mode host times
    vllm_npu = device_profile("vllm", vendor="huawei", device_name=A2)
    assert vllm_npu.layer_host_ms(decode_only=False) > 0.0


def test_echo_overrides_and_bounds() -> None:
    assert SGLANG.to_dict()["eager_layer_host_ms"] == SGLANG_EAGER_LAYER_HOST_MS
    # a zero on SGLang is what ran and is echoed; the engines that do not model it omit it
    assert SGLANG.with_overrides({"eager_layer_host_ms": 0.0}).to_dict()["eager_layer_host_ms"] == 0
    assert "eager_layer_host_ms" not in VLLM.to_dict()
    assert TRTLLM.with_overrides({"eager_layer_host_ms": 0.4}).eager_layer_host_ms == 0.4
    with pytest.raises(InvalidParameterError) as err:
        SGLANG.with_overrides({"eager_layer_host_ms": -1.0})
    assert err.value.field == "eager_layer_host_ms"
