"""Optional bearer-token authentication (``APP_API_KEYS`` / ``APP_API_KEYS_FILE``) through the
real app: without keys everything is open as before; with keys every ``/v1`` operation needs a
valid token (401 problem+json with ``WWW-Authenticate: Bearer``), health, metrics, docs and the
dashboard stay open, and a stored calibration belongs to the key that created it: another key
reading, applying or deleting it is told it does not exist (404 / 422), as for an unknown id.
Calibration ids are random (128 bits), never a digest of the points."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.auth import key_digest
from app.main import create_app
from app.settings import Settings
from tests.api.test_calibrations import SIMULATE, _rows

OWNER, OTHER = "owner-token-1", "other-token-2"
NO_KEY: dict[str, str] = {}
WRONG = {"Authorization": "Bearer not-a-key"}
MALFORMED = {"Authorization": f"Basic {OWNER}"}


def _as(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[TestClient]:
    """OWNER from APP_API_KEYS, OTHER from the hashed keys file."""
    keys = tmp_path / "keys"
    keys.write_text(f"# hashed tokens\nsha256:{key_digest(OTHER)}  # the other team\n\n")
    settings = Settings(
        cache_backend="memory", log_level="warning", api_keys=OWNER, api_keys_file=str(keys)
    )
    with TestClient(create_app(settings)) as client:
        yield client


def _assert_401(response: Any) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json()["title"] == "Unauthorized"


_LENGTHS = {"model": "Qwen/Qwen3-0.6B", "device": "TEST_DEVICE", "input_length": 512,
            "output_length": 32}  # fmt: skip
#: Every /v1 operation, with a body that is valid when authenticated.
OPERATIONS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("POST", "/v1/simulate", SIMULATE),
    ("POST", "/v1/optimize", {**_LENGTHS, "num_devices": 1, "tpot_limit_ms": 100}),
    ("POST", "/v1/plan", {**_LENGTHS, "request_rate": 1, "tpot_limit_ms": 100,
                          "num_requests": 20}),
    ("POST", "/v1/chunk-plan", {"input_length": 1000, "max_batched_tokens": 256}),
    ("POST", "/v1/forward", {"model": "Qwen/Qwen3-0.6B", "device": "TEST_DEVICE",
                             "num_queries": 1, "query_length": 8}),
    ("GET", "/v1/models", None),
    ("GET", "/v1/models/Qwen/Qwen3-0.6B", None),
    ("GET", "/v1/devices", None),
    ("GET", "/v1/devices/TEST_DEVICE", None),
    ("POST", "/v1/calibrations", {"points": _rows(2)}),
    ("GET", "/v1/calibrations/cal-" + "0" * 32, None),
    ("DELETE", "/v1/calibrations/cal-" + "0" * 32, None),
    ("POST", "/v1/deploy", {"engine": "vllm", "model": "Qwen/Qwen3-0.6B",
                            "device": "TEST_DEVICE", "num_devices": 1, "tp": 1}),
    ("GET", "/v1/deploy?engine=vllm&model=Qwen/Qwen3-0.6B&device=TEST_DEVICE&num_devices=1"
            "&tp=1", None),
    ("POST", "/v1/sweeps", {"operation": "simulate", "base": SIMULATE,
                            "grid": {"concurrency": [1]}}),
    ("GET", "/v1/sweeps/swp-" + "0" * 32, None),
    ("GET", "/v1/sweeps/swp-" + "0" * 32 + "/results", None),
    ("DELETE", "/v1/sweeps/swp-" + "0" * 32, None),
]  # fmt: skip


@pytest.mark.parametrize(("method", "path", "body"), OPERATIONS)
@pytest.mark.parametrize("headers", [NO_KEY, WRONG, MALFORMED], ids=["none", "wrong", "basic"])
def test_every_v1_operation_needs_a_valid_key(
    keyed: TestClient,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    headers: dict[str, str],
) -> None:
    _assert_401(keyed.request(method, path, json=body, headers=headers))


@pytest.mark.parametrize(("method", "path", "body"), OPERATIONS)
def test_a_valid_key_is_served(
    keyed: TestClient, method: str, path: str, body: dict[str, Any] | None
) -> None:
    response = keyed.request(method, path, json=body, headers=_as(OTHER))
    expected = (
        404
        if "/calibrations/cal-" in path or "/sweeps/swp-" in path
        else 201
        if method == "POST" and (path == "/v1/calibrations")
        else 202
        if method == "POST" and (path == "/v1/sweeps")
        else 200
    )
    assert response.status_code == expected, response.text


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/", "/openapi.json",
                                  "/docs", "/sweeps", "/static/js/main.js"])  # fmt: skip
def test_health_metrics_docs_and_the_dashboard_stay_open(keyed: TestClient, path: str) -> None:
    assert keyed.get(path).status_code == 200


def test_a_calibration_belongs_to_the_key_that_stored_it(keyed: TestClient) -> None:
    created = keyed.post("/v1/calibrations", json={"points": _rows()}, headers=_as(OWNER))
    assert created.status_code == 201, created.text
    cid = created.json()["id"]
    path = f"/v1/calibrations/{cid}"
    # No key, a wrong key: 401 before anything is looked up.
    for headers in (NO_KEY, WRONG):
        _assert_401(keyed.get(path, headers=headers))
        _assert_401(keyed.delete(path, headers=headers))
    # Another key: exactly what an unknown id answers (its existence is not revealed).
    unknown = "/v1/calibrations/cal-" + "f" * 32
    for method in ("GET", "DELETE"):
        other = keyed.request(method, path, headers=_as(OTHER))
        never = keyed.request(method, unknown, headers=_as(OTHER))
        assert other.status_code == never.status_code == 404
        assert other.json()["title"] == never.json()["title"]
    applied = keyed.post("/v1/simulate", json={**SIMULATE, "calibration": cid}, headers=_as(OTHER))
    assert applied.status_code == 422 and "stored calibration" in applied.json()["detail"]
    # The owner reads, applies and deletes it.
    assert keyed.get(path, headers=_as(OWNER)).json()["profile"]["id"] == cid
    mine = keyed.post("/v1/simulate", json={**SIMULATE, "calibration": cid}, headers=_as(OWNER))
    assert mine.status_code == 200 and mine.json()["calibration"]["id"] == cid
    assert keyed.delete(path, headers=_as(OTHER)).status_code == 404  # not the other's to delete
    assert keyed.delete(path, headers=_as(OWNER)).status_code == 204
    assert keyed.get(path, headers=_as(OWNER)).status_code == 404


def test_calibration_ids_are_random_128_bits(client: TestClient) -> None:
    """The same points twice: two ids, neither computable from the points."""
    first = client.post("/v1/calibrations", json={"points": _rows()}).json()["id"]
    second = client.post("/v1/calibrations", json={"points": _rows()}).json()["id"]
    assert first != second
    for cid in (first, second):
        assert re.fullmatch(r"cal-[0-9a-f]{32}", cid)
        assert client.get(f"/v1/calibrations/{cid}").status_code == 200


def test_without_keys_everything_is_open_as_before(client: TestClient) -> None:
    assert client.get("/v1/models").status_code == 200
    assert client.get("/v1/models", headers=WRONG).status_code == 200  # a token is ignored


def test_a_malformed_keys_file_stops_the_service(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("plain-token-not-hashed\n")
    with pytest.raises(ValueError, match="keys:1: not a hashed key"):
        create_app(Settings(api_keys_file=str(keys)))
