"""Request ids, structured access logs and Prometheus metrics.

Metrics live in a registry owned by the app (no process globals, so tests can build many apps).
With several workers each process exports its own counters; scrape every worker or aggregate.
"""

from __future__ import annotations

import contextvars
import json
import logging
import math
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator

import anyio
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import PROBLEM_BASE, ProblemResponse
from app.api.logsafe import loggable
from app.models.common import problem_dict
from app.services.context import ServiceContext

logger = logging.getLogger("chunkwise.access")

REQUEST_ID_HEADER = "X-Request-ID"
_VALID_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


def is_json(content_type: str) -> bool:
    """``application/json`` (any parameters, e.g. ``; charset=utf-8``) or a ``+json`` type."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


class RequestIdLogFilter(logging.Filter):
    """Adds ``request_id`` to every log record (``-`` outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id_var.get()
        return True


def configure_logging(level: str) -> None:
    """One handler on the ``chunkwise`` logger with the request id in every line."""
    root = logging.getLogger("chunkwise")
    root.setLevel(level.upper())
    if not any(getattr(h, "_chunkwise", False) for h in root.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(
            logging.Formatter(
                "%(asctime)s %(levelname)s %(name)s request_id=%(request_id)s %(message)s"
            )
        )
        handler.addFilter(RequestIdLogFilter())
        handler._chunkwise = True  # type: ignore[attr-defined]
        root.addHandler(handler)


def _service_counters(ctx: ServiceContext) -> dict[str, float]:
    stats = ctx.cache.stats.snapshot()
    out = {f"cache_{name}": float(stats[name]) for name in _CACHE_COUNTERS}
    out["forward_evaluations"] = float(ctx.stats.forward_evaluations)
    out["response_cache_hits"] = float(ctx.stats.response_cache_hits)
    return out


def _summed_counters(directory: str) -> dict[str, float]:
    """Every worker's last written service counters, summed (a file that does not read back
    as counters is skipped)."""
    total: dict[str, float] = {}
    for name in os.listdir(directory):
        if not (name.startswith(SERVICE_STATS_PREFIX) and name.endswith(".json")):
            continue
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                values = json.load(handle)
        except (OSError, ValueError):
            continue
        if not isinstance(values, dict):
            continue
        for key, value in values.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                total[key] = total.get(key, 0.0) + float(value)
    return total


_CACHE_COUNTERS = ("hits", "misses", "errors", "writes", "invalid")


class _ServiceCollector(Collector):
    """Reads the cache and service counters at scrape time (``directory``: every worker's,
    summed; else this process's)."""

    def __init__(
        self, context: Callable[[], ServiceContext | None], directory: str | None = None
    ) -> None:
        self._context = context
        self._directory = directory

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        ctx = self._context()
        if ctx is None:
            return
        backend = ctx.cache.backend
        counters = (
            _service_counters(ctx) if self._directory is None else _summed_counters(self._directory)
        )
        for name, doc in (
            ("hits", "Latency cache hits"),
            ("misses", "Latency cache misses"),
            ("errors", "Latency cache backend errors (each degraded to local compute)"),
            ("writes", "Latency cache entries written"),
            ("invalid", "Cache values that failed their schema check (recomputed, overwritten)"),
        ):
            family = CounterMetricFamily(f"chunkwise_cache_{name}", doc, labels=["backend"])
            family.add_metric([backend], counters.get(f"cache_{name}", 0.0))
            yield family
        evaluations = CounterMetricFamily(
            "chunkwise_forward_evaluations", "Forward passes computed by the latency model"
        )
        evaluations.add_metric([], counters.get("forward_evaluations", 0.0))
        yield evaluations
        responses = CounterMetricFamily(
            "chunkwise_response_cache_hits", "Optimize responses served from the response cache"
        )
        responses.add_metric([], counters.get("response_cache_hits", 0.0))
        yield responses
        up = GaugeMetricFamily(
            "chunkwise_cache_up", "1 when the cache backend answered a probe", labels=["backend"]
        )
        up.add_metric([backend], 1.0 if ctx.cache.check().reachable else 0.0)
        yield up


#: prometheus_client's multiprocess mode: set by ``chunkwise serve --workers N`` (or the
#: deployment) to a directory every worker writes its metrics into.
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: Each worker's service counters (cache hits, evaluations, ...) in the multiprocess directory.
SERVICE_STATS_PREFIX = "chunkwise_service_"
#: How stale another worker's service counters may be in a scrape (s).
SERVICE_STATS_INTERVAL_S = 1.0


#: The HTTP methods a metric names (RFC 9110's and PATCH); any other is counted as ``other``.
METRIC_METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}
)
OTHER_METHOD = "other"


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROCESS_ENV) or None


class Metrics:
    """The HTTP and service metrics of this process; with ``PROMETHEUS_MULTIPROC_DIR`` set, of
    every worker sharing that directory (:meth:`exposition`)."""

    def __init__(self, context: Callable[[], ServiceContext | None]) -> None:
        self._context = context
        self.directory = multiprocess_dir()
        self._stats_written_s = -math.inf
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "chunkwise_http_requests",
            "HTTP requests answered",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "chunkwise_http_request_duration_seconds",
            "HTTP request duration",
            ["method", "route"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
            registry=self.registry,
        )
        self.registry.register(_ServiceCollector(context))
        # process_* (CPU, memory, start time): tells the workers apart when scraping several.
        ProcessCollector(registry=self.registry)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """One request, under bounded labels: a method outside :data:`METRIC_METHODS` counts as
        ``other`` (5,000 invented method names took /metrics from 0.6 to 10.3 MB), the route is
        the matched template or ``<unmatched>``."""
        method = method if method in METRIC_METHODS else OTHER_METHOD
        self.requests.labels(method, route, str(status)).inc()
        self.duration.labels(method, route).observe(seconds)
        if self.directory is not None:
            self._write_service_stats(every_s=SERVICE_STATS_INTERVAL_S)

    def _write_service_stats(self, every_s: float = 0.0) -> None:
        """This worker's service counters, for the other workers' scrapes (atomic replace),
        unless it wrote them less than ``every_s`` ago (a request end: at most once a second,
        so the file is not rewritten on every request)."""
        ctx = self._context()
        now = time.monotonic()
        if ctx is None or self.directory is None or now - self._stats_written_s < every_s:
            return
        self._stats_written_s = now
        stats = _service_counters(ctx)
        path = os.path.join(self.directory, f"{SERVICE_STATS_PREFIX}{os.getpid()}.json")
        try:
            with open(f"{path}.tmp", "w", encoding="utf-8") as handle:
                json.dump(stats, handle)
            os.replace(f"{path}.tmp", path)
        except OSError:
            logger.debug("could not write the service metrics to %s", path)

    def exposition(self) -> bytes:
        """The Prometheus text: this process's registry, or in multiprocess mode every worker's
        HTTP metrics (summed by prometheus_client) and service counters (summed here)."""
        if self.directory is None:
            return generate_latest(self.registry)
        self._write_service_stats()
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=self.directory)  # type: ignore[no-untyped-call]
        registry.register(_ServiceCollector(self._context, directory=self.directory))
        return generate_latest(registry)


class _BodyGuard:
    """One request's body as the app reads it: a streamed body that grows past the limit, or
    one not whole ``timeout_s`` after the app first reads it (half-sent, a slow client, a byte
    trickled now and then), fails the read; the framework turns a failed read into its own
    400, which the middleware drops for a 413 or a 408. The timeout applies only while the
    body is incomplete: later reads wait for a disconnect, legitimately."""

    __slots__ = (
        "_receive",
        "answered",
        "deadline",
        "done",
        "limit",
        "received",
        "timed_out",
        "timeout_s",
        "too_large",
    )

    def __init__(self, receive: Receive, limit: int, timeout_s: float) -> None:
        self._receive = receive
        self.limit = limit
        self.timeout_s = timeout_s
        self.received = 0
        self.done = False
        self.too_large = False
        self.timed_out = False
        self.answered = False
        self.deadline: float | None = None

    @property
    def failed(self) -> bool:
        return self.too_large or self.timed_out

    async def receive(self) -> Message:
        if self.done:
            return await self._receive()
        if self.deadline is None:  # the whole body, not each piece: a trickle is cut too
            self.deadline = time.monotonic() + self.timeout_s
        try:
            with anyio.fail_after(max(0.0, self.deadline - time.monotonic())):
                message = await self._receive()
        except TimeoutError:
            self.timed_out = True
            raise _BodyTimeout from None
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.limit:
                self.too_large = True
                raise _BodyTooLarge
            self.done = not message.get("more_body", False)
        return message


class _BodyTimeout(Exception):
    """The body stopped arriving for longer than the body timeout."""


class _BodyTooLarge(Exception):
    pass


class RequestContextMiddleware:
    """Pure ASGI: request id (echoed in ``X-Request-ID``), body size limit (413 problem+json),
    metrics and one access log line."""

    def __init__(
        self,
        app: ASGIApp,
        metrics: Metrics,
        max_body_bytes: int = 1_048_576,
        body_timeout_s: float = 10.0,
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    @staticmethod
    def _problem(
        scope: Scope,
        request_id: str,
        kind: str,
        title: str,
        status: int,
        detail: str,
        headers: dict[str, str] | None = None,
    ) -> ProblemResponse:
        """A problem+json answer the middleware sends itself (the app never saw the request,
        or its answer to a failed body read is dropped)."""
        body = problem_dict(
            type=f"{PROBLEM_BASE}{kind}",
            title=title,
            status=status,
            detail=detail,
            instance=scope["path"],
            request_id=request_id,
        )
        return ProblemResponse(body, status_code=status, headers=headers)

    def _too_large(self, scope: Scope, request_id: str) -> ProblemResponse:
        detail = f"the body exceeds {self.max_body_bytes} bytes"
        return self._problem(
            scope, request_id, "body-too-large", "Request body too large", 413, detail
        )

    def _too_slow(self, scope: Scope, request_id: str) -> ProblemResponse:
        """408, and the connection is closed: the rest of the body may still be on its way."""
        detail = f"the body did not arrive within {self.body_timeout_s:g} s"
        return self._problem(
            scope,
            request_id,
            "body-timeout",
            "Request body too slow",
            408,
            detail,
            headers={"Connection": "close"},
        )

    def _not_json(self, scope: Scope, request_id: str, content_type: str) -> ProblemResponse:
        detail = f"a POST body must be application/json, not {loggable(content_type) or 'none'}"
        return self._problem(
            scope, request_id, "unsupported-media-type", "Unsupported media type", 415, detail
        )

    def _refused_upfront(
        self, scope: Scope, headers: Headers, request_id: str
    ) -> ProblemResponse | None:
        """A request answered from its headers alone: a POST body that is not JSON (a page on
        another origin can POST text/plain or a form without a CORS preflight; only JSON is
        read, so it cannot make a loopback service compute), or a declared body too large."""
        declared = headers.get("content-length", "")
        has_body = (declared.isdigit() and int(declared) > 0) or "transfer-encoding" in headers
        content_type = headers.get("content-type", "")
        if scope["method"] == "POST" and has_body and not is_json(content_type):
            return self._not_json(scope, request_id, content_type)
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            return self._too_large(scope, request_id)
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        incoming = headers.get(REQUEST_ID_HEADER, "")
        request_id = incoming if _VALID_REQUEST_ID.match(incoming) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        token = request_id_var.set(request_id)
        status = 500
        started = False
        start = time.perf_counter()
        body = _BodyGuard(receive, self.max_body_bytes, self.body_timeout_s)

        async def send_with_id(message: Message) -> None:
            nonlocal status, started
            if body.failed and not body.answered:
                return  # the app's answer to a failed read: the guard's problem goes instead
            if message["type"] == "http.response.start":
                status = int(message["status"])
                started = True
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = request_id
            await send(message)

        try:
            upfront = self._refused_upfront(scope, headers, request_id)
            if upfront is not None:
                await upfront(scope, receive, send_with_id)
            else:
                try:
                    await self.app(scope, body.receive, send_with_id)
                except (_BodyTooLarge, _BodyTimeout):
                    if started:
                        raise
                if body.failed and not started:
                    body.answered = True
                    problem = (
                        self._too_large(scope, request_id)
                        if body.too_large
                        else self._too_slow(scope, request_id)
                    )
                    await problem(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - start
            route = getattr(scope.get("route"), "path", None) or "<unmatched>"
            self.metrics.observe(scope["method"], route, status, elapsed)
            logger.info(
                "%s %s -> %d in %.1f ms",
                loggable(scope["method"]),
                loggable(scope["path"]),
                status,
                elapsed * 1e3,
            )
            request_id_var.reset(token)
