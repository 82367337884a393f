"""Sweeps on Celery against a real redis-server and real ``chunkwise worker`` processes: a
sweep completes with one row per scenario, the rows are the in-process loop's, a worker killed
(SIGKILL) mid-sweep loses nothing (its unacknowledged batch runs again elsewhere after the
visibility timeout), and a scenario that fails is a row with its error."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from app.cli.sweep import idempotency_key
from app.main import create_app
from app.models.sweep import SweepRequest
from app.services import sweep
from app.services.context import create_context
from app.services.sweep_jobs import Submitted, Sweeps, points_of, queued_batches
from app.services.sweep_queue import enqueue
from app.services.sweep_store import SweepMeta, new_sweep_id
from app.settings import Settings
from tests.api import test_calibrations, test_sweep
from tests.integration.conftest import RedisServer, Uvicorn, wait_until
from tests.integration.servers import ROOT, redis_env, start_server

pytestmark = [pytest.mark.integration]

BASE = {**test_sweep.BASE, "concurrency": 1}
#: 24 closed-loop scenarios: long enough to stop something in the middle of.
CLOSED_LOOP = SweepRequest(
    operation="simulate",
    base={**BASE, "workload": "closed_loop"},
    grid={"input_length": [128, 256, 512, 1024], "concurrency": [1, 2, 4, 8, 16, 32]},
)
#: Seconds a taken batch may stay unacknowledged before another worker gets it (the test's
#: batches take well under a second each).
VISIBILITY_S = 4


def worker_env(redis: RedisServer) -> dict[str, str]:
    return redis_env(
        redis,
        broker_url=redis.url,
        sweep_visibility_timeout_s=str(VISIBILITY_S),
        sweep_restore_interval_s="0.5",
    )


class Worker:
    """``chunkwise worker`` in a session of its own (a SIGKILL reaches its pool too)."""

    def __init__(self, env: dict[str, str], log: Path, concurrency: int = 1) -> None:
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "worker", "--concurrency", str(concurrency)],
                env=env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def send(self, signum: int) -> None:
        """Send ``signum`` to the worker's session (its pool too)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signum)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


def settings_for(redis: RedisServer, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """This process's settings as the workers': the broker and store on ``redis``."""
    for name, value in worker_env(redis).items():
        if name.startswith("APP_"):
            monkeypatch.setenv(name, value)
    return Settings()


@pytest.fixture
def settings(redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> Settings:
    return settings_for(redis_server, monkeypatch)


@pytest.fixture
def workers(redis_server: RedisServer, tmp_path: Path) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop()


def start(workers: list[Worker], redis: RedisServer, tmp_path: Path) -> Worker:
    worker = Worker(worker_env(redis), tmp_path / f"worker{len(workers)}.log")
    workers.append(worker)
    return worker


def wait_done(sweeps: Sweeps, sweep_id: str, timeout_s: float = 120) -> None:
    def done() -> bool:
        return sweeps.progress(sweep_id, None).state == "done"

    wait_until(done, timeout_s=timeout_s, what=f"sweep {sweep_id} to finish")


def in_process_rows(request: SweepRequest) -> list[dict[str, Any]]:
    context = create_context(Settings(cache_backend="memory"))
    tasks = sweep.prepare(context, points_of(request))
    rows = sweep.evaluate_tasks(context, tasks)
    context.close()
    return sorted(rows, key=lambda row: row["scenario_key"])


def test_a_sweep_on_two_workers_gives_the_in_process_rows(
    settings: Settings, redis_server: RedisServer, workers: list[Worker], tmp_path: Path
) -> None:
    request = SweepRequest(
        operation="simulate",
        base=BASE,
        grid={"input_length": [128, 256, 512], "concurrency": [1, 2, 4, 8]},
    )
    sweeps = Sweeps(settings)
    context = create_context(settings)
    try:
        submitted = sweeps.submit(context, request, owner=None, idempotency_key=None)
        start(workers, redis_server, tmp_path)
        start(workers, redis_server, tmp_path)
        wait_done(sweeps, submitted.sweep_id)
        progress = sweeps.progress(submitted.sweep_id, None)
        assert (progress.done, progress.failed, progress.meta.total) == (12, 0, 12)
        _, rows = sweeps.rows(submitted.sweep_id, None)
        got = sorted(rows, key=lambda row: row["scenario_key"])
        assert got == in_process_rows(request)
    finally:
        sweeps.close()
        context.close()


def test_a_killed_worker_loses_no_scenario(
    settings: Settings, redis_server: RedisServer, workers: list[Worker], tmp_path: Path
) -> None:
    """SIGKILL a worker (its pool with it) while it holds a batch: the batch is restored after
    the visibility timeout and run by the other worker; every scenario has exactly one row."""
    request = CLOSED_LOOP
    sweeps = Sweeps(settings)
    context = create_context(settings)
    client = redis_server.client()
    try:
        submitted = sweeps.submit(context, request, owner=None, idempotency_key=None)
        victim = start(workers, redis_server, tmp_path)

        def victim_frozen_holding() -> bool:
            """Freeze the victim (SIGSTOP) once it has rows, keep it frozen only while it holds
            a batch: between a check of ``unacked`` and the kill it could ack its batch and
            hold none (a race the suite saw under load)."""
            if sweeps.progress(submitted.sweep_id, None).done < 2 or not client.hlen("unacked"):
                return False
            victim.send(signal.SIGSTOP)
            if client.hlen("unacked"):
                return True
            victim.send(signal.SIGCONT)
            return False

        wait_until(victim_frozen_holding, timeout_s=60, what="the first worker to hold a batch")
        victim.kill()
        held = client.hlen("unacked")
        assert held >= 1, "the killed worker held no unacknowledged batch"
        done_at_kill = sweeps.progress(submitted.sweep_id, None).done
        assert done_at_kill < 24
        start(workers, redis_server, tmp_path)
        wait_done(sweeps, submitted.sweep_id, timeout_s=120)
        _, rows = sweeps.rows(submitted.sweep_id, None)
        keys = [row["scenario_key"] for row in rows]
        assert len(keys) == 24 and len(set(keys)) == 24
        assert sorted(keys) == [row["scenario_key"] for row in in_process_rows(request)]
        # The last batch is acknowledged just after its rows are written.
        wait_until(lambda: client.hlen("unacked") == 0, timeout_s=30, what="no batch held")
    finally:
        sweeps.close()
        context.close()


def test_a_failing_scenario_is_a_row_with_its_error(
    settings: Settings, redis_server: RedisServer, workers: list[Worker], tmp_path: Path
) -> None:
    """A task the worker cannot evaluate (its echo no longer a valid request) is a row with
    its error; the sweep still finishes."""
    request = SweepRequest(operation="simulate", base=BASE, grid={"concurrency": [1, 2]})
    sweeps = Sweeps(settings)
    context = create_context(settings)
    try:
        good, other = sweep.prepare(context, points_of(request))
        broken = sweep.Task(
            scenario_key=other.scenario_key,
            operation=other.operation,
            echo={**other.echo, "device": "NO_SUCH_DEVICE"},
            values=other.values,
        )
        meta = SweepMeta(
            id=new_sweep_id(),
            owner=None,
            total=2,
            created_s=time.time(),
            columns=tuple(sweep.columns([good])),
        )
        sweeps.store.create(meta, [good, broken], None)
        enqueue(settings, meta.id, queued_batches([good.scenario_key, broken.scenario_key]))
        start(workers, redis_server, tmp_path)
        wait_done(sweeps, meta.id)
        progress = sweeps.progress(meta.id, None)
        assert (progress.done, progress.failed) == (2, 1)
        _, rows = sweeps.rows(meta.id, None)
        by_key = {row["scenario_key"]: row for row in rows}
        assert by_key[good.scenario_key]["error"] is None
        assert "NO_SUCH_DEVICE" in by_key[broken.scenario_key]["error"]
        assert by_key[broken.scenario_key]["concurrency"] == 2
    finally:
        sweeps.close()
        context.close()


def test_a_worker_reads_a_stored_calibration_from_the_durable_store(
    redis_server: RedisServer, workers: list[Worker], tmp_path: Path
) -> None:
    """A scenario naming a stored calibration, with authentication on: the worker, its latency
    cache in-process, reads the profile from the store its sweep is in (the broker's Redis
    here) as the sweep's owner, and its rows are the API's own evaluation's."""
    settings = Settings(cache_backend="memory", broker_url=redis_server.url, api_keys="owner-token")
    with TestClient(create_app(settings)) as client:
        client.headers["Authorization"] = "Bearer owner-token"
        created = client.post("/v1/calibrations", json={"points": test_calibrations._rows()})
        assert created.status_code == 201, created.text
        base = {**test_calibrations.SIMULATE, "calibration": created.json()["id"]}
        spec = {"operation": "simulate", "base": base, "grid": {"concurrency": [4, 16]}}
        submitted = client.post("/v1/sweeps", json=spec)
        assert submitted.status_code == 202, submitted.text
        location = submitted.headers["location"]
        env = redis_env(None, broker_url=redis_server.url)
        workers.append(Worker(env, tmp_path / "worker.log"))
        wait_until(
            lambda: client.get(location).json()["state"] == "done",
            timeout_s=120,
            what="the calibrated sweep to finish",
        )
        progress = client.get(location).json()
        assert (progress["done"], progress["failed"]) == (2, 0)
        rows = client.get(f"{location}/results?format=json").json()
        for row in rows:
            assert row["error"] is None
            alone = client.post("/v1/simulate", json={**base, "concurrency": row["concurrency"]})
            assert row["ttft_ms"] == alone.json()["ttft_ms"]


def test_the_cli_follows_a_remote_sweep_through_an_api_restart(
    redis_server: RedisServer, workers: list[Worker], tmp_path: Path
) -> None:
    """``chunkwise sweep --remote``: the API queues the sweep to a worker; the API restarted
    mid-sweep, the sweep goes on and ``GET`` finds it again; the CLI writes every row."""
    env = worker_env(redis_server)
    api = start_server(Uvicorn(env, workers=1), tmp_path / "api.log", timeout_s=60)
    spec = tmp_path / "spec.json"
    document = {
        "operation": "simulate",
        "base": {**BASE, "workload": "closed_loop"},
        "grid": {"input_length": [128, 256, 512, 1024], "concurrency": [1, 2, 4, 8, 16]},
    }
    spec.write_text(json.dumps(document), encoding="utf-8")
    try:
        key = {"Idempotency-Key": idempotency_key(document)}  # what the CLI sends
        created = httpx.post(f"{api.base_url}/v1/sweeps", json=document, headers=key, timeout=60)
        assert created.status_code == 202, created.text
        status = created.json()
        assert status["executor"] == "celery" and status["total"] == 20
        api.stop()
        start(workers, redis_server, tmp_path)
        api = start_server(Uvicorn(env, workers=1), tmp_path / "api2.log", timeout_s=60)
        again = httpx.get(f"{api.base_url}/v1/sweeps/{status['id']}", timeout=10)
        assert again.status_code == 200 and again.json()["total"] == 20
        out = tmp_path / "rows.csv"
        done = subprocess.run(
            [sys.executable, "-m", "app.cli", "sweep", str(spec), "--remote", api.base_url,
             "--out", str(out)],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert status["id"] in done.stderr  # the spec's digest found the same sweep
        with out.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        assert len(rows) == 20 and len({row["scenario_key"] for row in rows}) == 20
        assert all(row["error"] == "" and float(row["ttft_ms"]) > 0 for row in rows)
    finally:
        api.stop()


def test_a_redis_restart_mid_sweep_loses_and_duplicates_nothing(
    tmp_path: Path, workers: list[Worker], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker and store Redis (append-only file) restarted while a worker runs the sweep:
    the worker reconnects, the sweep state survives, every scenario has exactly one row."""
    server = RedisServer(workdir=tmp_path, persistent=True)
    server.start()
    try:
        settings = settings_for(server, monkeypatch)
        sweeps = Sweeps(settings)
        context = create_context(settings)
        try:
            submitted = sweeps.submit(context, CLOSED_LOOP, owner=None, idempotency_key="restart")
            start(workers, server, tmp_path)

            def started() -> bool:
                return sweeps.progress(submitted.sweep_id, None).done >= 2

            wait_until(started, timeout_s=60, what="the first rows")
            assert sweeps.progress(submitted.sweep_id, None).done < 24
            server.stop()
            time.sleep(1.0)
            server.start()
            try:
                wait_done(sweeps, submitted.sweep_id, timeout_s=VISIBILITY_S * 5)
            except AssertionError:
                # A batch whose BRPOP reply the restart cut off is lost by kombu's Redis
                # transport (it was in neither the queue nor ``unacked``): resubmitting the
                # sweep, as ``chunkwise sweep --remote`` run again does, queues what is missing.
                again = sweeps.submit(context, CLOSED_LOOP, owner=None, idempotency_key="restart")
                assert again.sweep_id == submitted.sweep_id and not again.created
                wait_done(sweeps, submitted.sweep_id, timeout_s=60)
            _, rows = sweeps.rows(submitted.sweep_id, None)
            keys = [row["scenario_key"] for row in rows]
            assert len(keys) == 24 and len(set(keys)) == 24
            assert all(row["error"] is None for row in rows)
            client = server.client()
            wait_until(lambda: client.hlen("unacked") == 0, timeout_s=30, what="no batch held")
        finally:
            sweeps.close()
            context.close()
    finally:
        for worker in workers:
            worker.stop()
        server.stop()


def test_a_resubmission_queues_again_what_a_lost_message_held(
    settings: Settings, redis_server: RedisServer, workers: list[Worker], tmp_path: Path
) -> None:
    """Every queued batch lost (the queue deleted before a worker ran): the sweep makes no
    progress; submitted again with its Idempotency-Key once the visibility timeout has passed,
    its scenarios without a row are queued again and it finishes, one row each."""
    request = SweepRequest(operation="simulate", base=BASE, grid={"concurrency": [1, 2, 4]})
    sweeps = Sweeps(settings)
    context = create_context(settings)
    try:
        first = sweeps.submit(context, request, owner=None, idempotency_key="lost")
        redis_server.client().delete("chunkwise-sweeps")  # the broker's queue: every batch
        start(workers, redis_server, tmp_path)
        # Resubmitted before the visibility timeout: nothing is queued again (the batches
        # could still be running somewhere).
        assert sweeps.submit(context, request, owner=None, idempotency_key="lost") == Submitted(
            first.sweep_id, created=False
        )
        time.sleep(VISIBILITY_S + 1)
        assert sweeps.progress(first.sweep_id, None).done == 0
        sweeps.submit(context, request, owner=None, idempotency_key="lost")
        wait_done(sweeps, first.sweep_id, timeout_s=60)
        _, rows = sweeps.rows(first.sweep_id, None)
        assert sorted(row["concurrency"] for row in rows) == [1, 2, 4]
    finally:
        sweeps.close()
        context.close()
