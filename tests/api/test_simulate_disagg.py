"""``POST /v1/simulate`` with ``mode: "disagg"`` through the real ASGI app (lifespan running)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.workload.disagg_setup import FIRST_TOKEN_RULE, KV_TRANSFER_FIXED_MS
from tests.api.helpers import assert_names_field

QWEN32 = "Qwen/Qwen3-32B"
H100 = "NVIDIA_H100_SXM_80G"
DISAGG: dict[str, Any] = {
    "mode": "disagg",
    "model": QWEN32,
    "device": H100,
    "input_length": 2048,
    "output_length": 128,
    "concurrency": 32,
    "requests_per_client": 4,
    "prefill_workers": 2,
    "prefill_tp_size": 2,
    "decode_workers": 1,
    "decode_tp_size": 4,
}


def post(client: TestClient, **changes: Any) -> Any:
    body = {**DISAGG, **changes}
    return client.post("/v1/simulate", json={k: v for k, v in body.items() if v is not None})


def test_a_disaggregated_simulation_names_both_pools_the_split_and_the_binding_pool(
    client: TestClient,
) -> None:
    response = post(client)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["mode"] == "disagg" and body["feasible"] is True and body["reason"] is None
    assert body["num_devices"] == 8 and body["pd_split"] == "2P:1D (4:4 devices)"
    prefill, decode = body["prefill"], body["decode"]
    assert (prefill["workers"], prefill["tp_size"], prefill["devices"]) == (2, 2, 4)
    assert (decode["workers"], decode["tp_size"], decode["devices"]) == (1, 4, 4)
    assert prefill["parallel"] == "TP2 DP1" and decode["units"] == 1
    assert 0 < prefill["utilisation"] <= 1 and 0 < decode["utilisation"] <= 1
    assert body["binding_pool"] in ("prefill", "decode")
    assert body["num_requests"] == 32 * 4
    assert body["ttft_ms"] > 0 and body["tpot_ms"] > 0 and body["output_throughput"] > 0
    assert body["throughput_per_device"] == pytest.approx(body["output_throughput"] / 8)
    transfer = body["transfer"]
    assert transfer["tier"] == "nvlink" and transfer["fixed_ms"] == KV_TRANSFER_FIXED_MS
    assert transfer["transfer_ms"] > KV_TRANSFER_FIXED_MS and transfer["bytes_per_request"] > 0
    assert body["first_token"] == FIRST_TOKEN_RULE["vllm"] == "decode_step"
    assert "first decode step" in body["first_token_rule"]
    # the echo shows every value used, the pools' defaults included
    echo = body["input"]
    assert echo["mode"] == "disagg" and echo["prefill_dp_size"] == echo["decode_ep_size"] == 1
    assert echo["workload"] == "closed_loop" and echo["num_devices"] == 8
    assert body["stats"]["layouts"] == 2 and body["stats"]["forward_evaluations"] > 0


def test_forwards_go_through_the_latency_cache(client: TestClient) -> None:
    cold = post(client).json()
    warm = post(client).json()
    assert cold["stats"]["forward_evaluations"] > 0
    assert warm["stats"]["forward_evaluations"] == 0
    assert warm["stats"]["cache"]["hits"] == cold["stats"]["cache"]["misses"]
    assert warm["ttft_ms"] == cold["ttft_ms"] and warm["tpot_ms"] == cold["tpot_ms"]


def test_the_same_layout_in_both_pools_shares_one_cached_model(client: TestClient) -> None:
    body = post(client, prefill_tp_size=4, prefill_workers=1).json()
    assert body["stats"]["layouts"] == 1 and body["pd_split"] == "1P:1D (4:4 devices)"


def test_the_first_token_rule_follows_the_engine(client: TestClient) -> None:
    sglang = post(client, engine="sglang").json()
    vllm = post(client, engine="vllm").json()
    trtllm = post(client, engine="trtllm").json()
    assert sglang["first_token"] == "admission" and vllm["first_token"] == "decode_step"
    # TensorRT-LLM's generation server returns the context's token before its first forward
    assert trtllm["first_token"] == "admission" and "admits" in trtllm["first_token_rule"]
    assert sglang["engine"]["name"] == "sglang"


def test_more_decode_workers_relieve_a_decode_bound_deployment(client: TestClient) -> None:
    tight = post(client, prefill_workers=4, decode_workers=1, decode_tp_size=1, concurrency=128)
    body = tight.json()
    assert body["binding_pool"] == "decode", body
    roomy = post(client, prefill_workers=4, decode_workers=4, decode_tp_size=1, concurrency=128)
    assert roomy.json()["tpot_ms"] < body["tpot_ms"]


def test_a_limit_violation_is_a_200_with_the_reason(client: TestClient) -> None:
    body = post(client, ttft_limit_ms=0.001).json()
    assert body["feasible"] is False and body["reason"].startswith("ttft_limit")


def test_a_worker_without_room_for_one_requests_kv_is_infeasible_not_an_error(
    client: TestClient,
) -> None:
    response = post(
        client,
        model="deepseek-ai/DeepSeek-R1",
        prefill_workers=1,
        prefill_tp_size=1,
        decode_workers=1,
        decode_tp_size=1,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["feasible"] is False and body["reason"].startswith("memory: prefill worker")
    assert body["binding_pool"] is None and body["ttft_ms"] == 0.0


H200 = "NVIDIA_H200_SXM_141G"


def test_pools_on_two_devices_need_the_link_between_them(client: TestClient) -> None:
    """A decode pool on H200s beside an H100 prefill pool: refused without pool_link (naming
    it), answered with it: each pool on its device, the KV over the stated link."""
    missing = post(client, decode_device=H200)
    assert missing.status_code == 422, missing.text
    assert [e["loc"][-1] for e in missing.json()["errors"]] == ["pool_link"]
    link = {"bandwidth_gb_s": 25.0, "fixed_ms": 3.0, "name": "roce"}
    body = post(client, decode_device=H200, pool_link=link).json()
    assert body["feasible"] is True, body["reason"]
    assert (body["prefill"]["device"], body["decode"]["device"]) == (H100, H200)
    transfer = body["transfer"]
    assert transfer["tier"] == "roce" and transfer["bandwidth_gb_s"] == 25.0
    assert transfer["fixed_ms"] == 3.0
    one_prompt_ms = 3.0 + transfer["bytes_per_request"] / 25e9 * 1e3
    assert transfer["transfer_ms"] >= one_prompt_ms - 1e-9  # a job's prompts share the link
    # The H200's HBM (4.8 against 3.35 TB/s) makes the same decode layout step faster.
    same = post(client).json()
    assert body["tpot_ms"] < same["tpot_ms"]
    assert body["prefill"]["kv_requests"] == same["prefill"]["kv_requests"]
    assert body["decode"]["kv_requests"] > same["decode"]["kv_requests"]  # 141 GB against 80


def test_one_device_named_twice_needs_no_link_and_a_link_replaces_the_tier(
    client: TestClient,
) -> None:
    same = post(client).json()
    assert post(client, decode_device=H100).json()["ttft_ms"] == same["ttft_ms"]
    slow = post(client, pool_link={"bandwidth_gb_s": 1.0}).json()
    assert slow["transfer"]["tier"] == "pool_link" and slow["transfer"]["bandwidth_gb_s"] == 1.0
    assert slow["transfer"]["transfer_ms"] > 10 * same["transfer"]["transfer_ms"]
    assert slow["ttft_ms"] > same["ttft_ms"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"decode_device": "TPU9", "pool_link": {"bandwidth_gb_s": 25.0}}, "decode_device"),
        ({"decode_device": H200, "pool_link": {"bandwidth_gb_s": 0}}, "bandwidth_gb_s"),
        ({"pool_link": {"bandwidth_gb_s": 25.0, "fixed_ms": -1}}, "fixed_ms"),
        ({"pool_link": {"fixed_ms": 1}}, "bandwidth_gb_s"),
        ({"pool_link": {"bandwidth_gb_s": 25.0, "mtu": 9000}}, "mtu"),
    ],
)
def test_bad_pool_devices_and_links_are_a_422_naming_the_field(
    client: TestClient, changes: dict[str, Any], field: str
) -> None:
    response = post(client, **changes)
    assert response.status_code == 422, response.text
    assert [e["loc"][-1] for e in response.json()["errors"]] == [field]


def test_an_aggregated_request_takes_no_pool_device() -> None:
    from app.models.simulate import DISAGG_FIELDS

    assert {"decode_device", "pool_link"} <= set(DISAGG_FIELDS)


POISSON = {"workload": "poisson", "concurrency": None, "requests_per_client": None}


def test_poisson_arrivals_over_both_pools(client: TestClient) -> None:
    """An open loop of request_rate arrivals: at a low rate nothing queues; past the prefill
    pool's rate the prompts queue (TTFT grows) and the prefill pool binds."""
    low = post(client, **POISSON, request_rate=0.2, num_requests=100, seed=1)
    assert low.status_code == 200, low.text
    quiet = low.json()
    assert quiet["workload"] == "poisson" and quiet["concurrency"] is None
    assert quiet["request_rate"] == 0.2 and quiet["num_requests"] == 100
    assert quiet["input"]["seed"] == 1 and quiet["feasible"] is True
    assert quiet["prefill"]["wait_ms"] < 1.0
    busy = post(client, **POISSON, request_rate=200.0, num_requests=400).json()
    assert busy["ttft_ms"] > 10 * quiet["ttft_ms"]
    assert busy["binding_pool"] == "prefill" and busy["prefill"]["wait_ms"] > 1000
    default = post(client, **POISSON, request_rate=1.0).json()
    assert default["num_requests"] == default["input"]["num_requests"] == 1000
    again = post(client, **POISSON, request_rate=0.2, num_requests=100, seed=1).json()
    assert again["ttft_ms"] == quiet["ttft_ms"]
    other_seed = post(client, **POISSON, request_rate=0.2, num_requests=100, seed=2).json()
    assert other_seed["ttft_ms"] != quiet["ttft_ms"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"num_devices": 16}, "num_devices"),
        ({"prefill_tp_size": 3}, "prefill_tp_size"),
        ({"decode_tp_size": 48}, "decode_tp_size"),
        ({"decode_ep_size": 8}, "decode_ep_size"),
        ({"prefill_workers": 0}, "prefill_workers"),
        ({"decode_workers": None}, "decode_workers"),
        ({"prefill_workers": 600, "prefill_tp_size": 2}, "prefill_workers"),
        ({"concurrency": None}, "concurrency"),
        ({"tp_size": 2}, "tp_size"),
        ({"workload": "poisson", "request_rate": 1.0}, "concurrency"),
        ({"workload": "poisson", "concurrency": None}, "request_rate"),
        (
            {"workload": "poisson", "concurrency": None, "request_rate": 1.0, "max_concurrency": 4},
            "max_concurrency",
        ),
        ({"request_rate": 1.0}, "request_rate"),
        ({"num_requests": 50}, "num_requests"),
        ({"workload": "burst"}, "workload"),
        ({"window": "steady_state"}, "window"),
        ({"include_timeline": True}, "include_timeline"),
        ({"scheduler": {"name": "vllm"}}, "scheduler"),
        ({"mode": "split"}, "mode"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(
    client: TestClient, changes: dict[str, Any], field: str
) -> None:
    assert_names_field(post(client, **changes), field)


def test_an_aggregated_request_takes_no_pool_field_and_echoes_none(client: TestClient) -> None:
    agg = {
        "model": QWEN32,
        "device": H100,
        "input_length": 2048,
        "output_length": 128,
        "concurrency": 8,
        "tp_size": 2,
    }
    response = client.post("/v1/simulate", json={**agg, "prefill_workers": 2})
    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"][-1] == "prefill_workers"
    body = client.post("/v1/simulate", json={**agg, "mode": "agg"}).json()
    assert "mode" not in body["input"] and "prefill_workers" not in body["input"]
    assert body["parallel"] == "TP2 DP1"


def test_the_schema_offers_both_answers(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    names = schema["components"]["schemas"]
    assert {"SimulateRequest", "SimulateResponse", "DisaggSimulateResponse"} <= set(names)
    request = names["SimulateRequest"]["properties"]
    assert request["mode"]["enum"] == ["agg", "disagg"]
    assert "prefill_workers" in request and "decode_ep_size" in request
