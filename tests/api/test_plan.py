"""``POST /v1/plan`` and ``chunkwise plan`` through the real app and parser."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from app.cli import main
from tests.api.helpers import long_context_qwen3_32b

BODY = {
    "model": "Qwen/Qwen3-32B",
    "device": "NVIDIA_H100_SXM_80G",
    "quantize_linear_action": "FP8",
    "tp_size": 2,
    "input_length": 2048,
    "output_length": 512,
    "request_rate": 20,
    "ttft_limit_ms": 1000,
    "tpot_limit_ms": 50,
    "price_per_device_hour": 2.5,
}


def test_a_plan_covers_the_target_within_the_sla(client: TestClient) -> None:
    response = client.post("/v1/plan", json=BODY)
    assert response.status_code == 200, response.text
    plan = response.json()
    assert plan["feasible"] and plan["statistic"] == "mean"
    assert 0 < plan["sustainable_request_rate"] <= plan["saturated_request_rate"]
    assert plan["replicas"] * plan["sustainable_request_rate"] >= 20 * 1.25 - 1e-9
    assert plan["devices"] == plan["replicas"] * 2
    assert plan["ttft_ms"] <= 1000 and plan["tpot_ms"] <= 50
    assert plan["cost_per_hour"] == pytest.approx(plan["devices"] * 2.5)
    strict = client.post("/v1/plan", json={**BODY, "percentile": 99}).json()
    assert strict["statistic"] == "p99"
    assert strict["sustainable_request_rate"] <= plan["sustainable_request_rate"]
    tokens = client.post(
        "/v1/plan", json={**{k: v for k, v in BODY.items() if k != "request_rate"},
                          "output_token_rate": 20 * 512},
    ).json()  # fmt: skip
    assert tokens["target_request_rate"] == pytest.approx(20)


def test_an_sla_nothing_meets_is_a_200_saying_why(client: TestClient) -> None:
    plan = client.post("/v1/plan", json={**BODY, "ttft_limit_ms": 1}).json()
    assert not plan["feasible"] and plan["replicas"] == 0 and "idle replica" in plan["reason"]
    long_prompt = {**BODY, "model": long_context_qwen3_32b(), "input_length": 1_000_000}
    memory = client.post("/v1/plan", json=long_prompt).json()
    assert not memory["feasible"] and memory["reason"].startswith("memory")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"request_rate": 0}, "request_rate"),
        ({"price_per_device_hour": -1}, "price_per_device_hour"),
        ({"percentile": 100}, "percentile"),
        ({"percentile": 0}, "percentile"),
        ({"headroom": 0.5}, "headroom"),
        ({"output_token_rate": 5}, "exactly one of request_rate and output_token_rate"),
        ({"ttft_limit_ms": None, "tpot_limit_ms": None}, "ttft_limit_ms, tpot_limit_ms"),
    ],
)
def test_bad_plan_input_is_a_422(client: TestClient, change: dict[str, object], field: str) -> None:
    response = client.post("/v1/plan", json={**BODY, **change})
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    assert field in response.text


ARGS = [
    "plan", "Qwen/Qwen3-32B", "--device", "NVIDIA_H100_SXM_80G", "--quantize-linear-action",
    "FP8", "--tp-size", "2", "--input-length", "2048", "--output-length", "512",
    "--request-rate", "20", "--ttft-limit", "1000", "--tpot-limit", "50",
]  # fmt: skip


def test_cli_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--price-per-device-hour", "2.5"]) == 0
    out = capsys.readouterr().out
    assert "replicas" in out and "per million output tokens" in out
    assert main([*ARGS, "--format", "json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["feasible"] and body["cost_per_hour"] is None


@pytest.mark.parametrize(
    ("extra", "needle"),
    [(["--percentile", "150"], "percentile"), (["--price-per-device-hour", "-2"], "price")],
)
def test_cli_plan_refuses_in_one_line(
    capsys: pytest.CaptureFixture[str], extra: list[str], needle: str
) -> None:
    assert main([*ARGS, *extra]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
