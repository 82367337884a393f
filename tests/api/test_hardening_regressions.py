"""Issue 15's reproductions D1-D6 and D8: each was a 500 (or an infinite number answered as
feasible, or a forged log line); each must now be a 422 naming the field, or an escaped line.

The fixes close classes, not instances: custom devices are typed and bounded in the core
(strings are strings, booleans booleans, rates and efficiencies inside physical floors and
ceilings, so no latency can divide by an underflowed zero or overflow to infinity), every
inline object is walked iteratively under a depth and size bound before anything reads it, the
forward layout checks ``pp`` before dividing by it, and logged client text is escaped.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.logsafe import loggable
from app.core.catalog.models import CONFIG_DIR
from app.core.errors import InvalidParameterError

H100 = "NVIDIA_H100_SXM_80G"
SIMULATE: dict[str, Any] = {
    "model": "Qwen/Qwen3-8B",
    "input_length": 1000,
    "output_length": 100,
    "max_batched_tokens": 2048,
    "concurrency": 4,
    "tp_size": 2,
}
TIER: dict[str, Any] = {
    "name": "nvlink",
    "max_devices": 8,
    "bandwidth_gb_s": 450,
    "latency_us": 2,
    "efficiency": 0.8,
}


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


def custom(**fields: Any) -> dict[str, Any]:
    return {**SIMULATE, "device": {"base": H100, "name": "custom", **fields}}


def qwen_config() -> dict[str, Any]:
    config: dict[str, Any] = json.loads((CONFIG_DIR / "qwen3_dense_8b.json").read_text())
    return config


CASES: dict[str, tuple[str, dict[str, Any], str]] = {
    "D1 inline config key nested 253 deep": (
        "/v1/forward",
        {
            "model": {"name": "m", "config": {**qwen_config(), "extra": nested(253)}},
            "device": H100,
            "num_queries": 1,
            "query_length": 128,
        },
        "model.config.extra",
    ),
    "D2 tier name nested 300 deep": (
        "/v1/simulate",
        custom(interconnect=[{**TIER, "name": nested(300)}]),
        "device.interconnect[0].name",
    ),
    "D3 vendor is a list": ("/v1/simulate", custom(vendor=["a"]), "vendor"),
    "D3 description is an object": ("/v1/simulate", custom(description={"a": 1}), "description"),
    "D3 switched is an object": (
        "/v1/simulate",
        custom(interconnect=[{**TIER, "switched": {"a": 1}}]),
        "interconnect.switched",
    ),
    "D3 tier name is a list": (
        "/v1/simulate",
        custom(interconnect=[{**TIER, "name": ["a"]}]),
        "interconnect.name",
    ),
    "D4 underflowing bandwidth x efficiency": (
        "/v1/simulate",
        custom(interconnect=[{**TIER, "bandwidth_gb_s": 1e-300, "efficiency": 1e-300}]),
        "interconnect.bandwidth_gb_s",
    ),
    "D5 pp without tp on one device": (
        "/v1/forward",
        {
            "model": "Qwen/Qwen3-8B",
            "device": H100,
            "num_queries": 1,
            "query_length": 128,
            "num_devices": 1,
            "pp_size": 2,
        },
        "num_devices",
    ),
    "D6 denormal HBM bandwidth": ("/v1/simulate", custom(hbm_bandwidth_gb_s=5e-324), "hbm_"),
    "a capacity past the ceiling": ("/v1/simulate", custom(hbm_capacity_gb=2e9), "hbm_capacity_gb"),
}


@pytest.mark.parametrize(("path", "body", "field"), CASES.values(), ids=list(CASES))
def test_reproductions_are_422_naming_the_field(
    client: TestClient, path: str, body: dict[str, Any], field: str
) -> None:
    response = client.post(path, json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    text = json.dumps(problem)
    assert field in text, text[:500]
    assert len(problem["detail"]) < 2000  # a hostile value is shown cut, never whole


#: D1 / D2 through /v1/optimize: the response cache's key (the request's JSON) was built before
#: the depth checks, and the serialiser's own depth limit made it a 500 (issue 34).
OPTIMIZE_DEEP: dict[str, tuple[dict[str, Any], str]] = {
    "D1 inline config": (
        {"model": {"name": "m", "config": {**qwen_config(), "extra": nested(253)}}, "device": H100},
        "model.config.extra",
    ),
    "D2 custom device": (
        {"model": "Qwen/Qwen3-8B", **custom(interconnect=[{**TIER, "name": nested(300)}])},
        "device.interconnect[0].name",
    ),
}


@pytest.mark.parametrize("mode", ["agg", "pd_ratio", "disagg"])
@pytest.mark.parametrize(("parts", "field"), OPTIMIZE_DEEP.values(), ids=list(OPTIMIZE_DEEP))
def test_an_optimize_nested_too_deep_is_a_422_before_any_key(
    client: TestClient, parts: dict[str, Any], field: str, mode: str
) -> None:
    body = {
        "input_length": 1000,
        "output_length": 100,
        "num_devices": 2,
        "mode": mode,
        **{k: v for k, v in parts.items() if k in ("model", "device")},
    }
    for attempt in range(2):  # the second one would be the response cache's hit
        response = client.post("/v1/optimize", json=body)
        assert response.status_code == 422, (attempt, response.text[:300])
        assert field in response.json()["detail"]


def test_the_depth_bound_admits_real_configs(client: TestClient) -> None:
    """Every shipped config.json nests far less than the bound (quantization groups: 5)."""
    for path in sorted(CONFIG_DIR.glob("*.json"))[:6]:
        body = {
            "model": {"name": path.stem, "config": json.loads(path.read_text())},
            "device": "NVIDIA_B200_SXM_180G",
            "num_queries": 1,
            "query_length": 16,
            "tp_size": 8,
        }
        response = client.post("/v1/forward", json=body)
        assert response.status_code in (200, 422), response.text
        if response.status_code == 422:  # an unsupported architecture, never the bound
            assert "nested deeper" not in response.text


def test_a_device_at_the_physical_floors_still_answers_finite_numbers(
    client: TestClient,
) -> None:
    """The smallest rates and efficiencies a device may have give slow, finite answers."""
    body = custom(
        hbm_bandwidth_gb_s=1e-3,
        memory_efficiency=1e-3,
        interconnect=[{**TIER, "bandwidth_gb_s": 1e-3, "efficiency": 1e-3}],
    )
    response = client.post("/v1/simulate", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    for key in ("ttft_ms", "tpot_ms", "makespan_ms"):
        assert isinstance(result[key], float) and result[key] > 1e6


def test_a_rejected_value_is_shown_cut() -> None:
    err = InvalidParameterError("field", "x" * 10_000, "short")
    assert len(str(err)) < 300 and str(err).endswith("is invalid: must be short")
    deep = InvalidParameterError("field", nested(5000), "short")
    assert "nested too deep" in str(deep) or len(str(deep)) < 300


def test_crlf_in_the_path_cannot_forge_a_log_line(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    """D8: ``%0d%0a`` decodes to CR LF in the path; the access line escapes it."""
    with caplog.at_level(logging.INFO, logger="chunkwise.access"):
        client.get("/v1/models%0d%0aFORGED 200 OK")
    lines = [r.getMessage() for r in caplog.records if r.name == "chunkwise.access"]
    assert lines, "no access line"
    assert all("\r" not in line and "\n" not in line for line in lines)
    assert any("\\x0d\\x0aFORGED" in line for line in lines)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("/v1/models", "/v1/models"), ("a\r\nb", "a\\x0d\\x0ab"), ("\x1b[31m", "\\x1b[31m")],
)
def test_loggable_escapes_only_unprintable_characters(text: str, expected: str) -> None:
    assert loggable(text) == expected
