"""Where sweeps live: their state, their scenarios (tasks) and one row per scenario.

Two stores with one interface: :class:`RedisSweepStore` (durable: a Redis with persistence and
``noeviction``, shared by the API and every worker) and :class:`MemorySweepStore` (the API's
own, without a broker: gone when the API stops). Key layout in Redis (``<id>`` is ``swp-`` and
32 hex digits)::

    chunkwise:sweep:<id>          hash: meta (JSON), state, last_s (time of the last row)
    chunkwise:sweep:<id>:tasks    hash: scenario key -> task (JSON: operation, echo, values)
    chunkwise:sweep:<id>:order    list: scenario keys in the spec's order
    chunkwise:sweep:<id>:rows     hash: scenario key -> row (JSON)
    chunkwise:sweep:<id>:failed   set:  scenario keys whose row has an error
    chunkwise:sweep-idem:<owner>:<digest of the Idempotency-Key>  -> sweep id

A row is written under its scenario's key (``HSET``): a batch that runs twice (a worker died
after writing, before acknowledging) writes the same row once, so ``HLEN`` of the rows is the
scenarios done, exactly once. A batch costs a worker two round trips: one reading the state,
the rows already written and the tasks; one writing the rows.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from app.cache import durable_client, redact_url
from app.services.sweep import Task

KEY_PREFIX = "chunkwise:sweep"
#: Keys written to Redis per command (a 100,000-scenario sweep is 100 commands).
WRITE_CHUNK = 1000
#: The states a sweep reports (``done``: every scenario has its row).
STATES = ("running", "done", "cancelled")


def new_sweep_id() -> str:
    """A random sweep id (128 bits): nobody guesses another's."""
    return f"swp-{secrets.token_hex(16)}"


class UnknownSweepError(LookupError):
    """No sweep with that id (or one of another owner)."""


class SweepStoreError(Exception):
    """The store (or broker) did not answer: the sweep was not created (503)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepMeta:
    """What a sweep was when it was created."""

    id: str
    owner: str | None
    total: int
    created_s: float
    columns: tuple[str, ...]

    def to_json(self) -> str:
        return json.dumps(
            {
                "id": self.id,
                "owner": self.owner,
                "total": self.total,
                "created_s": self.created_s,
                "columns": list(self.columns),
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> SweepMeta:
        data = json.loads(text)
        return cls(
            id=data["id"],
            owner=data["owner"],
            total=int(data["total"]),
            created_s=float(data["created_s"]),
            columns=tuple(data["columns"]),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepProgress:
    """A sweep now: its meta, state and counts."""

    meta: SweepMeta
    state: str
    done: int
    failed: int
    last_s: float | None


def task_json(task: Task) -> str:
    return json.dumps(
        {
            "operation": task.operation,
            "echo": task.echo,
            "values": [list(pair) for pair in task.values],
        }
    )


def task_from_json(key: str, text: str | bytes) -> Task:
    data = json.loads(text)
    return Task(
        scenario_key=key,
        operation=data["operation"],
        echo=data["echo"],
        values=tuple((str(name), value) for name, value in data["values"]),
    )


class SweepStore(Protocol):
    """The sweeps' store (Redis or the API's memory)."""

    def create(self, meta: SweepMeta, tasks: Sequence[Task], idempotency: str | None) -> str:
        """Store a new sweep, or return the id of the sweep ``idempotency`` (an owner-scoped
        digest) already names."""
        ...

    def progress(self, sweep_id: str, owner: str | None) -> SweepProgress: ...

    def cancel(self, sweep_id: str, owner: str | None) -> None: ...

    def claim(self, sweep_id: str, keys: Sequence[str]) -> list[Task]:
        """The tasks of ``keys`` still to run (none when the sweep was cancelled or removed;
        a key with a row already is left out)."""
        ...

    def owner(self, sweep_id: str) -> str | None:
        """The owner of the sweep (None: none, or no such sweep): a worker reads a stored
        calibration a scenario names as that owner."""
        ...

    def put_rows(self, sweep_id: str, rows: Sequence[Mapping[str, Any]]) -> None: ...

    def iter_rows(self, sweep_id: str, page: int = WRITE_CHUNK) -> Iterator[dict[str, Any]]:
        """The rows written so far, in the spec's order."""
        ...

    def missing(self, sweep_id: str) -> list[str]:
        """The scenario keys without a row, in the spec's order."""
        ...

    def close(self) -> None: ...


def _state(stored: str | None, done: int, total: int) -> str:
    """``cancelled`` once a cancel was taken, whatever rows its batches in flight still write
    (the DELETE's answer stays true); else ``done`` once every scenario has its row. A cancel
    of a complete sweep is not taken (it stays ``done``)."""
    if stored == "cancelled":
        return "cancelled"
    return "done" if done >= total else "running"


class RedisSweepStore:
    """Sweeps in Redis (durable when that Redis persists and never evicts; docs/sweeps.md)."""

    def __init__(
        self, url: str, *, ttl_s: int, socket_timeout_s: float = 10.0, retries: int = 2
    ) -> None:
        import redis

        self.url = url
        self.ttl_s = ttl_s
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self._client = durable_client(
            url, socket_timeout_s=socket_timeout_s, retries=retries, decode_responses=True
        )

    @staticmethod
    def key(sweep_id: str, part: str = "") -> str:
        return f"{KEY_PREFIX}:{sweep_id}{':' + part if part else ''}"

    def _all_keys(self, sweep_id: str) -> list[str]:
        return [self.key(sweep_id, part) for part in ("", "tasks", "order", "rows", "failed")]

    def create(self, meta: SweepMeta, tasks: Sequence[Task], idempotency: str | None) -> str:
        try:
            if idempotency is not None:
                idem = f"{KEY_PREFIX}-idem:{meta.owner or '-'}:{idempotency}"
                if not self._client.set(idem, meta.id, nx=True, ex=self.ttl_s):
                    earlier = self._client.get(idem)
                    if earlier is not None:
                        return str(earlier)
            pipe = self._client.pipeline(transaction=False)
            for start in range(0, len(tasks), WRITE_CHUNK):
                chunk = tasks[start : start + WRITE_CHUNK]
                pipe.hset(
                    self.key(meta.id, "tasks"),
                    mapping={task.scenario_key: task_json(task) for task in chunk},
                )
                pipe.rpush(self.key(meta.id, "order"), *(task.scenario_key for task in chunk))
            # The meta last: a sweep is visible only once its tasks are.
            pipe.hset(self.key(meta.id), mapping={"meta": meta.to_json(), "state": "running"})
            for name in self._all_keys(meta.id):
                pipe.expire(name, self.ttl_s)
            pipe.execute()
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        return meta.id

    def _meta(self, sweep_id: str, owner: str | None) -> tuple[SweepMeta, dict[str, str]]:
        if not sweep_id.startswith("swp-"):
            raise UnknownSweepError(sweep_id)
        fields: dict[str, str] = self._client.hgetall(self.key(sweep_id))  # type: ignore[assignment]
        if not fields or "meta" not in fields:
            raise UnknownSweepError(sweep_id)
        meta = SweepMeta.from_json(fields["meta"])
        if meta.owner != owner:
            raise UnknownSweepError(sweep_id)
        return meta, fields

    def _unavailable(self, exc: BaseException) -> SweepStoreError:
        return SweepStoreError(f"the sweep store ({redact_url(self.url)}) failed: {exc}")

    def progress(self, sweep_id: str, owner: str | None) -> SweepProgress:
        try:
            meta, fields = self._meta(sweep_id, owner)
            pipe = self._client.pipeline(transaction=False)
            pipe.hlen(self.key(sweep_id, "rows"))
            pipe.scard(self.key(sweep_id, "failed"))
            done, failed = pipe.execute()
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        last = fields.get("last_s")
        return SweepProgress(
            meta=meta,
            state=_state(fields.get("state"), int(done), meta.total),
            done=int(done),
            failed=int(failed),
            last_s=None if last is None else float(last),
        )

    def cancel(self, sweep_id: str, owner: str | None) -> None:
        try:
            meta, _ = self._meta(sweep_id, owner)
            if int(self._client.hlen(self.key(sweep_id, "rows"))) < meta.total:
                self._client.hset(self.key(sweep_id), "state", "cancelled")
        except self._errors as exc:
            raise self._unavailable(exc) from exc

    def claim(self, sweep_id: str, keys: Sequence[str]) -> list[Task]:
        pipe = self._client.pipeline(transaction=False)
        pipe.hget(self.key(sweep_id), "state")
        pipe.hmget(self.key(sweep_id, "rows"), list(keys))
        pipe.hmget(self.key(sweep_id, "tasks"), list(keys))
        state, rows, tasks = pipe.execute()
        if state != "running":
            return []
        return [
            task_from_json(key, text)
            for key, row, text in zip(keys, rows, tasks, strict=True)
            if row is None and text is not None
        ]

    def owner(self, sweep_id: str) -> str | None:
        text = self._client.hget(self.key(sweep_id), "meta")
        return None if text is None else SweepMeta.from_json(str(text)).owner

    def put_rows(self, sweep_id: str, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        pipe = self._client.pipeline(transaction=False)
        pipe.hset(
            self.key(sweep_id, "rows"),
            mapping={str(row["scenario_key"]): json.dumps(row) for row in rows},
        )
        failed = [str(row["scenario_key"]) for row in rows if row.get("error")]
        if failed:
            pipe.sadd(self.key(sweep_id, "failed"), *failed)
        pipe.hset(self.key(sweep_id), "last_s", repr(time.time()))
        # The rows' keys exist from the first row on: they expire with the sweep's others.
        for part in ("rows", "failed") if failed else ("rows",):
            pipe.expire(self.key(sweep_id, part), self.ttl_s)
        pipe.execute()

    def _pages(self, sweep_id: str, page: int) -> Iterator[list[tuple[str, str | None]]]:
        """The scenario keys in the spec's order with their rows' JSON (None: no row yet), a
        page at a time (two round trips a page)."""
        start = 0
        while True:
            keys: list[str] = self._client.lrange(  # type: ignore[assignment]  # decoded
                self.key(sweep_id, "order"), start, start + page - 1
            )
            if not keys:
                return
            rows: list[str | None] = self._client.hmget(  # type: ignore[assignment]  # decoded
                self.key(sweep_id, "rows"), keys
            )
            yield list(zip(keys, rows, strict=True))
            start += page

    def iter_rows(self, sweep_id: str, page: int = WRITE_CHUNK) -> Iterator[dict[str, Any]]:
        for pairs in self._pages(sweep_id, page):
            yield from (json.loads(text) for _, text in pairs if text is not None)

    def missing(self, sweep_id: str) -> list[str]:
        try:
            return [
                key
                for pairs in self._pages(sweep_id, WRITE_CHUNK)
                for key, text in pairs
                if text is None
            ]
        except self._errors as exc:
            raise self._unavailable(exc) from exc

    def eviction_policy(self) -> str | None:
        """The server's ``maxmemory-policy`` (None when CONFIG is not allowed: managed Redis)."""
        try:
            answer = self._client.config_get("maxmemory-policy")
        except self._errors:
            return None
        policy = answer.get("maxmemory-policy")
        return None if policy is None else str(policy)

    def close(self) -> None:
        self._client.close()


class MemorySweepStore:
    """Sweeps in this process (the API without a broker): the same answers, until it stops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._meta: dict[str, SweepMeta] = {}
        self._state: dict[str, str] = {}
        self._last: dict[str, float] = {}
        self._tasks: dict[str, dict[str, Task]] = {}
        self._rows: dict[str, dict[str, dict[str, Any]]] = {}
        self._idem: dict[tuple[str | None, str], str] = {}

    def create(self, meta: SweepMeta, tasks: Sequence[Task], idempotency: str | None) -> str:
        with self._lock:
            if idempotency is not None:
                earlier = self._idem.setdefault((meta.owner, idempotency), meta.id)
                if earlier != meta.id:
                    return earlier
            self._tasks[meta.id] = {task.scenario_key: task for task in tasks}
            self._rows[meta.id] = {}
            self._state[meta.id] = "running"
            self._meta[meta.id] = meta
        return meta.id

    def _owned(self, sweep_id: str, owner: str | None) -> SweepMeta:
        meta = self._meta.get(sweep_id)
        if meta is None or meta.owner != owner:
            raise UnknownSweepError(sweep_id)
        return meta

    def progress(self, sweep_id: str, owner: str | None) -> SweepProgress:
        with self._lock:
            meta = self._owned(sweep_id, owner)
            rows = self._rows[sweep_id]
            done = len(rows)
            failed = sum(1 for row in rows.values() if row.get("error"))
            state = _state(self._state[sweep_id], done, meta.total)
            return SweepProgress(
                meta=meta, state=state, done=done, failed=failed, last_s=self._last.get(sweep_id)
            )

    def cancel(self, sweep_id: str, owner: str | None) -> None:
        with self._lock:
            meta = self._owned(sweep_id, owner)
            if len(self._rows[sweep_id]) < meta.total:
                self._state[sweep_id] = "cancelled"

    def claim(self, sweep_id: str, keys: Sequence[str]) -> list[Task]:
        with self._lock:
            if self._state.get(sweep_id) != "running":
                return []
            tasks, rows = self._tasks[sweep_id], self._rows[sweep_id]
            return [tasks[key] for key in keys if key in tasks and key not in rows]

    def owner(self, sweep_id: str) -> str | None:
        with self._lock:
            meta = self._meta.get(sweep_id)
        return None if meta is None else meta.owner

    def put_rows(self, sweep_id: str, rows: Sequence[Mapping[str, Any]]) -> None:
        with self._lock:
            stored = self._rows.get(sweep_id)
            if stored is None:
                return
            for row in rows:
                stored[str(row["scenario_key"])] = dict(row)
            self._last[sweep_id] = time.time()

    def iter_rows(self, sweep_id: str, page: int = WRITE_CHUNK) -> Iterator[dict[str, Any]]:
        with self._lock:
            order = list(self._tasks.get(sweep_id, {}))
            rows = self._rows.get(sweep_id, {})
            found = [rows[key] for key in order if key in rows]
        yield from found

    def missing(self, sweep_id: str) -> list[str]:
        with self._lock:
            rows = self._rows.get(sweep_id, {})
            return [key for key in self._tasks.get(sweep_id, {}) if key not in rows]

    def close(self) -> None:
        """Nothing to close."""
