"""``chunkwise worker``: a Celery worker running sweep batches (the only command importing
Celery; docs/sweeps.md)."""

from __future__ import annotations

import argparse
import sys

from app.cli.commands import fail


def cmd_worker(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from app.settings import Settings

    if args.concurrency < 1:
        return fail(f"--concurrency {args.concurrency}: at least 1")
    try:
        settings = Settings()
    except ValidationError as err:
        return fail(f"settings: {err.errors()[0]['msg']}")
    from app.services.sweep_queue import run_worker, worker_store

    store = worker_store(settings)
    policy = store.eviction_policy()
    store.close()
    if policy not in (None, "noeviction"):
        print(
            f"chunkwise: warning: the sweep store's Redis evicts keys (maxmemory-policy "
            f"{policy}): sweeps and queued batches can be lost; use a Redis with noeviction "
            "(APP_BROKER_URL / APP_SWEEP_STORE_URL; docs/sweeps.md)",
            file=sys.stderr,
        )
    run_worker(settings, concurrency=args.concurrency, loglevel=args.loglevel)
    return 0
