"""The serving-level validator: loading the measured cases and predicting them."""

from __future__ import annotations

import math

import pytest

from app.core.cost import ForwardShape
from app.core.validation import (
    SERVING_TPOT_KIND,
    SERVING_TTFT_KIND,
    load_agg_serving_cases,
    run_validation,
)
from app.core.validation.predict import engine_family


def test_every_measured_row_gives_a_ttft_and_a_tpot_case() -> None:
    cases = load_agg_serving_cases()
    assert len(cases) == 2 * 758
    assert {c.kind for c in cases} == {SERVING_TTFT_KIND, SERVING_TPOT_KIND}
    assert {c.device for c in cases} == {
        "NVIDIA_H100_SXM_80G",
        "NVIDIA_H200_SXM_141G",
        "NVIDIA_B200_SXM_180G",
    }
    # Checkpoint formats; the KV-cache dtype is the engine profile's rule.
    assert {c.precision for c in cases} == {"FP8", "NVFP4", "BF16"}
    assert {engine_family(c.engine) for c in cases} == {"trtllm"}
    deepseek = [c for c in cases if c.model == "deepseek-ai/DeepSeek-R1" and c.dp == 8]
    assert deepseek and all(c.ep == 8 for c in deepseek)
    for case in cases:
        assert case.group == f"{case.device} | {case.engine} | {case.model}"
        assert case.output_len >= 1 and case.concurrency >= 1


def test_unrecorded_precision_can_be_read_as_fp8() -> None:
    cases = load_agg_serving_cases(unrecorded_precision="FP8")
    llama = {c.precision for c in cases if c.model == "meta-llama/Llama-3.1-8B-Instruct"}
    assert llama == {"FP8"}


def test_trtllm_rows_run_under_the_trtllm_profile() -> None:
    """The TensorRT-LLM profile: FP8 KV for an FP8 checkpoint, its runtime reserve, 0.9 of
    the free memory as the KV pool, its per-iteration sync."""
    from app.core.profiles import TRTLLM
    from app.core.validation import engine_serving_model

    serving = engine_serving_model(
        TRTLLM, "meta-llama/Llama-3.1-70B", "NVIDIA_H200_SXM_141G", 1, 1, 1, "FP8"
    )
    assert serving.runner.reserved_memory_gb == TRTLLM.runtime_memory_gb
    assert serving.runner.quantization.attention.value == "FP8"
    full = serving.kv_capacity_requests(9216, 8192, kv_memory_fraction=1.0)
    pool = serving.kv_capacity_requests(9216, 8192)
    assert 1 <= pool <= full
    assert pool == pytest.approx(full * TRTLLM.kv_pool_fraction(), abs=1)
    bare = serving.runner.run_inference(
        ForwardShape(is_decode=True, concurrency=8, query_len=1, seq_len=2048)
    ).latency_ms
    assert serving.decode_ms(8, 1, 2048) == pytest.approx(bare + TRTLLM.step_sync_ms)


def test_predictions_are_grouped_by_device_engine_and_model() -> None:
    cases = [c for c in load_agg_serving_cases() if c.concurrency in (4, 64)][:60]
    report = run_validation(cases=cases)
    assert all(math.isfinite(r.predicted) and r.predicted > 0 for r in report.results)
    assert {s.group for s in report.groups} == {c.group for c in cases}
    ttft = {r.case.name: r.predicted for r in report.results if r.case.kind == SERVING_TTFT_KIND}
    tpot = {r.case.name: r.predicted for r in report.results if r.case.kind == SERVING_TPOT_KIND}
    assert ttft.keys() == tpot.keys()
    assert "serving_tpot targets" in report.format_table()
