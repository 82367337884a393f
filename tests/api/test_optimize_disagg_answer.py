"""The readable answer of the disaggregated optimize modes: ``best`` filled or ``reason`` says
why, the P:D split and the binding side named, a missing TTFT limit flagged."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

PD_RATIO: dict[str, Any] = {
    "engine": "msmodeling",
    "model": "Qwen/Qwen3-32B",
    "device": "ATLAS_800_A2_376T_64G",
    "num_devices": 16,
    "input_length": 3500,
    "output_length": 1500,
    "max_batched_tokens": 8192,
    "tpot_limit_ms": 50,
    "ttft_limit_ms": 3000,
    "mode": "pd_ratio",
    "prefill_devices_per_instance": 4,
    "decode_devices_per_instance": 8,
    "include_probes": False,
}


def optimize(client: TestClient, **changes: Any) -> Any:
    body = {k: v for k, v in {**PD_RATIO, **changes}.items() if v is not None}
    response = client.post("/v1/optimize", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_pd_ratio_fills_best_with_the_binding_sides_row_and_names_the_split(
    client: TestClient,
) -> None:
    body = optimize(client)
    pd = body["pd_ratio"]
    assert pd["binding_pool"] in ("prefill", "decode")
    split = pd["split"]
    prefill_devices = split["prefill_instances"] * pd["prefill_row"]["num_devices"]
    decode_devices = split["decode_instances"] * pd["decode_row"]["num_devices"]
    assert pd["pd_split"] == (
        f"{split['prefill_instances']}P:{split['decode_instances']}D "
        f"({prefill_devices}:{decode_devices} devices)"
    )
    assert body["best"] == pd[f"{pd['binding_pool']}_row"] and body["reason"] is None
    # the binding side is the one whose instances cap the balanced QPS
    p_cap = split["prefill_instances"] * pd["p_qps"]
    d_cap = split["decode_instances"] * pd["d_qps"]
    assert (pd["binding_pool"] == "prefill") == (p_cap <= d_cap)


def test_without_a_ttft_limit_the_prefill_sizing_modes_say_so_instead_of_a_huge_batch(
    client: TestClient,
) -> None:
    for mode in ("pd_ratio", "disagg_prefill"):
        body = optimize(client, mode=mode, ttft_limit_ms=None, max_batch_size=256)
        assert body["best"] is None, mode
        assert body["reason"].startswith("ttft_limit_ms is not given"), body["reason"]
        assert "give ttft_limit_ms" in body["reason"]
    decode = optimize(client, mode="disagg_decode", ttft_limit_ms=None)
    assert decode["best"] is not None and decode["reason"] is None


def test_disagg_prefill_with_a_limit_fills_best(client: TestClient) -> None:
    body = optimize(client, mode="disagg_prefill", num_devices=8)
    assert body["best"] is not None and body["best"]["role"] == "prefill"
    assert body["best"]["ttft_ms"] <= 3000


def test_nothing_feasible_is_a_reason_not_a_best(client: TestClient) -> None:
    body = optimize(client, tpot_limit_ms=0.001)
    assert body["best"] is None
    assert body["reason"] == "no feasible decode configuration"
