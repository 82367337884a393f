"""Application factory: the only place that wires the service together."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypedDict

import anyio
from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response

from app import __version__
from app.api import calibrations, catalog, deploy, forward, health, planning, sweeps
from app.api.auth import authenticate, load_key_digests
from app.api.compute import ComputeGate
from app.api.errors import PROBLEM_JSON, install_error_handlers
from app.api.observability import Metrics, RequestContextMiddleware, configure_logging
from app.services.context import ServiceContext, create_context
from app.services.processes import HeavyProcesses
from app.services.sweep_jobs import Sweeps
from app.settings import Settings, get_settings

WEB_DIR = Path(__file__).with_name("web")  # the dashboard's static assets (package data)
#: How long a browser may reuse a CORS preflight answer (s).
CORS_MAX_AGE_S = 600
#: Browsers keep the dashboard's files but ask again (ETag / Last-Modified -> 304) before using
#: them, so an upgrade never runs old scripts against a new API.
REVALIDATE = {"Cache-Control": "no-cache"}
#: The dashboard loads only its own files (scripts, styles, the vendored Chart.js) and talks
#: only to this origin; it may not be framed, and sends no referrer.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}
DASHBOARD_HEADERS = {**REVALIDATE, **SECURITY_HEADERS}
#: The API docs (Swagger UI, ReDoc) run from vendored bundles too; they inject <style> elements
#: and ReDoc starts a worker from a blob, so only styles and workers are loosened.
DOCS_HEADERS = {
    **DASHBOARD_HEADERS,
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
}


class RevalidatedStaticFiles(StaticFiles):
    """Static files answered with ``Cache-Control: no-cache`` and the security headers."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers.update(DASHBOARD_HEADERS)
        return response


def _problem_schemas_in_their_media_type(app: FastAPI) -> None:
    """Error responses are ``application/problem+json``: the schema FastAPI files under
    ``application/json`` moves there, so generated clients parse every error as a ``Problem``
    (instead of an untyped body)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            for operations in schema.get("paths", {}).values():
                for operation in operations.values():
                    for response in operation.get("responses", {}).values():
                        content = response.get("content", {})
                        if PROBLEM_JSON in content and "application/json" in content:
                            content[PROBLEM_JSON] = content.pop("application/json")
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


class LifespanState(TypedDict):
    context: ServiceContext
    gate: ComputeGate
    sweeps: Sweeps


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    configure_logging(settings.log_level)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[LifespanState]:
        # Computations are CPU-bound threads sharing the GIL with the event loop and the light
        # lane: a shorter switch interval bounds how long a cheap request waits for its turn.
        sys.setswitchinterval(settings.gil_switch_interval_s)
        context = create_context(settings)
        app.state.context = context
        processes = (
            HeavyProcesses(settings, settings.heavy_process_count)
            if settings.heavy_process_count
            else None
        )
        # Sweeps: queued to the broker's workers, or (no broker) the API's own pool.
        sweep_jobs = Sweeps(settings)
        try:
            gate = ComputeGate.create(
                settings.max_concurrent_computations,
                settings.max_queued_computations,
                settings.max_light_computations,
                deadline_s=settings.request_deadline_s,
                processes=processes,
            )
            yield {"context": context, "gate": gate, "sweeps": sweep_jobs}
        finally:
            app.state.context = None
            await anyio.to_thread.run_sync(sweep_jobs.close)
            if processes is not None:
                await anyio.to_thread.run_sync(processes.close)
            await anyio.to_thread.run_sync(context.close)

    app = FastAPI(
        title="Chunkwise",
        version=__version__,
        summary="LLM serving performance with chunked prefill",
        lifespan=lifespan,
        # Operation ids are the handlers' names (simulate, optimize, ...): short and stable for
        # generated clients.
        generate_unique_id_function=lambda route: route.name,
        docs_url=None,  # served below from the vendored bundles: the docs work offline
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.key_digests = load_key_digests(settings)  # empty: authentication off
    app.state.context = None
    app.state.metrics = Metrics(lambda: app.state.context)
    app.add_middleware(
        RequestContextMiddleware,
        metrics=app.state.metrics,
        max_body_bytes=settings.max_body_bytes,
        body_timeout_s=settings.body_timeout_s,
    )
    if settings.cors_origin_list:
        # Outermost, so a browser's preflight is answered before the body checks run.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origin_list,
            allow_methods=["GET", "POST"],
            allow_headers=["authorization", "content-type", "x-request-id"],
            expose_headers=["x-request-id", "retry-after"],
            max_age=CORS_MAX_AGE_S,
        )
    install_error_handlers(app)
    app.include_router(health.router)  # open, like the docs and the dashboard's files
    keyed = [Depends(authenticate)]  # a bearer token when APP_API_KEYS(_FILE) configures keys
    for resource in (planning, forward, catalog, calibrations, deploy, sweeps):
        app.include_router(resource.router, dependencies=keyed)
    app.mount("/static", RevalidatedStaticFiles(directory=WEB_DIR), name="static")

    _problem_schemas_in_their_media_type(app)

    @app.get("/", include_in_schema=False)
    async def dashboard() -> FileResponse:
        return FileResponse(WEB_DIR / "index.html", headers=DASHBOARD_HEADERS)

    @app.get("/sweeps", include_in_schema=False)
    async def sweeps_page() -> FileResponse:
        return FileResponse(WEB_DIR / "sweeps.html", headers=DASHBOARD_HEADERS)

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> FileResponse:
        return FileResponse(WEB_DIR / "docs.html", headers=DOCS_HEADERS)

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> FileResponse:
        return FileResponse(WEB_DIR / "redoc.html", headers=DOCS_HEADERS)

    return app
