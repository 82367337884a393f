"""``/v1/sweeps`` without a broker (the API's own process pool): 202 with ``Location``, the
Idempotency-Key, progress, rows in csv / json / parquet while and after it runs, 422 naming the
field or the count before anything is queued, 404 for an unknown id or another key's sweep,
cancel."""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from app.api.auth import key_digest
from app.main import create_app
from app.settings import Settings
from tests.api import test_sweep

BASE = {**test_sweep.BASE, "concurrency": 1}
SPEC = {"operation": "simulate", "base": BASE, "grid": {"concurrency": [1, 2, 4]}}
OWNER, OTHER = "owner-token", "other-token"


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    settings = Settings(cache_backend="memory", log_level="warning", api_keys=f"{OWNER},{OTHER}")
    assert key_digest(OWNER) != key_digest(OTHER)
    with TestClient(create_app(settings)) as made:
        made.headers["Authorization"] = f"Bearer {OWNER}"
        yield made


def wait_done(client: TestClient, sweep_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status = client.get(f"/v1/sweeps/{sweep_id}").json()
        if status["state"] == "done":
            return dict(status)
        time.sleep(0.2)
    raise AssertionError(f"sweep {sweep_id} did not finish")


@pytest.fixture(scope="module")
def finished(client: TestClient) -> dict[str, Any]:
    created = client.post("/v1/sweeps", json=SPEC, headers={"Idempotency-Key": "first"})
    assert created.status_code == 202, created.text
    body = created.json()
    assert created.headers["location"] == f"/v1/sweeps/{body['id']}"
    assert body["total"] == 3 and body["executor"] == "local"
    return wait_done(client, body["id"])


def test_a_sweep_runs_to_its_rows(client: TestClient, finished: dict[str, Any]) -> None:
    assert (finished["done"], finished["failed"], finished["total"]) == (3, 0, 3)
    assert finished["rate_scenarios_s"] > 0 and finished["eta_s"] is None
    rows = client.get(f"/v1/sweeps/{finished['id']}/results?format=json").json()
    assert [row["concurrency"] for row in rows] == [1, 2, 4]  # the spec's order
    assert all(row["error"] is None and row["ttft_ms"] > 0 for row in rows)
    text = client.get(f"/v1/sweeps/{finished['id']}/results").text
    table = list(csv.DictReader(io.StringIO(text)))
    assert [row["scenario_key"] for row in table] == [row["scenario_key"] for row in rows]
    parquet = client.get(f"/v1/sweeps/{finished['id']}/results?format=parquet")
    assert parquet.headers["content-type"] == "application/vnd.apache.parquet"
    read = pq.read_table(pa.BufferReader(parquet.content)).to_pylist()
    assert [row["throughput_tokens_s"] for row in read] == [
        row["throughput_tokens_s"] for row in rows
    ]


def test_the_idempotency_key_returns_the_same_sweep(
    client: TestClient, finished: dict[str, Any]
) -> None:
    again = client.post("/v1/sweeps", json=SPEC, headers={"Idempotency-Key": "first"})
    assert again.status_code == 202 and again.json()["id"] == finished["id"]
    other_key = client.post(
        "/v1/sweeps",
        json=SPEC,
        headers={"Idempotency-Key": "first", "Authorization": f"Bearer {OTHER}"},
    )
    assert other_key.status_code == 202 and other_key.json()["id"] != finished["id"]


def test_another_key_is_told_the_sweep_does_not_exist(
    client: TestClient, finished: dict[str, Any]
) -> None:
    other = {"Authorization": f"Bearer {OTHER}"}
    path = f"/v1/sweeps/{finished['id']}"
    for method, url in (("GET", path), ("GET", f"{path}/results"), ("DELETE", path)):
        response = client.request(method, url, headers=other)
        assert response.status_code == 404, (method, url)
        assert response.headers["content-type"] == "application/problem+json"
    assert client.get(path).status_code == 200


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({**SPEC, "grid": {"concurrency": [1], "no_such_field": [1]}}, "no_such_field"),
        ({**SPEC, "grid": {"concurrency": [1, -2]}}, "concurrency"),
        ({**SPEC, "operation": "train"}, "operation"),
        ({**SPEC, "grid": {"concurrency": []}}, "grid.concurrency"),
        (
            {
                **SPEC,
                "grid": {"concurrency": list(range(1, 1001)), "input_length": list(range(101))},
            },
            "101000 scenarios",
        ),
        ({"csv": "operation,concurrency\nsimulate,1\n"}, "input_length"),
        ({"csv": "concurrency\n1\n"}, "operation"),
    ],
    ids=["unknown-field", "bad-value", "operation", "empty-list", "count", "csv-row", "csv-head"],
)
def test_a_bad_spec_is_a_422_naming_it(
    client: TestClient, spec: dict[str, Any], named: str
) -> None:
    response = client.post("/v1/sweeps", json=spec)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert named in response.json()["detail"]


def test_a_spec_with_both_grid_and_csv_is_a_422(client: TestClient) -> None:
    response = client.post("/v1/sweeps", json={**SPEC, "csv": "operation\nsimulate\n"})
    assert response.status_code == 422


def test_an_unknown_sweep_is_a_404(client: TestClient) -> None:
    for path in ("/v1/sweeps/swp-" + "0" * 32, "/v1/sweeps/nonsense/results"):
        response = client.get(path)
        assert response.status_code == 404 and response.json()["status"] == 404
    assert client.delete("/v1/sweeps/swp-" + "0" * 32).status_code == 404


def test_a_csv_spec_and_a_cancel(client: TestClient) -> None:
    """A CSV sweep; cancelled at once, its state says so (or done when it beat the cancel),
    and stays so: a batch in flight that finishes after the cancel does not turn it to done
    (the DELETE answered cancelled, then a GET read done: 1 run in ~10 on a loaded machine)."""
    lines = ["operation,model,device,input_length,output_length,concurrency"]
    lines += [
        f"simulate,Qwen/Qwen3-0.6B,TEST_DEVICE,{n},16,{c}" for n in (128, 256) for c in (1, 2)
    ]
    created = client.post("/v1/sweeps", json={"csv": "\n".join(lines)})
    assert created.status_code == 202, created.text
    sweep_id = created.json()["id"]
    assert created.json()["total"] == 4
    cancelled = client.delete(f"/v1/sweeps/{sweep_id}")
    assert cancelled.status_code == 200
    assert cancelled.json()["state"] in ("cancelled", "done")
    assert client.get(f"/v1/sweeps/{sweep_id}").json()["state"] == cancelled.json()["state"]
    rows = client.get(f"/v1/sweeps/{sweep_id}/results?format=json").json()
    assert len(rows) <= 4 and len({row["scenario_key"] for row in rows}) == len(rows)


def test_a_sweep_applies_a_calibration_the_api_keeps_in_its_own_process(
    client: TestClient,
) -> None:
    """No broker, no Redis: the API keeps the profile itself and its pool process cannot read
    it, so the batches carry the profiles their scenarios name and run as the sweep's owner;
    each row is the API's own answer to that scenario."""
    from tests.api.test_calibrations import SIMULATE, _rows

    created = client.post("/v1/calibrations", json={"points": _rows()})
    assert created.status_code == 201, created.text
    base = {**SIMULATE, "calibration": created.json()["id"]}
    spec = {"operation": "simulate", "base": base, "grid": {"concurrency": [4, 16]}}
    submitted = client.post("/v1/sweeps", json=spec)
    assert submitted.status_code == 202, submitted.text
    status = wait_done(client, submitted.json()["id"])
    assert (status["done"], status["failed"]) == (2, 0)
    rows = client.get(f"/v1/sweeps/{status['id']}/results?format=json").json()
    for row in rows:
        alone = client.post("/v1/simulate", json={**base, "concurrency": row["concurrency"]})
        assert row["error"] is None and row["ttft_ms"] == alone.json()["ttft_ms"]
