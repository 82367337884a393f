"""A Python client generated from ``/openapi.json`` by ``openapi-python-client`` calls every
operation of the real app, and parses every answer, errors included, into its typed model:
operation ids are short (``simulate``, ``optimize``, ...), and every error response declares
``application/problem+json`` with the ``Problem`` schema."""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.api.test_calibrations import _rows

GENERATOR = shutil.which("openapi-python-client")
OPERATION_IDS = {
    "healthz", "readyz", "metrics", "chunk_plan", "simulate", "optimize", "capacity_plan",
    "forward", "models", "devices", "model", "device", "create_calibration", "read_calibration",
    "delete_calibration", "deploy", "deploy_get", "create_sweep", "read_sweep",
    "sweep_results", "cancel_sweep",
}  # fmt: skip


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The generated package, imported, with a client whose transport is the real app."""
    assert GENERATOR is not None, (
        "openapi-python-client is a dev dependency (pip install -e .[dev])"
    )
    app = create_app(Settings(cache_backend="memory", log_level="warning"))
    root = tmp_path_factory.mktemp("client")
    schema = root / "openapi.json"
    schema.write_text(json.dumps(app.openapi()), encoding="utf-8")
    subprocess.run(
        [GENERATOR, "generate", "--path", str(schema), "--meta", "none",
         "--output-path", str(root / "chunkwise_client")],
        check=True,
        capture_output=True,
        cwd=root,
    )  # fmt: skip
    sys.path.insert(0, str(root))
    try:
        package = importlib.import_module("chunkwise_client")
        with TestClient(app) as transport:
            client = package.Client(base_url="http://testserver")
            client.set_httpx_client(transport)
            yield package, client
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m.split(".")[0] == "chunkwise_client"]:
            del sys.modules[name]


class _Tag:
    """One tag's operations of the generated package (``tag.simulate.sync(...)``)."""

    def __init__(self, package: Any, tag: str) -> None:
        self._prefix = f"{package.__name__}.api.{tag}"

    def __getattr__(self, operation: str) -> Any:
        return importlib.import_module(f"{self._prefix}.{operation}")


def _api(package: Any, tag: str) -> Any:
    return _Tag(package, tag)


def test_operation_ids_are_short_and_stable() -> None:
    schema = create_app(Settings()).openapi()
    ids = [op["operationId"] for ops in schema["paths"].values() for op in ops.values()]
    assert set(ids) == OPERATION_IDS and len(ids) == len(set(ids))
    for ops in schema["paths"].values():
        for op in ops.values():
            for status, response in op["responses"].items():
                if status.startswith(("4", "5")):
                    assert list(response.get("content", {})) == ["application/problem+json"]
                    assert response["content"]["application/problem+json"]["schema"]


def test_every_operation_through_the_generated_client(generated: Any) -> None:
    package, client = generated
    models = importlib.import_module(f"{package.__name__}.models")
    health, catalog, planning, forward, calibration, deploy = (
        _api(package, name)
        for name in ("health", "catalog", "planning", "forward", "calibration", "deploy")
    )
    assert health.healthz.sync_detailed(client=client).status_code == 200
    assert health.readyz.sync_detailed(client=client).status_code == 200
    assert health.metrics.sync_detailed(client=client).status_code == 200
    assert catalog.models.sync(client=client)
    assert catalog.devices.sync(client=client)
    assert catalog.model.sync(client=client, name="Qwen/Qwen3-0.6B") is not None
    assert catalog.device.sync(client=client, name="TEST_DEVICE") is not None
    plan = planning.chunk_plan.sync(
        client=client,
        body=models.ChunkPlanRequest.from_dict({"input_length": 3500, "max_batched_tokens": 2048}),
    )
    assert isinstance(plan, models.ChunkPlanResponse) and plan.prefill_num_chunks == 2
    base = {
        "model": "Qwen/Qwen3-0.6B",
        "device": "TEST_DEVICE",
        "input_length": 512,
        "output_length": 32,
    }
    simulated = planning.simulate.sync(
        client=client, body=models.SimulateRequest.from_dict({**base, "concurrency": 4})
    )
    assert isinstance(simulated, models.SimulateResponse) and simulated.ttft_ms > 0
    derived = planning.simulate.sync_detailed(  # the client sends every schema default
        client=client,
        body=models.SimulateRequest.from_dict(
            {**base, "concurrency": 8, "num_devices": 8, "tp_size": 2}
        ),
    )
    assert derived.status_code == 200, derived.content
    assert derived.parsed.input_.dp_size == 4 and derived.parsed.num_devices == 8
    searched = planning.optimize.sync(
        client=client,
        body=models.OptimizeRequest.from_dict({**base, "num_devices": 1, "tpot_limit_ms": 100}),
    )
    assert isinstance(searched, models.OptimizeResponse) and searched.best is not None
    capacity = planning.capacity_plan.sync(
        client=client,
        body=models.PlanRequest.from_dict(
            {**base, "request_rate": 2, "tpot_limit_ms": 100, "num_requests": 50}
        ),
    )
    assert isinstance(capacity, models.PlanResponse) and capacity.feasible
    one = forward.forward.sync(
        client=client,
        body=models.ForwardRequest.from_dict(
            {
                "model": "Qwen/Qwen3-0.6B",
                "device": "TEST_DEVICE",
                "num_queries": 1,
                "query_length": 64,
            }
        ),
    )
    assert isinstance(one, models.ForwardResponse)
    created = calibration.create_calibration.sync(
        client=client, body=models.CalibrationRequest.from_dict({"points": _rows()})
    )
    assert isinstance(created, models.CalibrationResponse)
    read = calibration.read_calibration.sync(client=client, calibration_id=created.id)
    assert isinstance(read, models.CalibrationResponse) and read.id == created.id
    deleted = calibration.delete_calibration.sync_detailed(client=client, calibration_id=created.id)
    assert deleted.status_code == 204
    best = searched.best.to_dict()
    row = {
        k: best[k]
        for k in ("num_devices", "tp", "dp", "ep", "pp", "max_batched_tokens", "batch_size")
    }
    launch = deploy.deploy.sync_detailed(
        client=client,
        body=models.DeployRequest.from_dict(
            {**row, "engine": "vllm", "model": "Qwen/Qwen3-0.6B", "device": "TEST_DEVICE"}
        ),
    )  # fmt: skip
    assert launch.status_code == 200, launch.content
    linked = deploy.deploy_get.sync(
        client=client, **row, engine=models.DeployGetEngine("vllm"), model="Qwen/Qwen3-0.6B",
        device="TEST_DEVICE",
    )  # fmt: skip
    assert isinstance(linked, models.DeployResponse)
    assert linked.to_dict() == launch.parsed.to_dict()
    _sweep_operations(package, client, models, base)


def _sweep_operations(package: Any, client: Any, models: Any, base: dict[str, Any]) -> None:
    """Submit a sweep, watch it to its end, read its rows as CSV and JSON, cancel it."""
    sweeps = _api(package, "sweeps")
    spec = {"operation": "simulate", "base": {**base, "concurrency": 1},
            "grid": {"concurrency": [1, 2]}}  # fmt: skip
    created = sweeps.create_sweep.sync_detailed(
        client=client, body=models.SweepRequest.from_dict(spec), idempotency_key="client-test"
    )
    assert created.status_code == 202 and isinstance(created.parsed, models.SweepStatus)
    sweep_id = created.parsed.id
    assert created.headers["location"] == f"/v1/sweeps/{sweep_id}"
    status = created.parsed
    deadline = time.monotonic() + 120
    while status.state != models.SweepStatusState.DONE and time.monotonic() < deadline:
        time.sleep(0.2)
        status = sweeps.read_sweep.sync(client=client, sweep_id=sweep_id)
    assert isinstance(status, models.SweepStatus) and (status.done, status.total) == (2, 2)
    text = sweeps.sweep_results.sync_detailed(client=client, sweep_id=sweep_id)
    assert text.status_code == 200 and text.content.decode().startswith("concurrency,")
    listed = sweeps.sweep_results.sync_detailed(
        client=client, sweep_id=sweep_id, format_=models.SweepResultsFormat("json")
    )
    assert [row["concurrency"] for row in json.loads(listed.content)] == [1, 2]
    cancelled = sweeps.cancel_sweep.sync(client=client, sweep_id=sweep_id)
    assert isinstance(cancelled, models.SweepStatus) and cancelled.id == sweep_id
    missing = sweeps.read_sweep.sync_detailed(client=client, sweep_id="swp-" + "0" * 32)
    assert missing.status_code == 404 and isinstance(missing.parsed, models.Problem)


def test_errors_parse_as_problems(generated: Any) -> None:
    package, client = generated
    models = importlib.import_module(f"{package.__name__}.models")
    planning = _api(package, "planning")
    bad = models.SimulateRequest.from_dict(
        {
            "model": "acme/Unknown-1B",
            "device": "TEST_DEVICE",
            "input_length": 512,
            "output_length": 32,
            "concurrency": 4,
        }
    )
    response = planning.simulate.sync_detailed(client=client, body=bad)
    assert response.status_code == 422
    assert isinstance(response.parsed, models.Problem)
    assert response.parsed.status == 422 and "acme/Unknown-1B" in response.parsed.detail
    catalog = _api(package, "catalog")
    missing = catalog.device.sync_detailed(client=client, name="TPU9")
    assert missing.status_code == 404 and isinstance(missing.parsed, models.Problem)
