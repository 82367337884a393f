"""``engine: sglang`` / ``vllm`` on an Ascend device run the engine's NPU rules: SGLang's NPU
backend defaults (8192-token chunk, decode graphs up to 64 / 256 requests) feed its reserve
formula, so configurations published as run on SGLang-Ascend fit and do not queue for KV that
is not missing; the echo names the NPU build."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.catalog.devices import DEVICES
from app.core.profiles import NPU_GRAPH_MODES, engines_for_vendor
from tests.api.helpers import run

A3 = "ATLAS_800_A3_752T_128G_DIE"
COMMON = ["--device", A3, "--quantize-linear-action", "W8A8_DYNAMIC", "--workload"]
COMMON += ["closed_loop", "--engine", "sglang", "--format", "json"]
QWEN3_235B_DP16 = [
    "simulate",
    "Qwen/Qwen3-235B-A22B",
    *["--num-devices", "16", "--tp-size", "1", "--dp-size", "16", "--ep-size", "16"],
    *["--concurrency", "256", "--input-length", "2048", "--output-length", "2048"],
]
QWEN3_30B_TP2 = [
    "simulate",
    "Qwen/Qwen3-30B-A3B",
    *["--num-devices", "2", "--tp-size", "2", "--ep-size", "2"],
    *["--concurrency", "156", "--input-length", "3500", "--output-length", "1500"],
]


@pytest.mark.parametrize("argv", [QWEN3_235B_DP16, QWEN3_30B_TP2], ids=["235b-dp16", "30b-tp2"])
def test_published_sglang_ascend_layouts_fit_and_answer_in_seconds(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run([*argv, *COMMON], capsys)
    assert code == 0, err
    body = json.loads(out)
    assert body["feasible"] is True, body["reason"]
    assert body["input"]["max_batched_tokens"] == 8192  # SGLang's NPU chunk, not 32,768
    assert "Ascend NPU" in body["engine"]["description"]
    # SGLang-Ascend's own Qwen3-32B TP4 run at 78 clients of 3500 tokens reads 5.8 s TTFT;
    # a TTFT of minutes would be requests queueing for KV blocks the device has.
    assert 0 < body["ttft_ms"] < 30_000
    assert 10 < body["tpot_ms"] < 200


ASCEND_DEVICES = sorted(name for name, d in DEVICES.items() if d.vendor == "huawei")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    device=st.sampled_from(ASCEND_DEVICES),
    engine=st.sampled_from(engines_for_vendor("huawei")),
    model=st.sampled_from(["Qwen/Qwen3-8B", "Qwen/Qwen3-30B-A3B"]),
    tp=st.sampled_from([1, 2, 4]),
    dp=st.sampled_from([1, 2]),
    expert_parallel=st.booleans(),
    graph_mode=st.sampled_from([None, *NPU_GRAPH_MODES]),
    overlap=st.booleans(),
    concurrency=st.integers(min_value=1, max_value=64),
)
def test_no_ascend_answer_puts_its_point_outside_its_interval(
    client: TestClient,
    device: str,
    engine: str,
    model: str,
    tp: int,
    dp: int,
    expert_parallel: bool,
    graph_mode: str | None,
    overlap: bool,
    concurrency: int,
) -> None:
    """Over the Ascend devices, the engines that run there, dense and MoE models, TP x DP
    layouts with and without expert parallelism, vLLM-Ascend's graph modes and async
    scheduling: every feasible answer's TTFT and TPOT lie inside their own 80 % intervals."""
    body: dict[str, object] = {
        "model": model,
        "device": device,
        "engine": engine,
        "tp_size": tp,
        "dp_size": dp,
        "num_devices": tp * dp,
        "concurrency": max(concurrency, dp),
        "input_length": 1024,
        "output_length": 64,
        "requests_per_client": 1,
        "ttft_limit_ms": 2000,
        "tpot_limit_ms": 50,
    }
    if expert_parallel and model.endswith("A3B"):
        body["ep_size"] = tp * dp
    options: dict[str, object] = {}
    if engine != "msmodeling":
        options["overlap_scheduling"] = overlap
    if graph_mode is not None and engine == "vllm":
        options["npu_graph_mode"] = graph_mode
    if options:
        body["engine_options"] = options
    response = client.post("/v1/simulate", json=body)
    assert response.status_code == 200, response.text
    out = response.json()
    if not out["feasible"]:
        return
    for key in ("ttft_ms", "tpot_ms"):
        low, high = out[f"{key}_interval"]
        assert low <= out[key] * (1 + 1e-9) and out[key] <= high * (1 + 1e-9), (key, out)
    assert 0.0 <= out["sla_confidence"] <= 1.0


@pytest.mark.parametrize(
    ("device", "engine", "mode"),
    [
        ("NVIDIA_H100_SXM_80G", "vllm", "piecewise"),  # not an NPU
        (A3, "sglang", "piecewise"),  # SGLang's NPU graphs have no such setting
        (A3, "vllm", "torchair"),  # not one of vLLM-Ascend's modes
    ],
)
def test_an_npu_graph_mode_outside_its_documented_range_is_a_422_naming_it(
    client: TestClient, device: str, engine: str, mode: str
) -> None:
    body = {
        "model": "Qwen/Qwen3-8B",
        "device": device,
        "engine": engine,
        "concurrency": 4,
        "input_length": 512,
        "output_length": 64,
        "engine_options": {"npu_graph_mode": mode},
    }
    response = client.post("/v1/simulate", json=body)
    assert response.status_code == 422, response.text
    problem = response.json()
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "npu_graph_mode" in json.dumps(problem)


def test_the_graph_mode_moves_vllm_ascend_tpot_by_the_per_layer_host_time(
    client: TestClient,
) -> None:
    """Qwen3-32B (64 layers) at one client: the PIECEWISE default of v0.11-v0.20 reads
    64 x (0.28 - 0.18) ms per token above the full-graph decode of the current default."""
    body = {
        "model": "Qwen/Qwen3-32B",
        "device": "ATLAS_800_A2_313T_64G",
        "engine": "vllm",
        "tp_size": 4,
        "num_devices": 4,
        "concurrency": 1,
        "input_length": 512,
        "output_length": 256,
        "requests_per_client": 1,
    }
    tpot = {}
    for mode in ("full_and_piecewise", "piecewise"):
        out = client.post(
            "/v1/simulate", json={**body, "engine_options": {"npu_graph_mode": mode}}
        ).json()
        assert out["engine"]["npu_graph_mode"] == mode
        tpot[mode] = out["tpot_ms"]
    assert tpot["piecewise"] - tpot["full_and_piecewise"] == pytest.approx(64 * 0.10, rel=0.02)
