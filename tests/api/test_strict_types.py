"""Strict types on the wire: a JSON value of another type is a 422 naming its field (``false``
is not a number, ``0`` not a boolean, ``"0.1"`` not a number), and a calibration file's numbers
are plain ASCII decimals with ``num_devices`` read, not ignored."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.helpers import assert_names_field
from tests.api.test_calibrations import _csv, _rows

_LENGTHS = {
    "model": "Qwen/Qwen3-0.6B",
    "device": "TEST_DEVICE",
    "input_length": 512,
    "output_length": 32,
}
_SIMULATE = {**_LENGTHS, "concurrency": 4}


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/simulate", {**_SIMULATE, "prefix_cache_hit_rate": False}, "prefix_cache_hit_rate"),
        ("/v1/simulate", {**_SIMULATE, "ttft_limit_ms": True}, "ttft_limit_ms"),
        ("/v1/simulate", {**_SIMULATE, "prefix_cache_hit_rate": "0.1"}, "prefix_cache_hit_rate"),
        ("/v1/simulate", {**_SIMULATE, "include_timeline": 0}, "include_timeline"),
        ("/v1/simulate", {**_SIMULATE, "force_simulation": "true"}, "force_simulation"),
        ("/v1/simulate", {**_SIMULATE, "engine_options": {"step_host_ms": False}}, "step_host_ms"),
        (
            "/v1/simulate",
            {**_SIMULATE, "engine_options": {"overlap_scheduling": 1}},
            "overlap_scheduling",
        ),
        ("/v1/simulate", {**_SIMULATE, "num_mtp_tokens": 1, "mtp_acceptance_rates": [True]}, 0),
        (
            "/v1/optimize",
            {**_LENGTHS, "num_devices": 1, "tpot_limit_ms": 100, "include_probes": 0},
            "include_probes",
        ),
        (
            "/v1/plan",
            {**_LENGTHS, "request_rate": True, "tpot_limit_ms": 100},
            "request_rate",
        ),
        (
            "/v1/forward",
            {**_LENGTHS, "num_queries": 1, "query_length": 8, "decode": 0},
            "decode",
        ),
    ],
)
def test_a_value_of_another_json_type_is_a_422_naming_it(
    client: TestClient, path: str, body: dict[str, Any], field: str | int
) -> None:
    if path == "/v1/forward":
        body = {k: v for k, v in body.items() if k not in ("input_length", "output_length")}
    assert_names_field(client.post(path, json=body), field)


def test_a_boolean_point_value_is_a_422_naming_it(client: TestClient) -> None:
    body = {"points": [{**_rows(2)[0], "tp": True}, _rows(2)[1]]}
    response = client.post("/v1/calibrations", json=body)
    assert response.status_code == 422, response.text
    assert {tuple(e["loc"][:4]) for e in response.json()["errors"]} == {("body", "points", 0, "tp")}


def test_an_integer_is_still_a_number(client: TestClient) -> None:
    response = client.post("/v1/simulate", json={**_SIMULATE, "ttft_limit_ms": 500})
    assert response.status_code == 200, response.text


def _file_with(column: str, value: str) -> str:
    rows = _rows(2)
    return _csv([{**rows[0], column: value}, rows[1]])


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("isl", "1_000"),
        ("concurrency", "\u0661\u0666"),  # Arabic-Indic 16
        ("tp", "\uff12"),  # a full-width 2
        ("ttft_ms", "1_000.5"),
        ("tpot_ms", "\u0661\u0662.5"),
        ("ttft_ms", "infinity"),
        ("tpot_ms", " nan"),
        ("num_devices", "7"),  # the rows are tp 2 x pp 1 x attn_dp 1
        ("num_devices", "2.0"),
    ],
)
def test_a_calibration_file_takes_plain_ascii_decimals_and_its_num_devices(
    client: TestClient, column: str, value: str
) -> None:
    response = client.post("/v1/calibrations", json={"csv": _file_with(column, value)})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    (error,) = response.json()["errors"]
    assert error["loc"][-1].endswith(f".{column}"), error


def test_a_blank_or_matching_num_devices_is_read(client: TestClient) -> None:
    rows = _rows(2)
    assert rows[0]["num_devices"] == "2"
    blank = _csv([{**rows[0], "num_devices": ""}, rows[1]])
    response = client.post("/v1/calibrations", json={"csv": blank})
    assert response.status_code == 201, response.text
