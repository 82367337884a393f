"""A memory-infeasible answer names the binding constraint with its numbers and the ways out."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.helpers import run

#: The RFC's own example (msmodeling quantizes to W8A8 by default; Chunkwise keeps 16 bits).
RFC_EXAMPLE = {
    "model": "Qwen/Qwen3-32B",
    "device": "TEST_DEVICE",
    "num_devices": 1,
    "input_length": 32768,
    "output_length": 1024,
    "tpot_limit_ms": 50,
    "max_batched_tokens": 8192,
}


def test_weights_that_do_not_fit_are_named_with_the_ways_out(client: TestClient) -> None:
    """The checkpoint's own 16-bit weights do not fit: the answer says so with its numbers and
    the ways out, under any engine. msmodeling's own default (W8A8_DYNAMIC) fits."""
    sixteen_bit = {**RFC_EXAMPLE, "quantize_linear_action": "DISABLED"}
    for body_in in ({**sixteen_bit, "engine": "msmodeling"}, {**RFC_EXAMPLE, "engine": "vllm"}):
        body = client.post("/v1/optimize", json=body_in).json()
        assert body["best"] is None
        assert "65.5 GB of 16-bit weights per device against" in body["reason"], body["reason"]
        text = " | ".join(body["suggestions"])
        assert "W8A8_DYNAMIC" in text and "at least 2 devices" in text
    default = client.post("/v1/optimize", json={**RFC_EXAMPLE, "engine": "msmodeling"}).json()
    assert default["input"]["quantize_linear_action"] == "W8A8_DYNAMIC"
    assert default["best"] is not None and default["suggestions"] == []


def test_a_burst_that_does_not_fit_names_its_kv_cache(client: TestClient) -> None:
    body = client.post(
        "/v1/simulate",
        json={
            "engine": "msmodeling",
            "model": "Qwen/Qwen3-32B",
            "device": "NVIDIA_H100_SXM_80G",
            "input_length": 32768,
            "output_length": 1024,
            "concurrency": 64,
            "tp_size": 2,
        },
    ).json()
    assert body["feasible"] is False
    assert body["reason"].startswith("memory: the KV cache of 64 requests (33,792 tokens each")
    assert "fewer requests in flight per replica (concurrency)" in body["suggestions"]
    assert any("FP8 KV cache" in s for s in body["suggestions"])


def test_the_cli_prints_the_suggestions(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["optimize", "Qwen/Qwen3-32B", "--device", "TEST_DEVICE", "--num-devices", "1"]
    argv += ["--input-length", "32768", "--output-length", "1024", "--tpot-limits", "50"]
    code, out, _ = run([*argv, "--max-batched-tokens", "8192"], capsys)  # vllm, 16-bit
    assert code == 0
    assert "of 16-bit weights per device" in out
    assert "suggestion: quantize the weights" in out
