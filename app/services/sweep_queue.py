"""Sweep batches on Celery with the Redis broker (``chunkwise worker``; docs/sweeps.md).

A message carries a sweep id and a batch of scenario keys; the worker reads the batch's tasks
from the sweep store, evaluates them with :func:`app.services.sweep.evaluate_tasks` (the
function the local pool runs) and writes one row per scenario key. Delivery is Celery's:

- ``acks_late``: a message is acknowledged after its batch's rows are written, and
  ``reject_on_worker_lost`` requeues it when the pool process running it dies;
- the Redis transport's visibility timeout (``APP_SWEEP_VISIBILITY_TIMEOUT_S``) hands a
  message that a dead worker (SIGKILL, lost machine) never acknowledged to another worker,
  looked for every ``APP_SWEEP_RESTORE_INTERVAL_S``;
- a batch that runs twice (redelivered after its rows were written) writes nothing new: rows
  live under their scenario's key, and rows already written are not evaluated again.

Only this module, ``chunkwise worker`` and the API's submission import Celery.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import redis
from celery import Celery, signals

from app.settings import Settings

if TYPE_CHECKING:
    from app.services.context import ServiceContext
    from app.services.sweep_store import RedisSweepStore

logger = logging.getLogger("chunkwise.worker")

#: The task's name (a message names it; workers of any version that know it take it).
TASK_NAME = "chunkwise.sweep_batch"
#: The queue sweep batches go to.
QUEUE = "chunkwise-sweeps"
#: Times a batch whose store was unreachable is retried (backing off to 30 s: ~10 minutes).
STORE_RETRIES = 24
#: Reconnections a worker's store client tries within one operation.
WORKER_STORE_RETRIES = 6

#: The Celery app of each configuration (by its settings' JSON): a test, or a process whose
#: settings change, gets a new app with connections of its own.
_APPS: dict[str, Celery] = {}


def worker_broker(settings: Settings) -> str:
    """A worker's broker: ``APP_BROKER_URL``, else ``APP_REDIS_URL``."""
    return settings.broker_url or settings.redis_url


def worker_store_url(settings: Settings) -> str:
    """The durable store a worker (or its command) talks to: ``APP_SWEEP_STORE_URL``, else the
    broker's Redis."""
    return settings.sweep_store_url or worker_broker(settings)


def worker_store(settings: Settings, retries: int = 2) -> RedisSweepStore:
    """The sweep store a worker (or its command) talks to (:func:`worker_store_url`)."""
    from app.services.sweep_store import RedisSweepStore

    url = worker_store_url(settings)
    return RedisSweepStore(url, ttl_s=settings.sweep_ttl_s, retries=retries)


def configure(settings: Settings) -> Celery:
    """The Celery app pointed at ``settings``' broker (``APP_BROKER_URL``, else
    ``APP_REDIS_URL``), with the sweep task."""
    identity = settings.model_dump_json()
    found = _APPS.get(identity)
    if found is not None:
        return found
    app = Celery("chunkwise", set_as_current=False)
    app.conf.update(
        broker_url=worker_broker(settings),
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": settings.sweep_visibility_timeout_s,
            "unacked_restore_interval": settings.sweep_restore_interval_s,
            "unacked_restore_throttle": 1,
            "socket_timeout": 30,
            "socket_connect_timeout": 5,
            "health_check_interval": 10,
        },
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_default_queue=QUEUE,
        worker_prefetch_multiplier=1,
        # The broker lost mid-batch: the batch runs to its end and writes its rows (the store
        # client reconnects); its acknowledgement is lost with the connection, so the message
        # comes back after the visibility timeout and its rerun finds every row written.
        worker_cancel_long_running_tasks_on_connection_loss=False,
        worker_hijack_root_logger=False,
        task_publish_retry_policy={
            "max_retries": 3,
            "interval_start": 0.2,
            "interval_step": 0.5,
            "interval_max": 2.0,
        },
    )
    app.task(
        name=TASK_NAME,
        acks_late=True,
        reject_on_worker_lost=True,
        ignore_result=True,
        # The store unreachable (a Redis restart): Celery retries the batch, backing off.
        autoretry_for=(redis.RedisError, OSError),
        retry_backoff=True,
        retry_backoff_max=30,
        max_retries=STORE_RETRIES,
    )(sweep_batch)
    _WORKER["settings"] = settings
    _APPS[identity] = app
    return app


#: This process's worker state (built on its first batch, after a prefork pool forked it).
_WORKER: dict[str, Any] = {}


def _worker_state() -> tuple[ServiceContext, RedisSweepStore]:
    if "context" not in _WORKER:
        from app.services.context import create_context

        settings: Settings = _WORKER.get("settings") or Settings()
        # A scenario naming a stored calibration reads it from the store its sweep is in.
        _WORKER["context"] = create_context(settings, store_url=worker_store_url(settings))
        _WORKER["store"] = worker_store(settings, retries=WORKER_STORE_RETRIES)
    return _WORKER["context"], _WORKER["store"]


@signals.worker_process_init.connect  # type: ignore[untyped-decorator]
def _forget_the_parent(**_: Any) -> None:
    """A forked pool process builds its own context and Redis connections."""
    _WORKER.pop("context", None)
    _WORKER.pop("store", None)


def sweep_batch(sweep_id: str, keys: list[str]) -> int:
    """The task (of every configured app): evaluate the batch's scenarios still without a row
    and write their rows; the rows written (0 for a cancelled sweep or a batch already
    done)."""
    from app.services.context import REQUEST_OWNER
    from app.services.sweep import evaluate_tasks, named_calibrations

    context, store = _worker_state()
    tasks = store.claim(sweep_id, keys)
    if not tasks:
        return 0
    # A stored calibration belongs to its owner (the API key's digest): the batch reads the
    # ones its scenarios name as the sweep's owner, as the API did when it resolved them (one
    # more round trip, for such batches only).
    named = bool(named_calibrations(tasks))
    owned = REQUEST_OWNER.set(store.owner(sweep_id) if named else None)
    try:
        rows = evaluate_tasks(context, tasks)
    finally:
        REQUEST_OWNER.reset(owned)
    store.put_rows(sweep_id, rows)
    return len(rows)


def enqueue(settings: Settings, sweep_id: str, batches: Sequence[Sequence[str]]) -> None:
    """One message per batch of scenario keys, over one broker connection."""
    app = configure(settings)
    task = app.tasks[TASK_NAME]
    with app.producer_or_acquire() as producer:
        for keys in batches:
            task.apply_async((sweep_id, list(keys)), producer=producer, queue=QUEUE)


def run_worker(settings: Settings, *, concurrency: int, loglevel: str = "INFO") -> None:
    """``celery worker`` on the sweep queue with ``concurrency`` pool processes (blocks)."""
    app = configure(settings)
    app.worker_main(
        [
            "worker",
            f"--loglevel={loglevel}",
            f"--concurrency={concurrency}",
            "--pool=prefork",
            f"--queues={QUEUE}",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
    )
