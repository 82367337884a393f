"""A sweep's state after a cancel, in both stores: the DELETE's answer stays true.

A cancel taken while batches are in flight leaves the sweep ``cancelled`` even when those
batches then write every remaining row (the DELETE answered ``cancelled``, then a GET read
``done``); a cancel of a sweep whose rows are all written is not taken (it stays ``done``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.services.sweep import Task
from app.services.sweep_store import MemorySweepStore, RedisSweepStore, SweepMeta, SweepStore
from tests.integration.conftest import RedisServer

TASKS = [Task(scenario_key=f"k{i}", operation="simulate", echo={}, values=()) for i in range(3)]


def _meta(sweep_id: str) -> SweepMeta:
    return SweepMeta(id=sweep_id, owner=None, total=len(TASKS), created_s=0.0, columns=())


def _rows(keys: list[str]) -> list[dict[str, object]]:
    return [{"scenario_key": key, "error": ""} for key in keys]


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> Iterator[SweepStore]:
    if request.param == "memory":
        yield MemorySweepStore()
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    redis_store = RedisSweepStore(server.url, ttl_s=600)
    try:
        yield redis_store
    finally:
        redis_store.close()


@pytest.mark.integration
def test_a_cancel_with_batches_in_flight_stays_cancelled(store: SweepStore) -> None:
    store.create(_meta("swp-a"), TASKS, None)
    claimed = store.claim("swp-a", [t.scenario_key for t in TASKS])  # a batch in flight
    assert len(claimed) == 3
    store.put_rows("swp-a", _rows(["k0"]))
    store.cancel("swp-a", None)
    assert store.progress("swp-a", None).state == "cancelled"
    store.put_rows("swp-a", _rows(["k1", "k2"]))  # the batch finishes after the cancel
    progress = store.progress("swp-a", None)
    assert (progress.state, progress.done) == ("cancelled", 3)
    assert store.claim("swp-a", ["k0"]) == []


@pytest.mark.integration
def test_a_cancel_of_a_complete_sweep_is_not_taken(store: SweepStore) -> None:
    store.create(_meta("swp-b"), TASKS, None)
    store.claim("swp-b", [t.scenario_key for t in TASKS])
    store.put_rows("swp-b", _rows([t.scenario_key for t in TASKS]))
    assert store.progress("swp-b", None).state == "done"
    store.cancel("swp-b", None)
    assert store.progress("swp-b", None).state == "done"
