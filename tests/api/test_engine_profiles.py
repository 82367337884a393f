"""Engine profiles through the real app and the CLI: defaults, echo, overrides, bad input."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.profiles import PROFILES, VLLM_TOKENIZER_BATCH_WAIT_MS
from tests.api.helpers import run
from tests.api.test_endpoints import problem

H100 = "NVIDIA_H100_SXM_80G"
SIM: dict[str, Any] = {
    "model": "Qwen/Qwen3-32B",
    "device": H100,
    "quantize_linear_action": "FP8",
    "input_length": 2048,
    "output_length": 128,
    "concurrency": 16,
    "tp_size": 2,
    "requests_per_client": 2,
}


def test_the_default_is_a_vllm_closed_loop(client: TestClient) -> None:
    body = client.post("/v1/simulate", json=SIM).json()
    assert body["engine"]["name"] == "vllm"
    assert body["input"]["engine"] == "vllm" and body["input"]["workload"] == "closed_loop"
    assert body["workload"] == "closed_loop" and body["method"] == "closed_loop_simulation"
    assert body["scheduler"]["name"] == "vllm" and body["scheduler"]["max_num_seqs"] == 1024
    assert body["max_batched_tokens"] == 8192
    # Every value the profile set is echoed.
    assert set(body["engine"]) >= {"kv_pool", "step_host_ms", "cuda_graph_max_batch"}


def test_msmodeling_is_the_rfc_burst(client: TestClient) -> None:
    rfc = client.post("/v1/simulate", json={**SIM, "engine": "msmodeling"}).json()
    spelled = client.post(
        "/v1/simulate",
        json={
            **SIM,
            "engine": "msmodeling",
            "workload": "burst",
            "scheduler": {"name": "decode_first_with_slack"},
        },
    ).json()
    assert rfc["workload"] == "burst" and rfc["scheduler"]["name"] == "decode_first_with_slack"
    assert rfc["memory_gb"]["reserved_gb"] == 10.0
    assert (rfc["ttft_ms"], rfc["tpot_ms"]) == (spelled["ttft_ms"], spelled["tpot_ms"])


def test_workload_burst_under_another_engine_keeps_its_profile(client: TestClient) -> None:
    body = client.post("/v1/simulate", json={**SIM, "engine": "trtllm", "workload": "burst"})
    assert body.status_code == 200, body.text
    assert body.json()["engine"]["name"] == "trtllm" and body.json()["workload"] == "burst"


def test_unknown_engine_names_the_valid_ones(client: TestClient) -> None:
    body = problem(client.post("/v1/simulate", json={**SIM, "engine": "tgi"}), 422)
    assert body["errors"][0]["loc"] == ["body", "engine"]
    assert all(f"'{name}'" in body["detail"] for name in PROFILES)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"gpu_util": 0.5}, "gpu_util"),
        ({"memory_fraction": 1.5}, "memory_fraction"),
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"step_host_ms": -1}, "step_host_ms"),
        ({"kv_cache_dtype": "int4"}, "kv_cache_dtype"),
        ({"arrival_spread": 0.6}, "arrival_spread"),
        ({"client_turnaround": 0}, "client_turnaround"),
        ({"client_turnaround": "false"}, "client_turnaround"),
        ({"mxfp4_activation": "fp16"}, "mxfp4_activation"),
        ({"scheduler_recv_interval": 0}, "scheduler_recv_interval"),
        ({"scheduler_recv_interval": 1001}, "scheduler_recv_interval"),
        ({"scheduler_recv_interval": 2.5}, "scheduler_recv_interval"),
        ({"stream_interval": 0}, "stream_interval"),
        ({"stream_interval": 1001}, "stream_interval"),
        ({"stream_first_token": "never"}, "stream_first_token"),
        ({"redundant_experts": -1}, "redundant_experts"),
        ({"redundant_experts": 1025}, "redundant_experts"),
        ({"redundant_experts": 2.5}, "redundant_experts"),
    ],
)
def test_bad_engine_options_are_422(
    client: TestClient, options: dict[str, Any], field: str
) -> None:
    body = problem(client.post("/v1/simulate", json={**SIM, "engine_options": options}), 422)
    assert body["errors"][0]["loc"] == ["body", "engine_options", field]


def test_overrides_apply_and_are_echoed(client: TestClient) -> None:
    base = client.post("/v1/simulate", json=SIM).json()
    capped = client.post("/v1/simulate", json={**SIM, "engine_options": {"max_num_seqs": 4}}).json()
    assert capped["engine"]["max_num_seqs"] == 4 and capped["max_running"] == 4
    assert capped["ttft_ms"] > base["ttft_ms"]  # 16 clients queue for 4 slots
    front = client.post(
        "/v1/simulate", json={**SIM, "engine_options": {"request_frontend_ms": 50}}
    ).json()
    # The override replaces the vLLM profile's own per-request front end (its tokenizer's
    # micro-batching window, VLLM_TOKENIZER_BATCH_WAIT_MS).
    assert front["ttft_ms"] == pytest.approx(base["ttft_ms"] + 50 - VLLM_TOKENIZER_BATCH_WAIT_MS)
    assert front["tpot_ms"] == base["tpot_ms"]
    slower = client.post(
        "/v1/simulate", json={**SIM, "engine_options": {"step_host_ms": 5.0}}
    ).json()
    assert slower["tpot_ms"] == pytest.approx(base["tpot_ms"] + 5.0 - 0.8, rel=0.05)
    spread = client.post(
        "/v1/simulate", json={**SIM, "engine_options": {"arrival_spread": 0.25}}
    ).json()
    assert base["engine"]["arrival_spread"] == 0.0 and spread["engine"]["arrival_spread"] == 0.25
    assert spread["ttft_ms"] < base["ttft_ms"]  # the waves of 16 clients split
    lock_step = client.post(
        "/v1/simulate", json={**SIM, "engine_options": {"client_turnaround": False}}
    ).json()
    assert base["engine"]["client_turnaround"] is True
    assert lock_step["engine"]["client_turnaround"] is False
    # Re-submissions no longer wait for the step that began when they were sent.
    assert lock_step["ttft_ms"] < base["ttft_ms"]


def test_stream_and_recv_intervals_default_to_every_token_and_apply(client: TestClient) -> None:
    base = client.post("/v1/simulate", json=SIM).json()
    engine = base["engine"]
    assert (engine["scheduler_recv_interval"], engine["stream_interval"]) == (1, 1)
    assert engine["stream_first_token"] == "immediate"
    # The first chunk sent at once: the interval changes nothing a client measures.
    immediate = client.post(
        "/v1/simulate", json={**SIM, "engine_options": {"stream_interval": 30}}
    ).json()
    assert (immediate["ttft_ms"], immediate["tpot_ms"]) == (base["ttft_ms"], base["tpot_ms"])
    # The first chunk with the 30th token: 29 more decode steps before it, out of the TPOT.
    late = client.post(
        "/v1/simulate",
        json={**SIM, "engine_options": {"stream_interval": 30, "stream_first_token": "interval"}},
    ).json()
    assert late["engine"]["stream_first_token"] == "interval"
    assert late["ttft_ms"] == pytest.approx(base["ttft_ms"] + 29 * base["tpot_ms"])
    assert late["tpot_ms"] == pytest.approx(base["tpot_ms"] * (127 - 29) / 127)
    polled = client.post(
        "/v1/simulate", json={**SIM, "engine_options": {"scheduler_recv_interval": 10}}
    ).json()
    assert polled["engine"]["scheduler_recv_interval"] == 10
    assert polled["ttft_ms"] >= base["ttft_ms"]


def test_trtllm_keeps_an_fp8_kv_cache_unless_told(client: TestClient) -> None:
    vllm = client.post("/v1/simulate", json=SIM).json()
    trt = client.post("/v1/simulate", json={**SIM, "engine": "trtllm"}).json()
    assert trt["engine"]["kv_cache_dtype"] == "fp8"
    assert trt["max_running"] > vllm["max_running"]  # half the bytes per token
    told = client.post(
        "/v1/simulate",
        json={**SIM, "engine": "trtllm", "quantize_attention_action": "DISABLED"},
    ).json()
    assert told["max_running"] < trt["max_running"]


def test_a_deployment_that_cannot_run_stays_a_200(client: TestClient) -> None:
    body = client.post(
        "/v1/simulate",
        json={**SIM, "model": "deepseek-ai/DeepSeek-V3", "tp_size": 1, "concurrency": 4},
    )
    assert body.status_code == 200, body.text
    assert body.json()["feasible"] is False and "memory" in body.json()["reason"]


def test_optimize_defaults_per_mode(client: TestClient) -> None:
    search = {
        "model": "Qwen/Qwen3-32B",
        "device": H100,
        "quantize_linear_action": "FP8",
        "num_devices": 2,
        "input_length": 1024,
        "output_length": 64,
        "tpot_limit_ms": 40,
        "ttft_limit_ms": 1000,
        "max_batch_size": 64,
    }
    agg = client.post("/v1/optimize", json=search).json()
    assert agg["engine"]["name"] == "vllm" and agg["input"]["workload"] == "closed_loop"
    decode = client.post("/v1/optimize", json={**search, "mode": "disagg_decode"}).json()
    assert decode["input"]["workload"] == "burst"


CLI = [
    "simulate",
    "Qwen/Qwen3-32B",
    "--device",
    H100,
    "--input-length",
    "1024",
    "--output-length",
    "32",
    "--concurrency",
    "4",
    "--requests-per-client",
    "1",
]


def test_cli_engine_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run([*CLI, "--engine", "trtllm", "--engine-options", "max_num_seqs=2"], capsys)
    assert code == 0, err
    assert out.splitlines()[0].split() == ["engine", "trtllm"]
    assert "max_running                   2" in out
    code, _, err = run([*CLI, "--engine", "tgi"], capsys)
    assert code == 2 and "tgi" in err
    for bad in ("bogus=1", "max_num_seqs=many", "max_num_seqs"):
        code, _, err = run([*CLI, "--engine-options", bad], capsys)
        assert code == 2, bad
        assert len(err.strip().splitlines()) == 1, err


def test_a_coupled_row_simulates_to_the_same_numbers(client: TestClient) -> None:
    """Attention DP with expert-parallel MoE (TP1 x DP8, EP8): the ranks step together in the
    search and in the simulation alike."""
    search = {
        "model": "Qwen/Qwen3-235B-A22B",
        "device": "NVIDIA_H200_SXM_141G",
        "quantize_linear_action": "FP8",
        "num_devices": 8,
        "input_length": 1024,
        "output_length": 64,
        "tpot_limit_ms": 60,
        "tp_sizes": [1],
        "ep_sizes": [8],
        "requests_per_client": 2,
        "max_batch_size": 32,
    }
    row = client.post("/v1/optimize", json=search).json()["best"]
    assert (row["tp"], row["dp"], row["ep"]) == (1, 8, 8)
    keep = ("model", "device", "quantize_linear_action", "input_length", "output_length")
    sim = client.post(
        "/v1/simulate",
        json={
            **{key: search[key] for key in keep},
            "requests_per_client": 2,
            "tp_size": 1,
            "dp_size": 8,
            "ep_size": 8,
            "concurrency": row["concurrency"],
        },
    ).json()
    assert sim["ttft_ms"] == pytest.approx(row["ttft_ms"])
    assert sim["tpot_ms"] == pytest.approx(row["tpot_ms"])
    assert sim["output_throughput"] == pytest.approx(row["throughput_tokens_s"])


def test_mxfp4_activations_are_the_engines_and_overridable(client: TestClient) -> None:
    oss = {
        **SIM,
        "model": "openai/gpt-oss-120b",
        "device": "NVIDIA_B200_SXM_180G",
        "quantize_linear_action": "MXFP4",
        "input_length": 8192,
        "output_length": 256,
    }
    vllm = client.post("/v1/simulate", json=oss).json()
    assert vllm["engine"]["mxfp4_activation"] == "bf16"
    fp4 = client.post(
        "/v1/simulate", json={**oss, "engine_options": {"mxfp4_activation": "fp4"}}
    ).json()
    assert fp4["engine"]["mxfp4_activation"] == "fp4"
    assert fp4["ttft_ms"] < vllm["ttft_ms"]  # the 8192-token prefills on the FP4 matrix rate


def test_sglang_eager_prefill_host_time_is_echoed_overridden_and_bounded(
    client: TestClient,
) -> None:
    from app.core.profiles import SGLANG_EAGER_LAYER_HOST_MS

    short = {**SIM, "engine": "sglang", "input_length": 128, "concurrency": 1}
    default = client.post("/v1/simulate", json=short).json()
    assert default["engine"]["eager_layer_host_ms"] == SGLANG_EAGER_LAYER_HOST_MS
    off = client.post(
        "/v1/simulate", json={**short, "engine_options": {"eager_layer_host_ms": 0}}
    ).json()
    assert off["engine"]["eager_layer_host_ms"] == 0
    # a 128-token prefill of a 64-layer model is host-bound: 64 x 1.35 ms on its TTFT
    assert default["ttft_ms"] - off["ttft_ms"] > 0.5 * 64 * SGLANG_EAGER_LAYER_HOST_MS
    assert default["tpot_ms"] == pytest.approx(off["tpot_ms"])  # captured decodes
    bad = client.post("/v1/simulate", json={**short, "engine_options": {"eager_layer_host_ms": -1}})
    assert bad.status_code == 422 and "eager_layer_host_ms" in bad.text


def test_redundant_expert_slots_let_48_ranks_hold_256_experts_and_are_echoed(
    client: TestClient,
) -> None:
    """SGLang's --ep-num-redundant-experts 32 (Dynamo's GB200 DEP48 decode workers): 288 slots
    split over 48 ranks, where 256 experts do not; echoed only when set."""
    dep48 = {
        **SIM,
        "model": "deepseek-ai/DeepSeek-R1",
        "device": "NVIDIA_GB200_186G",
        "engine": "sglang",
        "input_length": 256,
        "output_length": 16,
        "concurrency": 48,
        "tp_size": 1,
        "dp_size": 48,
        "ep_size": 48,
        "requests_per_client": 1,
    }
    bare = problem(client.post("/v1/simulate", json=dep48), 422)
    assert bare["errors"][0]["loc"] == ["body", "ep"] and "num_experts=256" in bare["detail"]
    slots = client.post("/v1/simulate", json={**dep48, "engine_options": {"redundant_experts": 32}})
    assert slots.status_code == 200 and slots.json()["engine"]["redundant_experts"] == 32
    uneven = {**dep48, "engine_options": {"redundant_experts": 16}}
    assert "272 expert slots" in problem(client.post("/v1/simulate", json=uneven), 422)["detail"]
    assert "redundant_experts" not in client.post("/v1/simulate", json=SIM).json()["engine"]
