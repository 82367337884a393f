"""Property: no input produces a 500 (every answer is a 200 or a 4xx/503 problem+json)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

MODELS = ["Qwen/Qwen3-32B", "qwen3-0.6b", "meta-llama/Llama-3.1-8B", "nope", ""]
DEVICES = ["ATLAS_800_A2_376T_64G", "NVIDIA_H100_SXM_80G", "TEST_DEVICE", "nope"]

ints = st.one_of(
    st.integers(min_value=-3, max_value=70_000),
    st.sampled_from([0, 1, 2**31, 10**12]),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=3),
    st.none(),
    st.booleans(),
)
rates = st.one_of(st.floats(min_value=-1, max_value=2), st.sampled_from([0.0, 0.5, 0.999999]))
sizes = st.one_of(st.none(), st.lists(st.integers(min_value=-1, max_value=20), max_size=20))


VALID: dict[str, dict[str, Any]] = {
    "/v1/chunk-plan": {"input_length": 5000, "max_batched_tokens": 2048},
    "/v1/simulate": {
        "model": "Qwen/Qwen3-0.6B",
        "device": "TEST_DEVICE",
        "input_length": 3000,
        "output_length": 64,
        "max_batched_tokens": 1024,
        "concurrency": 8,
    },
    "/v1/simulate poisson": {
        "model": "Qwen/Qwen3-0.6B",
        "device": "TEST_DEVICE",
        "input_length": 3000,
        "output_length": 64,
        "max_batched_tokens": 1024,
        "workload": "poisson",
        "request_rate": 20.0,
        "num_requests": 100,
    },
    "/v1/optimize": {
        "model": "Qwen/Qwen3-0.6B",
        "device": "TEST_DEVICE",
        "num_devices": 2,
        "input_length": 3000,
        "output_length": 64,
        "max_batched_tokens": 1024,
        "tpot_limit_ms": 50,
        "max_batch_size": 64,
    },
    "/v1/forward": {
        "model": "Qwen/Qwen3-0.6B",
        "device": "TEST_DEVICE",
        "num_queries": 2,
        "query_length": 128,
    },
}


def body(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Random overrides of a few fields (so most draws get past schema validation)."""
    return st.fixed_dictionaries({}, optional=fields)


COMMON = {
    "model": st.sampled_from(MODELS),
    "device": st.sampled_from(DEVICES),
    "input_length": ints,
    "output_length": ints,
    "max_batched_tokens": ints,
    "prefix_cache_hit_rate": rates,
    "num_mtp_tokens": st.integers(min_value=-1, max_value=10),
    "mtp_acceptance_rates": st.lists(rates, max_size=10),
    "quantize_linear_action": st.sampled_from(["DISABLED", "W8A8_DYNAMIC", "FP8", "MXFP4", "x"]),
    "scheduler": st.fixed_dictionaries(
        {"name": st.sampled_from(["decode_first_with_slack", "vllm", "sglang", "x"])},
        optional={
            "slack_ratio": rates,
            "prefill_order": st.sampled_from(["fifo", "continue_first"]),
            "max_num_seqs": st.integers(min_value=0, max_value=64),
            "mixed_latency": st.sampled_from(["max", "sum"]),
        },
    ),
    "workload": st.sampled_from(["burst", "closed_loop", "poisson"]),
    "requests_per_client": st.integers(min_value=0, max_value=5),
}

SIMULATE = {
    **COMMON,
    "concurrency": ints,
    "tp_size": st.integers(min_value=0, max_value=16),
    "dp_size": st.integers(min_value=0, max_value=4),
    "ep_size": st.integers(min_value=0, max_value=16),
    "include_timeline": st.booleans(),
    "force_simulation": st.booleans(),
    "request_rate": st.one_of(
        st.floats(min_value=-1, max_value=1e7), st.sampled_from([0.0, 1e-9, 1e6]), ints
    ),
    "max_concurrency": ints,
    "num_requests": ints,
    "seed": ints,
}

ENDPOINTS = {
    "/v1/chunk-plan": body(input_length=ints, max_batched_tokens=ints, prefix_cache_hit_rate=rates),
    "/v1/simulate": body(**SIMULATE),
    "/v1/simulate poisson": body(**SIMULATE),
    "/v1/optimize": body(
        **COMMON,
        num_devices=st.integers(min_value=-1, max_value=16),
        tp_sizes=sizes,
        ep_sizes=sizes,
        mode=st.sampled_from(["agg", "disagg_prefill", "disagg_decode", "pd_ratio", "disagg", "x"]),
        max_workers=st.integers(min_value=0, max_value=8),
        prefill_devices_per_instance=st.integers(min_value=0, max_value=16),
        decode_devices_per_instance=st.integers(min_value=0, max_value=16),
        ttft_limit_ms=st.one_of(st.none(), rates),
        tpot_limit_ms=st.one_of(st.none(), st.floats(min_value=-1, max_value=100)),
        max_batch_size=st.integers(min_value=0, max_value=128),
    ),
    "/v1/forward": body(
        model=st.sampled_from(MODELS),
        device=st.sampled_from(DEVICES),
        num_queries=ints,
        query_length=ints,
        context_length=ints,
        decode=st.booleans(),
        tp_size=st.integers(min_value=0, max_value=16),
        num_mtp_tokens=st.integers(min_value=-1, max_value=10),
    ),
}


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_no_input_produces_a_500(client: TestClient, data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(sorted(ENDPOINTS)))
    overrides = data.draw(ENDPOINTS[path])
    keep = data.draw(st.integers(min_value=0, max_value=3))
    payload = {**VALID[path], **dict(list(overrides.items())[:keep])}
    response = client.post(path.split()[0], json=payload)
    assert response.status_code < 500 or response.status_code == 503, response.text
    if response.status_code != 200:
        assert response.headers["content-type"] == "application/problem+json", response.text
