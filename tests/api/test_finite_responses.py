"""Every float in a response is finite, or the configuration is infeasible with the reason."""

from __future__ import annotations

import importlib
import math

import pytest
from fastapi.testclient import TestClient

from app.services.finite import finite_or_infeasible, non_finite_paths

#: The module (``app.services.simulate`` the attribute is the function of that name).
simulate_service = importlib.import_module("app.services.simulate")
SIMULATE = {
    "engine": "msmodeling",
    "model": "Qwen/Qwen3-0.6B",
    "device": "TEST_DEVICE",
    "input_length": 256,
    "output_length": 16,
    "concurrency": 2,
}


def test_non_finite_paths_names_every_bad_number() -> None:
    document = {"a": 1.0, "b": [0.5, math.inf], "c": {"d": math.nan, "e": "x"}, "f": 3}
    assert non_finite_paths(document) == ["b[1]", "c.d"]


def test_a_non_finite_latency_makes_the_answer_infeasible(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = finite_or_infeasible  # a latency gone infinite on its way out

    def poisoned(response):  # type: ignore[no-untyped-def]
        return original(response.model_copy(update={"ttft_ms": math.inf}))

    monkeypatch.setattr(simulate_service, "finite_or_infeasible", poisoned)
    response = client.post("/v1/simulate", json=SIMULATE)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["feasible"] is False and "ttft_ms" in body["reason"]
    assert body["ttft_ms"] == 0.0
