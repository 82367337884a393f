"""Every built-in model runs a prefill and a decode forward on every device family."""

from __future__ import annotations

import math

import pytest

from app.core.catalog import get_device, get_model, model_names, parse_quantization
from app.core.cost import ForwardShape
from app.core.parallel import ParallelLayout
from app.core.runner import ModelRunner

DEVICES = [
    "TEST_DEVICE",
    "ATLAS_800_A3_752T_128G_DIE",
    "NVIDIA_H200_SXM_141G",
    "NVIDIA_B200_SXM_180G",
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", model_names())
def test_prefill_and_decode_run(name: str, device: str) -> None:
    model = get_model(name)
    runner = ModelRunner(
        model,
        get_device(device),
        ParallelLayout(tp=8 if model.num_heads % 8 == 0 else 1),
        parse_quantization("W8A8_DYNAMIC" if device.startswith("ATLAS") else "FP8"),
    )
    for decode, query in ((False, 1000), (True, 1)):
        result = runner.run_inference(
            ForwardShape(is_decode=decode, concurrency=8, query_len=query, seq_len=4000)
        )
        assert math.isfinite(result.latency_ms) and result.latency_ms > 0
        assert result.memory.weights_gb > 0 and result.memory.kv_cache_gb > 0
        assert sum(c.time_ms for c in result.breakdown.categories) == pytest.approx(
            result.latency_ms
        )
