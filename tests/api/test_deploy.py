"""POST /v1/deploy through the real ASGI app: a row's launch for each engine, and bad input."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from app.core.catalog import get_device
from app.core.deploy import ENGINE_CLIS, LAUNCH_ENGINES, TRTLLM_EXTRA_OPTIONS_FILE
from app.core.profiles import SGLANG
from tests.api.test_endpoints import OPTIMIZE, problem
from tests.unit.deploy.cli_parsing import parse_emitted

H100 = "NVIDIA_H100_SXM_80G"
ROW: dict[str, Any] = {
    "model": "Qwen/Qwen3-32B",
    "device": H100,
    "num_devices": 8,
    "tp": 2,
    "dp": 4,
    "ep": 1,
    "pp": 1,
    "max_batched_tokens": 4096,
    "batch_size": 48,
}


def _deploy(client: TestClient, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/deploy", json={**ROW, **body})
    assert response.status_code == 200, response.text
    out: dict[str, Any] = response.json()
    return out


@pytest.mark.parametrize("engine", LAUNCH_ENGINES)
def test_each_engine_launches_the_row(client: TestClient, engine: str) -> None:
    body = _deploy(client, engine=engine)
    assert body["engine"] == engine
    assert (body["replicas"], body["devices_per_replica"], body["num_devices"]) == (4, 2, 8)
    argv = body["command"]["argv"]
    parse_emitted(ENGINE_CLIS[engine], argv)  # documented options only
    assert "Qwen/Qwen3-32B" in argv
    assert "4096" in argv and "48" in argv  # the row's budget and batch size
    deployment, service, *rest = yaml.safe_load_all(body["kubernetes"])
    assert deployment["spec"]["replicas"] == 4
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert service["kind"] == "Service"
    compose = yaml.safe_load(body["compose"])
    (svc,) = compose["services"].values()
    assert svc["deploy"]["replicas"] == 4
    assert bool(rest) == (engine == "trtllm") == bool(body["files"])
    assert body["source"]


def test_sglang_gets_the_profiles_static_fraction(client: TestClient) -> None:
    body = _deploy(client, engine="sglang")
    h100 = get_device(H100)
    expected = SGLANG.static_fraction(h100.hbm_capacity_gb, h100.vendor, 2, 4)
    assert body["settings"]["--mem-fraction-static"] == f"{expected:g}"


def test_engine_options_and_quantization_reach_the_command(client: TestClient) -> None:
    body = _deploy(
        client,
        engine="vllm",
        engine_options={"memory_fraction": 0.8, "max_num_seqs": 32},
        quantize_linear_action="FP8",
        quantize_attention_action="FP8",
        num_mtp_tokens=1,
    )
    settings = body["settings"]
    assert settings["--gpu-memory-utilization"] == "0.8"
    assert settings["--max-num-seqs"] == "32"  # the profile cap is below the batch size
    assert settings["--kv-cache-dtype"] == "fp8"
    assert settings["--quantization"] == "fp8"
    assert "num_speculative_tokens" in settings["--speculative-config"]


def test_trtllm_fp8_checkpoint_keeps_an_fp8_kv_cache(client: TestClient) -> None:
    body = _deploy(client, engine="trtllm", quantize_linear_action="NVFP4")
    extra = yaml.safe_load(body["files"][TRTLLM_EXTRA_OPTIONS_FILE])
    assert extra["kv_cache_config"]["dtype"] == "fp8"  # the profile's rule for FP4 weights
    assert any("NVFP4" in note for note in body["notes"])


def test_moe_experts_over_dp_ranks_are_one_instance(client: TestClient) -> None:
    body = _deploy(
        client,
        engine="sglang",
        model="deepseek-ai/DeepSeek-V3",
        tp=1,
        dp=8,
        ep=8,
        batch_size=None,
        concurrency=256,
    )
    assert (body["replicas"], body["devices_per_replica"]) == (1, 8)
    settings = body["settings"]
    assert settings["--enable-dp-attention"] == "true"
    assert settings["--max-running-requests"] == "256"  # 32 per rank x 8 ranks


def test_an_optimize_row_deploys_as_returned(client: TestClient) -> None:
    optimized = client.post("/v1/optimize", json={**OPTIMIZE, "include_probes": False})
    assert optimized.status_code == 200, optimized.text
    row = optimized.json()["best"]
    keys = ("device", "num_devices", "tp", "dp", "ep", "pp", "max_batched_tokens", "batch_size")
    body = _deploy(client, engine="vllm", model=OPTIMIZE["model"], **{k: row[k] for k in keys})
    assert body["replicas"] * body["devices_per_replica"] == row["num_devices"]


def test_unknown_engine_is_a_422_naming_the_valid_ones(client: TestClient) -> None:
    body = problem(client.post("/v1/deploy", json={**ROW, "engine": "tgi"}), 422)
    assert body["errors"][0]["loc"] == ["body", "engine"]
    assert all(f"'{name}'" in body["detail"] for name in LAUNCH_ENGINES)
    body = problem(client.post("/v1/deploy", json={**ROW, "engine": "msmodeling"}), 422)
    assert body["errors"][0]["loc"] == ["body", "engine"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"num_devices": 7}, "num_devices"),
        ({"tp": 0}, "tp"),
        ({"port": 70000}, "port"),
        ({"engine_options": {"memory_fraction": 2}}, "memory_fraction"),
        ({"quantize_linear_action": "W2"}, "quantize_linear_action"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_bad_rows_are_422_naming_the_field(
    client: TestClient, change: dict[str, Any], field: str
) -> None:
    body = problem(client.post("/v1/deploy", json={**ROW, "engine": "vllm", **change}), 422)
    assert field in body["detail"] or any(field in e["loc"] for e in body.get("errors", []))


def test_unknown_device_is_a_422(client: TestClient) -> None:
    body = problem(client.post("/v1/deploy", json={**ROW, "engine": "vllm", "device": "X"}), 422)
    assert "NVIDIA_H100_SXM_80G" in body["valid"]


@pytest.mark.parametrize("engine", LAUNCH_ENGINES)
def test_get_is_the_post_as_a_link(client: TestClient, engine: str) -> None:
    """GET /v1/deploy?... answers exactly what the POST of the same fields answers."""
    linked = client.get("/v1/deploy", params={**ROW, "engine": engine})
    assert linked.status_code == 200, linked.text
    assert linked.json() == _deploy(client, engine=engine)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"num_devices": "eight"}, "num_devices"),
        ({"num_devices": 7}, "num_devices"),
        ({"tp": 0}, "tp"),
        ({"engine": "tgi"}, "engine"),
        ({"engine_options": "{}"}, "engine_options"),  # a JSON object: POST only
        ({"surprise": 1}, "surprise"),
    ],
)
def test_get_bad_queries_are_422_naming_the_field(
    client: TestClient, change: dict[str, Any], field: str
) -> None:
    body = problem(client.get("/v1/deploy", params={**ROW, "engine": "vllm", **change}), 422)
    assert field in body["detail"] or any(field in e["loc"] for e in body.get("errors", []))


ASCEND_A3 = "ATLAS_800_A3_752T_128G_DIE"


@pytest.mark.parametrize(("engine", "quantization"), [("vllm", "ascend"), ("sglang", "modelslim")])
def test_an_ascend_row_launches_the_npu_engine(
    client: TestClient, engine: str, quantization: str
) -> None:
    body = _deploy(client, engine=engine, device=ASCEND_A3, quantize_linear_action="W8A8_DYNAMIC")
    argv = body["command"]["argv"]
    parse_emitted(ENGINE_CLIS[engine], argv)
    assert argv[argv.index("--quantization") + 1] == quantization
    deployment = next(iter(yaml.safe_load_all(body["kubernetes"])))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"].startswith("quay.io/ascend/")
    assert container["resources"]["limits"] == {"huawei.com/Ascend910": 2}
    assert "nvidia" not in body["kubernetes"] + body["compose"]


def test_an_ascend_graph_mode_reaches_vllm_ascends_compilation_config(
    client: TestClient,
) -> None:
    """The graph mode the estimate ran with is launched (vLLM-Ascend's ``cudagraph_mode``);
    without one the image's default runs (no flag)."""
    body = _deploy(
        client,
        engine="vllm",
        device=ASCEND_A3,
        engine_options={"npu_graph_mode": "full_decode_only", "overlap_scheduling": True},
    )
    argv = body["command"]["argv"]
    parse_emitted(ENGINE_CLIS["vllm"], argv)
    assert argv[argv.index("--compilation-config") + 1] == '{"cudagraph_mode":"FULL_DECODE_ONLY"}'
    assert "--async-scheduling" in argv
    plain = _deploy(client, engine="vllm", device=ASCEND_A3)["command"]["argv"]
    assert "--compilation-config" not in plain
    eager = _deploy(
        client, engine="vllm", device=ASCEND_A3, engine_options={"npu_graph_mode": "eager"}
    )["command"]["argv"]
    parse_emitted(ENGINE_CLIS["vllm"], eager)
    assert "--enforce-eager" in eager and "--compilation-config" not in eager


def test_an_npu_graph_mode_on_a_gpu_deploy_is_a_422_naming_it(client: TestClient) -> None:
    response = client.post(
        "/v1/deploy",
        json={**ROW, "engine": "vllm", "engine_options": {"npu_graph_mode": "piecewise"}},
    )
    assert "npu_graph_mode" in problem(response, 422)["detail"]


def test_a_model_named_like_an_option_is_a_422(client: TestClient) -> None:
    response = client.post(
        "/v1/deploy", json={**ROW, "engine": "vllm", "model": "--trust-remote-code"}
    )
    assert problem(response, 422)["errors"][0]["loc"] == ["body", "model"]


def test_kubernetes_names_start_with_a_letter(client: TestClient) -> None:
    body = _deploy(client, engine="vllm", model="01-ai/Yi-34B")
    for document in yaml.safe_load_all(body["kubernetes"]):
        assert document["metadata"]["name"][0].isalpha()
