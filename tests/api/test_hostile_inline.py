"""Hostile inline models and custom devices: a 422 problem, never a 500, never minutes of work.

An inline ``config.json`` and a custom device reach the catalog's parsers (``app/core``) as the
client wrote them; strings where numbers belong, NaN, 1e300 or a billion layers must come back
as 422 problem+json (found by fuzzing: each of these was a 500, and ``num_hidden_layers`` of
1e8 cost ~10 s and ~1 GB before the inline bounds).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core import limits

CONFIGS = Path(__file__).resolve().parents[2] / "app/core/catalog/model_configs"
BASE_CONFIGS = {
    name: json.loads((CONFIGS / name).read_text())
    for name in (
        "mistral-7b-v0.1.json",
        "qwen3_moe_30b_a3b.json",
        "deepseek_v3.json",
        "gpt-j-6b.json",
    )
}
FORWARD = {"device": "TEST_DEVICE", "num_queries": 2, "query_length": 64}
SIMULATE = {
    "device": "TEST_DEVICE",
    "input_length": 3000,
    "output_length": 32,
    "max_batched_tokens": 1024,
    "concurrency": 4,
}

hostile = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64),
    st.sampled_from([0, 1, -1, 2**31, 10**9, 1e300, -1e300, 1.5, 1e-300]),
    st.text(max_size=4),
    st.none(),
    st.booleans(),
    st.lists(st.integers(min_value=-2, max_value=4), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def assert_problem_or_ok(response: Any) -> None:
    assert response.status_code in (200, 422), response.text
    if response.status_code == 422:
        assert response.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("sliding_window", "abc"),
        ("sliding_window", [1]),
        ("hidden_size", 1e300),
        ("num_hidden_layers", 10**8),
        ("vocab_size", 10**30),
        ("layer_types", "x"),
    ],
)
def test_each_former_500_is_a_422(client: TestClient, key: str, value: object) -> None:
    config = {**BASE_CONFIGS["mistral-7b-v0.1.json"], key: value}
    started = time.monotonic()
    response = client.post(
        "/v1/forward", json={**FORWARD, "model": {"name": "x", "config": config}}
    )
    assert time.monotonic() - started < 5
    assert_problem_or_ok(response)


@pytest.mark.parametrize(
    ("key", "value"),
    [("num_experts", 0), ("num_experts_per_tok", 0), ("num_experts_per_tok", 1000)],
)
def test_moe_routing_outside_the_experts_is_422(client: TestClient, key: str, value: int) -> None:
    # Found by the mutation test below: 0 experts divided by zero in the runner (a 500).
    config = {**BASE_CONFIGS["qwen3_moe_30b_a3b.json"], key: value}
    response = client.post(
        "/v1/forward", json={**FORWARD, "model": {"name": "x", "config": config}}
    )
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["loc"] == ["body", key]


def test_nan_and_infinity_in_the_raw_json_are_422(client: TestClient) -> None:
    for literal in (b"NaN", b"Infinity", b"-Infinity"):
        body = (
            b'{"model": {"name": "x", "config": {"model_type": "mistral", "hidden_size": '
            + literal
            + b'}}, "device": "TEST_DEVICE", "num_queries": 1, "query_length": 16}'
        )
        response = client.post(
            "/v1/forward", content=body, headers={"content-type": "application/json"}
        )
        assert_problem_or_ok(response)
        assert response.status_code == 422


def test_layer_count_bound(client: TestClient) -> None:
    config = {
        **BASE_CONFIGS["mistral-7b-v0.1.json"],
        "num_hidden_layers": limits.MAX_INLINE_LAYERS + 1,
    }
    response = client.post(
        "/v1/forward", json={**FORWARD, "model": {"name": "x", "config": config}}
    )
    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"] == ["body", "model.config.num_hidden_layers"]


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    base=st.sampled_from(sorted(BASE_CONFIGS)),
    overrides=st.dictionaries(
        st.sampled_from(
            [
                "model_type",
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "intermediate_size",
                "vocab_size",
                "sliding_window",
                "use_sliding_window",
                "max_window_layers",
                "layer_types",
                "num_experts",
                "num_experts_per_tok",
                "n_routed_experts",
                "moe_intermediate_size",
                "kv_lora_rank",
                "q_lora_rank",
                "qk_rope_head_dim",
                "first_k_dense_replace",
                "moe_layer_freq",
                "quantization_config",
                "n_embd",
                "n_head",
                "n_layer",
                "rotary_dim",
            ]
        ),
        hostile,
        max_size=3,
    ),
    path=st.sampled_from(["/v1/forward", "/v1/simulate"]),
)
def test_mutated_inline_configs_never_500(
    client: TestClient, base: str, overrides: dict[str, Any], path: str
) -> None:
    config = {**BASE_CONFIGS[base], **overrides}
    body = FORWARD if path == "/v1/forward" else SIMULATE
    started = time.monotonic()
    response = client.post(path, json={**body, "model": {"name": "x", "config": config}})
    assert time.monotonic() - started < 10
    assert_problem_or_ok(response)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    overrides=st.dictionaries(
        st.sampled_from(
            [
                "hbm_capacity_gb",
                "hbm_bandwidth_gb_s",
                "peak_bf16_tflops",
                "peak_fp8_tflops",
                "interconnect",
                "base",
                "unknown_field",
            ]
        ),
        st.one_of(hostile, st.lists(st.dictionaries(st.text(max_size=8), hostile), max_size=2)),
        max_size=3,
    ),
    path=st.sampled_from(["/v1/forward", "/v1/simulate"]),
)
def test_mutated_custom_devices_never_500(
    client: TestClient, overrides: dict[str, Any], path: str
) -> None:
    device = {"name": "custom", "base": "TEST_DEVICE", **overrides}
    body = FORWARD if path == "/v1/forward" else SIMULATE
    response = client.post(path, json={**body, "model": "Qwen/Qwen3-0.6B", "device": device})
    assert response.status_code in (200, 404, 422), response.text
    if response.status_code != 200:
        assert response.headers["content-type"] == "application/problem+json"
