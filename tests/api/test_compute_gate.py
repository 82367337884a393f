"""Overload is a fast 503 problem, not an unbounded queue of CPU work."""

from __future__ import annotations

import threading

import anyio
import pytest
from fastapi.testclient import TestClient

from app.api.compute import ComputeGate, OverloadedError
from app.main import create_app
from app.settings import Settings


def test_the_gate_refuses_when_slots_and_queue_are_full() -> None:
    async def scenario() -> None:
        gate = ComputeGate.create(max_concurrent=1, max_waiting=0)
        assert await gate.run(lambda: 41 + 1) == 42
        await gate.limiter.acquire()  # the only slot is busy
        try:
            with pytest.raises(OverloadedError):
                await gate.run(lambda: 0)
        finally:
            gate.limiter.release()
        assert await gate.run(lambda: 7) == 7

    anyio.run(scenario)


def test_an_overloaded_worker_answers_503_problem() -> None:
    settings = Settings(max_concurrent_computations=1, max_queued_computations=0)
    release = threading.Event()
    entered = threading.Event()
    app = create_app(settings)

    from app import services

    real = services.chunk_plan

    def slow_chunk_plan(request: object) -> object:
        entered.set()
        release.wait(10)
        return real(request)  # type: ignore[arg-type]

    body = {"input_length": 100, "max_batched_tokens": 10}
    with TestClient(app) as client:
        services_patch = pytest.MonkeyPatch()
        services_patch.setattr(services, "chunk_plan", slow_chunk_plan)
        try:
            results: list[int] = []
            busy = threading.Thread(
                target=lambda: results.append(client.post("/v1/chunk-plan", json=body).status_code)
            )
            busy.start()
            assert entered.wait(10)
            refused = client.post("/v1/chunk-plan", json=body)
            release.set()
            busy.join(10)
        finally:
            services_patch.undo()
    assert refused.status_code == 503
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["type"].endswith("overloaded")
    assert results == [200]
