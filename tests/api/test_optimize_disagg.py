"""``POST /v1/optimize`` with ``mode: "disagg"``: worker layouts, worker counts and concurrency
of a whole disaggregated deployment, through the ASGI app."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.helpers import assert_names_field
from tests.golden.cases import DISAGG_OPT

#: mode disagg within 12 H100s: the golden corpus's request (tests/golden/cases.py)
BODY: dict[str, Any] = DISAGG_OPT


def post(client: TestClient, **changes: Any) -> Any:
    body = {k: v for k, v in {**BODY, **changes}.items() if v is not None}
    return client.post("/v1/optimize", json=body)


def answer(client: TestClient, **changes: Any) -> Any:
    response = post(client, **changes)
    assert response.status_code == 200, response.text
    return response.json()


def test_best_names_both_pools_the_split_and_the_binding_pool(client: TestClient) -> None:
    body = answer(client)
    assert body["mode"] == "disagg" and body["reason"] is None
    best = body["best"]
    assert best == body["rows"][0]
    prefill, decode = best["prefill"], best["decode"]
    assert best["pd_split"] == (
        f"{prefill['workers']}P:{decode['workers']}D "
        f"({prefill['devices']}:{decode['devices']} devices)"
    )
    assert best["num_devices"] == prefill["devices"] + decode["devices"] <= 12
    assert best["binding_pool"] in ("prefill", "decode")
    assert best["ttft_ms"] <= 800 and best["tpot_ms"] <= 30
    assert best["throughput_per_device"] == pytest.approx(
        best["output_throughput"] / best["num_devices"]
    )
    ranked = [row["throughput_per_device"] for row in body["rows"]]
    assert ranked == sorted(ranked, reverse=True)
    assert body["ttft_limit_given"] is True and body["notice"] is None
    search = body["search"]
    assert search["simulations"] == len(body["probes"]) == body["stats"]["probes"]
    assert 0 < search["evaluated"] < search["configurations"]
    assert body["input"]["max_workers"] == 4 and body["input"]["workload"] == "closed_loop"


def test_the_best_deployment_simulates_to_its_own_numbers(client: TestClient) -> None:
    """A row simulated whole (``copies`` 1) is exactly what ``POST /v1/simulate`` with mode
    disagg answers for the same deployment and clients; a row of k copies, k times one
    copy's clients and throughput at the copy's TTFT and TPOT."""
    best = answer(client)["best"]
    copies = best["copies"]
    pools = {
        f"{pool}_{key}": best[pool][key] // (copies if key == "workers" else 1)
        for pool in ("prefill", "decode")
        for key in ("workers", "tp_size", "dp_size", "ep_size")
    }
    simulated = client.post(
        "/v1/simulate",
        json={
            **{k: BODY[k] for k in ("engine", "model", "device", "quantize_linear_action")},
            **{k: BODY[k] for k in ("input_length", "output_length", "requests_per_client")},
            "mode": "disagg",
            **pools,
            "concurrency": best["concurrency"] // copies,
        },
    )
    assert simulated.status_code == 200, simulated.text
    one = simulated.json()
    if copies == 1 or best["num_devices"] <= 8:  # the same interconnect tier
        assert one["ttft_ms"] == pytest.approx(best["ttft_ms"])
        assert one["tpot_ms"] == pytest.approx(best["tpot_ms"])
        assert one["output_throughput"] * copies == pytest.approx(best["output_throughput"])


def test_fixed_worker_sizes_are_honoured(client: TestClient) -> None:
    body = answer(client, prefill_devices_per_instance=2, decode_devices_per_instance=1)
    assert body["rows"]
    for row in body["rows"]:
        assert row["prefill"]["devices_per_worker"] == 2
        assert row["decode"]["devices_per_worker"] == 1
    assert {p["prefill_parallel"] for p in body["probes"]} <= {"TP2 DP1", "TP1 DP2"}
    assert {p["decode_parallel"] for p in body["probes"]} == {"TP1 DP1"}


def test_a_missing_ttft_limit_is_flagged_and_best_still_filled(client: TestClient) -> None:
    body = answer(client, ttft_limit_ms=None)
    assert body["ttft_limit_given"] is False
    assert body["notice"].startswith("ttft_limit_ms is not given")
    assert body["best"] is not None and body["reason"] is None


def test_nothing_feasible_is_a_200_with_the_reason(client: TestClient) -> None:
    body = answer(client, tpot_limit_ms=0.5)
    assert body["best"] is None and body["rows"] == []
    assert body["reason"].startswith("no feasible decode worker layout")
    assert all(
        item["reason"].startswith("tpot_limit")
        for item in body["infeasible"]
        if item["role"] == "decode"
    )


def test_a_memory_bound_layout_is_reported_not_raised(client: TestClient) -> None:
    body = answer(client, model="deepseek-ai/DeepSeek-R1", num_devices=16, tp_sizes=[1, 8])
    reasons = [item["reason"] for item in body["infeasible"]]
    assert any(reason.startswith("memory:") for reason in reasons)


def test_the_other_modes_echo_no_disagg_field(client: TestClient) -> None:
    agg = {k: v for k, v in BODY.items() if k not in ("mode", "max_workers")}
    body = client.post("/v1/optimize", json={**agg, "include_probes": False}).json()
    assert body["mode"] == "agg" and "max_workers" not in body["input"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"prefill_devices_per_instance": 12}, "prefill_devices_per_instance"),
        (
            {"prefill_devices_per_instance": 4, "decode_devices_per_instance": 10},
            "decode_devices_per_instance",
        ),
        ({"prefill_devices_per_instance": 3, "tp_sizes": [2]}, "tp_sizes"),
        ({"prefill_devices_per_instance": 3, "tp_sizes": [3]}, "tp_sizes"),
        ({"max_workers": 0}, "max_workers"),
        ({"max_workers": 65}, "max_workers"),
        ({"num_devices": 0}, "num_devices"),
        ({"num_devices": 1}, "num_devices"),
        ({"workload": "burst"}, "workload"),
        ({"window": "steady_state"}, "window"),
        ({"scheduler": {"name": "vllm"}}, "scheduler"),
        ({"serving_overhead_ms": 5.0}, "serving_overhead_ms"),
        ({"decode_device": "NVIDIA_B200_SXM_180G"}, "decode_device"),
        ({"mode": "agg"}, "max_workers"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(
    client: TestClient, changes: dict[str, Any], field: str
) -> None:
    assert_names_field(post(client, **changes), field)


def test_experts_that_no_ep_size_divides_are_a_422_naming_ep_sizes(client: TestClient) -> None:
    response = post(
        client,
        model="Qwen/Qwen3-30B-A3B",
        prefill_devices_per_instance=3,
        tp_sizes=[1],
        ep_sizes=[3],
    )
    assert response.status_code == 422, response.text
    assert [e["loc"][-1] for e in response.json()["errors"]] == ["ep_sizes"]


def test_the_schema_offers_the_disagg_answer(client: TestClient) -> None:
    names = client.get("/openapi.json").json()["components"]["schemas"]
    assert {"DisaggOptimizeResponse", "DisaggRowOut"} <= set(names)
    assert "disagg" in names["OptimizeRequest"]["properties"]["mode"]["enum"]


def test_an_identical_request_is_answered_from_the_response_cache(client: TestClient) -> None:
    first = answer(client, max_workers=3)
    second = answer(client, max_workers=3)
    assert not first["stats"]["cache"]["response_cache_hit"]
    assert second["stats"]["cache"]["response_cache_hit"]
    assert {k: v for k, v in second.items() if k != "stats"} == {
        k: v for k, v in first.items() if k != "stats"
    }
    assert not answer(client, max_workers=2)["stats"]["cache"]["response_cache_hit"]
