"""A generated client sends every default ``/openapi.json`` declares: sending them must ask the
same question as leaving them out. A field the server derives from others (``dp_size`` from
``num_devices / tp_size``, the quantization actions from the engine profile, the search's
``max_batch_size`` from the simulation bounds) therefore declares no default (null: derived),
and the answer's ``input`` shows the value used."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

_QWEN = {"model": "Qwen/Qwen3-0.6B", "device": "TEST_DEVICE"}
_LENGTHS = {**_QWEN, "input_length": 512, "output_length": 32}

#: dp_size derived: 8 devices over tp_size 2 are 4 replicas.
_SIMULATE = {**_LENGTHS, "concurrency": 8, "num_devices": 8, "tp_size": 2}
#: quantize_linear_action derived: msmodeling's W8A8_DYNAMIC linear layers.
_MSMODELING = {"engine": "msmodeling"}
#: quantize_attention_action derived: trtllm's FP8 KV cache for an FP8 checkpoint.
_TRTLLM_FP8 = {"engine": "trtllm", "quantize_linear_action": "FP8"}
_SEARCH = {**_LENGTHS, "num_devices": 2, "tpot_limit_ms": 100}
_PLAN = {**_LENGTHS, "request_rate": 2, "tpot_limit_ms": 100, "num_requests": 50}
_DISAGG = {"mode": "disagg", "num_devices": 2}
#: 512 prefill chunks: the search cap shrinks to 1,048,576 / 512 = 2048 requests per replica.
_LONG_SEARCH = {
    **_QWEN,
    "input_length": 8192,
    "output_length": 4,
    "max_batched_tokens": 16,
    "num_devices": 1,
    "tpot_limit_ms": 1000,
    "workload": "burst",
}

#: Valid bodies per operation, leaving every optional field out.
BODIES: list[tuple[str, dict[str, Any]]] = [
    ("/v1/simulate", _SIMULATE),
    ("/v1/simulate", {**_LENGTHS, "concurrency": 8, **_MSMODELING}),
    ("/v1/simulate", {**_LENGTHS, "concurrency": 8, **_TRTLLM_FP8}),
    ("/v1/simulate", {**_LENGTHS, **_DISAGG, "prefill_workers": 1, "decode_workers": 1,
                      "concurrency": 4}),
    ("/v1/optimize", _SEARCH),
    ("/v1/optimize", {**_SEARCH, **_MSMODELING}),
    ("/v1/optimize", {**_SEARCH, **_TRTLLM_FP8}),
    ("/v1/optimize", _LONG_SEARCH),  # max_batch_size derived: 4096 shrunk to 2048
    ("/v1/optimize", {**_SEARCH, **_DISAGG, "requests_per_client": 2}),  # the client bound
    ("/v1/plan", _PLAN),
    ("/v1/plan", {**_PLAN, **_MSMODELING}),
    ("/v1/forward", {**_QWEN, "num_queries": 2, "query_length": 64, "num_devices": 4}),
    ("/v1/chunk-plan", {"input_length": 5000, "max_batched_tokens": 2048}),
    ("/v1/deploy", {"engine": "vllm", "model": "Qwen/Qwen3-8B",
                    "device": "NVIDIA_H200_SXM_141G", "num_devices": 8, "tp": 2, "dp": 4}),
]  # fmt: skip


def _schema_defaults(schema: dict[str, Any], path: str) -> dict[str, Any]:
    """The top-level defaults of ``path``'s request body, as a generated client fills them."""
    ref = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    body = schema["components"]["schemas"][ref["$ref"].rsplit("/", 1)[-1]]
    return {
        name: prop["default"]
        for name, prop in body["properties"].items()
        if "default" in prop and prop["default"] is not None
    }


def _answer(response: Any) -> Any:
    assert response.status_code == 200, response.text
    answer = response.json()
    answer.pop("cache", None)  # counters of this request (a response-cache hit or not)
    answer.pop("stats", None)  # the search's own counters and time
    return answer


@pytest.mark.parametrize(("path", "body"), BODIES)
def test_sending_every_schema_default_asks_the_same_question(
    client: TestClient, path: str, body: dict[str, Any]
) -> None:
    schema = client.get("/openapi.json").json()
    defaults = _schema_defaults(schema, path)
    assert defaults  # the comparison sends something
    filled = {**defaults, **body}
    assert _answer(client.post(path, json=filled)) == _answer(client.post(path, json=body))


@pytest.mark.parametrize(
    ("schema_name", "field"),
    [
        ("SimulateRequest", "dp_size"),
        ("OptimizeRequest", "max_batch_size"),
        *[
            (name, action)
            for name in ("SimulateRequest", "OptimizeRequest", "PlanRequest", "ForwardRequest")
            for action in ("quantize_linear_action", "quantize_attention_action")
        ],
    ],
)
def test_derived_fields_declare_no_default(
    client: TestClient, schema_name: str, field: str
) -> None:
    prop = client.get("/openapi.json").json()["components"]["schemas"][schema_name]
    assert prop["properties"][field].get("default") is None


@pytest.mark.parametrize(
    ("path", "body", "echoed"),
    [
        ("/v1/simulate", {**_SIMULATE, "dp_size": None}, {"dp_size": 4, "num_devices": 8}),
        ("/v1/simulate", {**_LENGTHS, "concurrency": 8}, {"dp_size": 1, "num_devices": 1}),
        (
            "/v1/simulate",
            {**_LENGTHS, "concurrency": 8, **_MSMODELING},
            {"quantize_linear_action": "W8A8_DYNAMIC", "quantize_attention_action": "DISABLED"},
        ),
        (
            "/v1/optimize",
            {**_SEARCH, **_TRTLLM_FP8},
            {"quantize_linear_action": "FP8", "quantize_attention_action": "FP8"},
        ),
        ("/v1/optimize", _LONG_SEARCH, {"max_batch_size": 2048}),
        (
            "/v1/optimize",
            {**_SEARCH, **_DISAGG, "requests_per_client": 2},
            {"max_batch_size": 65536},  # 131,072 / (2 requests x 1 chunk), within the wire bound
        ),
        (
            "/v1/plan",
            {**_PLAN, **_MSMODELING, "quantize_attention_action": None},
            {"quantize_linear_action": "W8A8_DYNAMIC", "quantize_attention_action": "DISABLED"},
        ),
        (
            "/v1/forward",
            {**_QWEN, "num_queries": 2, "query_length": 64},
            {"quantize_linear_action": "DISABLED", "quantize_attention_action": "DISABLED"},
        ),
    ],
)
def test_the_echo_shows_the_derived_value_and_resending_it_reproduces_the_answer(
    client: TestClient, path: str, body: dict[str, Any], echoed: dict[str, Any]
) -> None:
    answer = _answer(client.post(path, json=body))
    assert {name: answer["input"][name] for name in echoed} == echoed
    assert _answer(client.post(path, json=answer["input"])) == answer
