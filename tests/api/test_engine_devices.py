"""An engine that does not run on the device (TensorRT-LLM on an Ascend NPU) is refused on
every operation that takes an engine, naming ``engine`` and the engines that do run there."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.profiles import engines_for_vendor
from tests.api.helpers import run
from tests.api.test_endpoints import problem

ASCEND = "ATLAS_800_A2_376T_64G"
SHAPE: dict[str, Any] = {
    "model": "Qwen/Qwen3-32B",
    "device": ASCEND,
    "engine": "trtllm",
    "input_length": 1024,
    "output_length": 64,
}
BODIES: dict[str, dict[str, Any]] = {
    "/v1/simulate": {**SHAPE, "tp_size": 2, "concurrency": 4},
    "/v1/optimize": {**SHAPE, "num_devices": 8, "ttft_limit_ms": 2000, "tpot_limit_ms": 50},
    "/v1/plan": {
        **SHAPE,
        "tp_size": 2,
        "request_rate": 2,
        "ttft_limit_ms": 2000,
        "tpot_limit_ms": 50,
    },
    "/v1/deploy": {
        "engine": "trtllm",
        "model": "Qwen/Qwen3-32B",
        "device": ASCEND,
        "num_devices": 8,
        "tp": 2,
        "dp": 4,
        "max_batched_tokens": 4096,
    },
}


@pytest.mark.parametrize("path", BODIES)
def test_trtllm_on_ascend_is_a_422_naming_engine_and_the_valid_ones(
    client: TestClient, path: str
) -> None:
    body = problem(client.post(path, json=BODIES[path]), 422)
    assert body["errors"][0]["loc"] == ["body", "engine"]
    assert "trtllm" in body["detail"] and ASCEND in body["detail"]
    valid = engines_for_vendor("huawei")
    assert "trtllm" not in valid
    assert all(name in body["detail"] for name in valid)


def test_the_engines_that_run_there_are_answered(client: TestClient) -> None:
    request = BODIES["/v1/simulate"]
    for engine in engines_for_vendor("huawei"):
        response = client.post("/v1/simulate", json={**request, "engine": engine})
        assert response.status_code == 200, response.text


def test_a_disaggregated_decode_device_is_checked_too(client: TestClient) -> None:
    request = {
        **{k: v for k, v in BODIES["/v1/simulate"].items() if k != "tp_size"},
        "prefill_workers": 1,
        "prefill_tp_size": 2,
        "decode_workers": 1,
        "decode_tp_size": 2,
        "device": "NVIDIA_H100_SXM_80G",
        "mode": "disagg",
        "decode_device": ASCEND,
        "pool_link": {"bandwidth_gb_s": 50, "fixed_ms": 0.1},
    }
    response = client.post("/v1/simulate", json=request)
    assert problem(response, 422)["errors"][0]["loc"] == ["body", "engine"]


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "Qwen/Qwen3-32B", "--tp-size", "2", "--concurrency", "4"],
        ["optimize", "Qwen/Qwen3-32B", "--num-devices", "8"],
    ],
)
def test_cli_exits_2_with_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--device", ASCEND, "--engine", "trtllm", "--input-length", "1024"]
    code, _, err = run([*argv, *common, "--output-length", "64"], capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "trtllm" in err and "engine" in err
