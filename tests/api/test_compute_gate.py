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
    settings = Settings(
        max_concurrent_computations=1, max_queued_computations=0, max_light_computations=0
    )
    release = threading.Event()
    entered = threading.Event()
    app = create_app(settings)

    from app.services import chunk_plan as service

    real = service.chunk_plan

    def slow_chunk_plan(request: object) -> object:
        entered.set()
        release.wait(10)
        return real(request)  # type: ignore[arg-type]

    body = {"input_length": 100, "max_batched_tokens": 10}
    with TestClient(app) as client:
        services_patch = pytest.MonkeyPatch()
        services_patch.setattr(service, "chunk_plan", slow_chunk_plan)
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


def test_the_light_lane_is_its_own_pool() -> None:
    async def scenario() -> None:
        gate = ComputeGate.create(max_concurrent=1, max_waiting=0, max_light=1)
        await gate.limiter.acquire()  # the heavy lane is full
        try:
            assert await gate.run(lambda: 5, light=True) == 5
            with pytest.raises(OverloadedError):
                await gate.run(lambda: 0)
        finally:
            gate.limiter.release()

    anyio.run(scenario)


def test_cheap_requests_never_wait_behind_an_optimize() -> None:
    """W2: with the heavy lane full (one slot, no queue) a chunk plan, a forward and a small
    simulation answer at once; another optimize is refused."""
    settings = Settings(max_concurrent_computations=1, max_queued_computations=0)
    release = threading.Event()
    entered = threading.Event()
    app = create_app(settings)

    from app.services import optimize as service

    def blocked_optimize(context: object, request: object, **kwargs: object) -> object:
        entered.set()
        release.wait(10)
        raise RuntimeError("released")

    optimize = {
        "model": "Qwen/Qwen3-8B",
        "device": "NVIDIA_H100_SXM_80G",
        "num_devices": 1,
        "input_length": 512,
        "output_length": 32,
    }
    simulate = {**{k: v for k, v in optimize.items() if k != "num_devices"}, "concurrency": 4}
    forward = {
        "model": "Qwen/Qwen3-8B",
        "device": "NVIDIA_H100_SXM_80G",
        "num_queries": 1,
        "query_length": 64,
    }
    with TestClient(app, raise_server_exceptions=False) as client:
        patch = pytest.MonkeyPatch()
        patch.setattr(service, "optimize", blocked_optimize)
        try:
            busy = threading.Thread(target=lambda: client.post("/v1/optimize", json=optimize))
            busy.start()
            assert entered.wait(10)
            plan = client.post(
                "/v1/chunk-plan", json={"input_length": 100, "max_batched_tokens": 10}
            )
            one = client.post("/v1/forward", json=forward)
            small = client.post("/v1/simulate", json=simulate)
            refused = client.post("/v1/optimize", json=optimize)
            release.set()
            busy.join(10)
        finally:
            patch.undo()
    assert (plan.status_code, one.status_code, small.status_code) == (200, 200, 200)
    assert refused.status_code == 503


@pytest.mark.parametrize(
    ("extra", "light"),
    [
        ({"concurrency": 64}, True),
        ({"concurrency": 64, "include_timeline": True}, False),
        ({"concurrency": 4096}, False),
        ({"concurrency": 64, "workload": "closed_loop", "requests_per_client": 100}, False),
        ({"concurrency": 64, "dp_size": 8, "tp_size": 1}, True),
    ],
)
def test_the_light_simulation_rule(extra: dict[str, object], light: bool) -> None:
    from app.models.simulate import SimulateRequest
    from app.services.sizing import is_light_simulation

    body = {
        "model": "Qwen/Qwen3-8B",
        "device": "NVIDIA_H100_SXM_80G",
        "input_length": 4096,
        "output_length": 32,
        "max_batched_tokens": 1024,
        **extra,
    }
    assert is_light_simulation(SimulateRequest.model_validate(body)) is light


def test_the_deadline_counts_the_wait_for_a_slot() -> None:
    """A request still queued when its deadline passes answers 504 at once (it does not get a
    fresh deadline when a slot frees), and the clock a computation reads starts at arrival."""
    import threading
    import time

    import anyio

    from app.api.compute import ComputeGate
    from app.core.errors import DeadlineExceededError
    from app.services.context import REQUEST_STARTED_S

    gate = ComputeGate.create(1, 10, deadline_s=0.2)
    release = threading.Event()
    seen: list[float | None] = []

    async def main() -> float:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(gate.run, lambda: release.wait(5))
            await anyio.sleep(0.05)
            started = time.monotonic()
            try:
                await gate.run(lambda: seen.append(REQUEST_STARTED_S.get()))
            except DeadlineExceededError:
                waited = time.monotonic() - started
            else:
                raise AssertionError("a queued request outlived its deadline")
            release.set()
        return waited

    waited = anyio.run(main)
    assert 0.15 < waited < 1.0
    assert seen == []  # it never ran
    arrived: list[float | None] = []
    anyio.run(gate.run, lambda: arrived.append(REQUEST_STARTED_S.get()))
    assert arrived[0] is not None and arrived[0] <= time.monotonic()
