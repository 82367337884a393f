"""Engine profiles: defaults by device, overrides, and the mechanisms they drive."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from app.core.catalog import device_names, get_device, get_model, parse_quantization
from app.core.cost import ForwardShape
from app.core.errors import InvalidParameterError, UnknownEngineError
from app.core.parallel import ParallelLayout
from app.core.profiles import (
    MSMODELING,
    PROFILES,
    SGLANG,
    TRTLLM,
    VLLM,
    EngineProfile,
    get_profile,
)
from app.core.runner import ModelRunner, RunnerServingModel
from app.core.runner.serving import (
    SERVING_KERNEL_DEVICES,
    engine_quantization,
    engine_runner,
)
from app.core.scheduler import DecodeFirstWithSlack, VllmScheduler

GIB = 2**30 / 1e9  # GB per GiB
H100 = "NVIDIA_H100_SXM_80G"
B200 = "NVIDIA_B200_SXM_180G"
A2 = "ATLAS_800_A2_376T_64G"
QWEN = "Qwen/Qwen3-32B"


def test_names_and_unknown_engine() -> None:
    assert tuple(PROFILES) == ("vllm", "sglang", "trtllm", "msmodeling")
    assert get_profile("trtllm") is TRTLLM
    with pytest.raises(UnknownEngineError) as err:
        get_profile("tgi")
    assert "vllm" in str(err.value) and "msmodeling" in str(err.value)


def test_vllm_budget_and_cap_follow_device_memory() -> None:
    assert VLLM.token_budget(80 * GIB, H100, "nvidia") == 8192
    assert VLLM.running_cap(80 * GIB, H100) == 1024
    assert VLLM.token_budget(80 * GIB, "NVIDIA_A100_SXM_80G", "nvidia") == 2048
    assert VLLM.running_cap(64 * GIB, A2) == 256
    # msmodeling keeps the budget rule the RFC examples were written with, and no cap.
    assert MSMODELING.token_budget(80 * GIB, H100, "nvidia") == 8192
    assert MSMODELING.running_cap(80 * GIB, H100) is None


def test_sglang_defaults_by_memory_table() -> None:
    assert SGLANG.token_budget(80 * GIB, H100, "nvidia") == 8192
    assert SGLANG.token_budget(180.0, B200, "nvidia") == 16384
    # SGLang's NPU backend (set_default_server_args): <= 32 GiB 4096, <= 64 GiB 8192 tokens.
    assert SGLANG.token_budget(32 * GIB, A2, "huawei") == 4096
    assert SGLANG.token_budget(64 * GIB - 1e-6, A2, "huawei") == 8192
    assert SGLANG.token_budget(get_device(A2).hbm_capacity_gb, A2, get_device(A2).vendor) == 8192
    assert SGLANG.graph_max_batch(get_device(A2).hbm_capacity_gb, "huawei", tp=2) == 64
    assert SGLANG.graph_max_batch(get_device(A2).hbm_capacity_gb, "huawei", tp=4) == 256
    # A larger NPU (Atlas 350, 112 GiB) takes SGLang's GPU table (< 160 GiB: 8192).
    assert SGLANG.token_budget(112 * GIB, "ATLAS_350_425T_112G", "huawei") == 8192
    assert SGLANG.graph_max_batch(80 * GIB, "nvidia", tp=2) == 256
    assert SGLANG.graph_max_batch(80 * GIB, "nvidia", tp=8) == 512
    assert SGLANG.running_cap(80 * GIB, H100) is None  # the KV pool decides


def test_sglang_static_fraction_on_an_npu() -> None:
    # A 64 GiB Atlas die, TP 1 with DP attention over 16 ranks (graph max_bs 64):
    # 512 + 8192 * 1.5 + 64 * 2 + 1 / 8 * 1024 + 64 * 16 * 3 = 16,128 MiB, over the 10 GiB floor.
    a3 = get_device("ATLAS_800_A3_752T_128G_DIE")
    static = SGLANG.static_fraction(a3.hbm_capacity_gb, a3.vendor, 1, 16)
    assert static == round(1 - 16128 / 65536, 3)
    # TP 2 without DP attention: 512 + 12288 + 128 + 256 = 13,184 MiB.
    assert SGLANG.static_fraction(a3.hbm_capacity_gb, a3.vendor, 2, 1) == round(
        1 - 13184 / 65536, 3
    )


def test_sglang_static_fraction_known_answers() -> None:
    # 80 GiB, TP 8: 512 + 8192 * 1.5 + 512 * 2 + 8 / 8 * 1024 = 14,848 MiB reserved.
    assert SGLANG.static_fraction(80 * GIB, "nvidia", 8, 1) == round(1 - 14848 / 81920, 3)
    # B200 180 GB (167.6 GiB), TP 8: 512 + 16384 * 1.5 + 512 * 2 + 1024 = 27,136 MiB.
    memory_mib = 180e9 / 2**20
    assert SGLANG.static_fraction(180.0, "nvidia", 8, 1) == round(
        (memory_mib - 27136) / memory_mib, 3
    )
    # A small TP on an 80 GiB device: the reserve is at least 10 GiB.
    tp1 = SGLANG.static_fraction(80 * GIB, "nvidia", 1, 1)
    assert tp1 == round(1 - max(512 + 12288 + 512 + 128, 10240) / 81920, 3)
    # DP attention reserves graph memory per rank.
    assert SGLANG.static_fraction(80 * GIB, "nvidia", 8, 8) < SGLANG.static_fraction(
        80 * GIB, "nvidia", 8, 1
    )


def test_reserves_per_pool_rule() -> None:
    assert MSMODELING.reserved_memory_gb(80.0, "nvidia", 1, 1) == 10.0
    assert VLLM.reserved_memory_gb(100.0, "nvidia", 1, 1) == pytest.approx(10.0 + 3.0)
    assert TRTLLM.reserved_memory_gb(100.0, "nvidia", 1, 1) == 3.0
    static = SGLANG.static_fraction(100.0, "nvidia", 4, 1)
    assert SGLANG.reserved_memory_gb(100.0, "nvidia", 4, 1) == pytest.approx((1 - static) * 100.0)
    assert TRTLLM.kv_pool_fraction() == 0.9 and VLLM.kv_pool_fraction() == 1.0


def test_overrides_are_checked() -> None:
    changed = VLLM.with_overrides({"max_num_seqs": 64, "step_host_ms": 2.0})
    assert changed.max_num_seqs == 64 and changed.step_host_ms == 2.0
    assert changed.running_cap(80 * GIB, H100) == 64
    assert VLLM.with_overrides({}) is VLLM
    with pytest.raises(InvalidParameterError, match="engine_options"):
        VLLM.with_overrides({"gpu_util": 0.5})
    with pytest.raises(InvalidParameterError, match="memory_fraction"):
        VLLM.with_overrides({"memory_fraction": 1.5})
    with pytest.raises(InvalidParameterError, match="kv_cache_dtype"):
        VLLM.with_overrides({"kv_cache_dtype": "int4"})


def test_scheduler_of_a_profile() -> None:
    vllm = VLLM.scheduler_for(80 * GIB, H100)
    assert isinstance(vllm, VllmScheduler) and vllm.max_running == 1024
    assert isinstance(TRTLLM.scheduler_for(80 * GIB, H100), DecodeFirstWithSlack)


def test_kv_dtype_rule() -> None:
    fp8 = parse_quantization("FP8")
    assert engine_quantization(TRTLLM, fp8) == parse_quantization("FP8", "FP8")
    assert engine_quantization(VLLM, fp8) == fp8
    assert engine_quantization(TRTLLM, parse_quantization()) == parse_quantization()
    int8_kv = parse_quantization("FP8", "INT8")
    assert engine_quantization(TRTLLM, int8_kv) == int8_kv


def _serving(profile: EngineProfile, **changes: Any) -> RunnerServingModel:
    prof = dataclasses.replace(profile, **changes)
    runner = ModelRunner(get_model(QWEN), get_device(H100), ParallelLayout(tp=2))
    return RunnerServingModel(runner, profile=prof)


def test_host_time_exposed_hidden_and_synced() -> None:
    bare = RunnerServingModel(ModelRunner(get_model(QWEN), get_device(H100), ParallelLayout(tp=2)))
    gpu_ms = bare.decode_ms(32, 1, 2048)
    exposed = _serving(VLLM, step_host_ms=1.5, overlap_scheduling=False)
    assert exposed.decode_ms(32, 1, 2048) == pytest.approx(gpu_ms + 1.5)
    hidden = _serving(VLLM, step_host_ms=1.5, overlap_scheduling=True)
    assert hidden.decode_ms(32, 1, 2048) == pytest.approx(gpu_ms)
    longer = _serving(VLLM, step_host_ms=gpu_ms + 4.0, overlap_scheduling=True)
    assert longer.decode_ms(32, 1, 2048) == pytest.approx(gpu_ms + 4.0)
    synced = _serving(TRTLLM, step_sync_ms=0.75, step_host_ms=0.0)
    assert synced.decode_ms(32, 1, 2048) == pytest.approx(gpu_ms + 0.75)
    # The host time is part of the cache identity.
    assert exposed.identity() != hidden.identity() != bare.identity()


def test_kv_pool_rules_order_capacity() -> None:
    device = get_device(H100)
    model, layout = get_model(QWEN), ParallelLayout(tp=2)

    def capacity(profile: EngineProfile) -> int:
        runner = engine_runner(profile, model, device, layout, parse_quantization())
        serving = RunnerServingModel(runner, profile=profile)
        return serving.kv_capacity_requests(4096 + 1024, 8192)

    trt, vllm, ms = capacity(TRTLLM), capacity(VLLM), capacity(MSMODELING)
    assert min(trt, vllm, ms) > 0
    # vLLM: 0.9 x memory - 3 GB - weights - activations, in whole requests.
    runner = engine_runner(VLLM, model, device, layout, parse_quantization())
    peak = runner.memory(ForwardShape(is_decode=False, concurrency=1, query_len=8192, seq_len=8192))
    pool_gb = 0.9 * device.hbm_capacity_gb - 3.0 - peak.weights_gb - peak.activation_gb
    per_request_gb = runner.kv_cache_bytes(1, 5120) / 1e9
    assert vllm == int(pool_gb / per_request_gb)
    # msmodeling: a 10 GB reserve instead.
    assert ms == int((pool_gb + 3.0 - 10.0 + 0.1 * device.hbm_capacity_gb) / per_request_gb)
    plain = RunnerServingModel(engine_runner(TRTLLM, model, device, layout, parse_quantization()))
    assert trt == pytest.approx(0.9 * plain.kv_capacity_requests(5120, 8192), abs=1)


def test_graph_limit_makes_large_decode_batches_eager() -> None:
    model, device = get_model(QWEN), get_device(H100)
    shape = ForwardShape(is_decode=True, concurrency=64, query_len=1, seq_len=2048)
    graphs = ModelRunner(model, device, ParallelLayout(tp=2))
    limited = ModelRunner(model, device, ParallelLayout(tp=2), decode_graph_max_batch=32)
    captured = ModelRunner(model, device, ParallelLayout(tp=2), decode_graph_max_batch=64)
    assert limited.run_inference(shape).latency_ms > graphs.run_inference(shape).latency_ms
    assert captured.run_inference(shape).latency_ms == graphs.run_inference(shape).latency_ms
    assert limited.identity() != graphs.identity()


def test_engines_per_vendor() -> None:
    from app.core.errors import InvalidParameterError
    from app.core.profiles import PROFILES, device_profile, engines_for_vendor

    assert engines_for_vendor("nvidia") == tuple(PROFILES)
    for vendor in ("huawei", "amd"):
        assert "trtllm" not in engines_for_vendor(vendor)
        with pytest.raises(InvalidParameterError) as err:
            device_profile("trtllm", vendor=vendor, device_name="X")
        assert err.value.field == "engine" and "vllm" in err.value.allowed
    assert device_profile("vllm", vendor="huawei", device_name="X").name == "vllm"


def _npu_serving(profile: EngineProfile, model: str = QWEN, tp: int = 4) -> RunnerServingModel:
    device = get_device(A2)
    arch = get_model(model)
    runner = engine_runner(profile, arch, device, ParallelLayout(tp=tp), parse_quantization())
    return RunnerServingModel(runner, profile=profile)


def test_vllm_on_an_npu_runs_vllm_ascends_default_graph_mode() -> None:
    from app.core.profiles import VLLM_ASCEND_GRAPH_MODE, device_profile

    npu = device_profile("vllm", vendor="huawei", device_name=A2)
    assert npu.npu_graph_mode == VLLM_ASCEND_GRAPH_MODE == "full_and_piecewise"
    assert device_profile("vllm", vendor="nvidia", device_name=H100).npu_graph_mode is None
    assert device_profile("sglang", vendor="huawei", device_name=A2).npu_graph_mode is None


@pytest.mark.parametrize("layers_model", ["Qwen/Qwen3-32B", "Qwen/Qwen3-8B"])
def test_npu_host_time_is_per_layer_and_per_graph_mode(layers_model: str) -> None:
    """A decode step in a full ACL graph pays each layer's attention update on the host, a
    step in graph pieces each layer's eager attention: the step grows by layers x the
    per-layer host time over the same forward without it (no overlap: async scheduling off)."""
    from app.core.profiles import (
        NPU_FULL_GRAPH_LAYER_HOST_MS,
        NPU_PIECEWISE_LAYER_HOST_MS,
        device_profile,
    )

    layers = get_model(layers_model).num_layers
    npu = device_profile("vllm", vendor="huawei", device_name=A2)
    plain = _npu_serving(dataclasses.replace(npu, npu_graph_mode=None), layers_model)
    full = _npu_serving(npu, layers_model)
    piecewise = _npu_serving(npu.with_overrides({"npu_graph_mode": "piecewise"}), layers_model)
    base = plain.decode_ms(8, 1, 2048)
    assert full.decode_ms(8, 1, 2048) - base == pytest.approx(layers * NPU_FULL_GRAPH_LAYER_HOST_MS)
    assert piecewise.decode_ms(8, 1, 2048) - base == pytest.approx(
        layers * NPU_PIECEWISE_LAYER_HOST_MS
    )
    # a step with a prefill runs in graph pieces in every mode
    assert full.prefill_ms(1, 512, 512) - plain.prefill_ms(1, 512, 512) == pytest.approx(
        layers * NPU_PIECEWISE_LAYER_HOST_MS
    )
    assert full.identity() != piecewise.identity() != plain.identity()


def test_async_scheduling_hides_the_npu_host_time_behind_the_forward() -> None:
    from app.core.profiles import device_profile

    npu = device_profile("vllm", vendor="huawei", device_name=A2)
    plain = _npu_serving(dataclasses.replace(npu, npu_graph_mode=None, step_host_ms=0.0))
    overlapped = _npu_serving(npu.with_overrides({"overlap_scheduling": True}))
    forward = plain.decode_ms(8, 1, 2048)
    assert forward > 64 * 0.18 + npu.step_host_ms  # the host fits inside the forward
    assert overlapped.decode_ms(8, 1, 2048) == pytest.approx(forward)


def test_an_unknown_graph_mode_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidParameterError) as err:
        VLLM.with_overrides({"npu_graph_mode": "torchair"})
    assert err.value.field == "npu_graph_mode"


@pytest.mark.parametrize(
    ("profile", "device", "fitted"),
    [
        (VLLM, B200, "vllm"),
        (VLLM, "NVIDIA_B300_SXM_288G", "vllm"),
        (VLLM, "NVIDIA_GB200_186G", "vllm"),
        (VLLM, H100, "vllm"),
        (VLLM, "NVIDIA_H200_SXM_141G", "vllm"),
        (VLLM, "NVIDIA_L40S_48G", None),
        (TRTLLM, H100, "trtllm"),
        (TRTLLM, B200, "trtllm"),
    ],
)
def test_measured_kernels_price_vllm_on_its_sm100_family_and_hopper_only(
    profile: EngineProfile, device: str, fitted: str | None
) -> None:
    """vLLM's fitted curves price its forwards on B200 / B300 / GB200 / GB300 and H100 / H200
    (the kernels its recipes run there are the measured ones), the defaults elsewhere;
    TensorRT-LLM everywhere."""
    runner = engine_runner(
        profile, get_model(QWEN), get_device(device), ParallelLayout(tp=2), parse_quantization()
    )
    assert runner.kernel_engine == fitted
    assert set(device_names()) >= SERVING_KERNEL_DEVICES["vllm"]  # catalog names, no typo
