"""``chunkwise serve``: the HTTP service under uvicorn (the only command that loads it)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

#: prometheus_client's switch to its multiprocess mode (read when a worker imports it).
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: The setting (``Settings.workers``) the workers learn their count from.
WORKERS_ENV = "APP_WORKERS"


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from app.core import limits
    from app.settings import Settings

    # The workers read their count (APP_WORKERS): with several and the in-process cache they
    # refuse to store calibrations rather than keep one a sibling cannot read.
    os.environ[WORKERS_ENV] = str(args.workers)
    settings = Settings()
    if args.workers > 1 and settings.cache_backend == "memory":
        print(
            "chunkwise: warning: each of the workers keeps its own in-process latency cache "
            "and POST /v1/calibrations is refused (503); set APP_CACHE_BACKEND=redis and "
            "APP_REDIS_URL to share one",
            file=sys.stderr,
        )
    if args.workers > 1:
        # One scrape behind one port sees every worker: prometheus_client's multiprocess mode
        # (each worker writes its counters to files in this directory, a scrape sums them).
        directory = tempfile.mkdtemp(prefix="chunkwise-metrics-")
        os.environ.setdefault(MULTIPROCESS_ENV, directory)
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=args.host,
        port=args.port if args.port is not None else settings.port,
        workers=args.workers,
        access_log=False,  # the app logs one access line per request, with its request id
        # The h11 parser bounds the request line and headers (httptools accepts any size: a
        # 100 MB header was read whole), with a head deadline (APP_HEADER_TIMEOUT_S) and a 431
        # (app/api/http_protocol.py); idle keep-alive connections close after 5 s.
        http="app.api.http_protocol:BoundedH11Protocol",
        h11_max_incomplete_event_size=limits.MAX_HEADER_BYTES,
        timeout_keep_alive=5,
    )
    return 0
