"""Every error leaves the service as RFC 9457 ``application/problem+json``, mapped here once.

================================  ======  =========================================
exception                          status  notes
================================  ======  =========================================
RequestValidationError             422     ``errors``: one entry per invalid field
  (body is not JSON at all)        400
InvalidParameterError              422     ``errors``: the field and its allowed range
UnknownModelError/UnknownDevice    422     ``valid``: the names that exist
UnsupportedError                   422     well-formed but not representable
SearchLimitError                   422     the search bounds (see README)
SimulationError                    422     the configuration cannot make progress
InfeasibleError                    422     cannot run at all (results say why otherwise)
DeadlineExceededError              504     ``Retry-After``
OverloadedError (api.compute)      503     every computation slot and queue place taken
ChildProcessLostError              503     a heavy-lane child died (pool restarted)
CalibrationStoreError              503     not stored, or the store unreachable (``Retry-After``)
SweepStoreError                    503     store or broker down: nothing queued (``Retry-After``)
other ChunkwiseError               400
HTTPException                      its own status (404 unknown route, 405, ...)
anything else                      500     logged with the request id; a bug
================================  ======  =========================================
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.status import HTTP_500_INTERNAL_SERVER_ERROR

from app.api.compute import OverloadedError
from app.api.logsafe import loggable
from app.core.errors import (
    ChunkwiseError,
    DeadlineExceededError,
    InfeasibleError,
    InvalidParameterError,
    SearchLimitError,
    SimulationError,
    UnknownNameError,
    UnsupportedError,
)
from app.models.common import Problem, ProblemFieldError, problem_dict
from app.services.calibration_store import CalibrationStoreError
from app.services.processes import ChildProcessLostError
from app.services.sweep_store import SweepStoreError

logger = logging.getLogger("chunkwise.api")

PROBLEM_JSON = "application/problem+json"
PROBLEM_BASE = "urn:chunkwise:problem:"


#: OpenAPI documentation of the error responses every resource can give.
PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": Problem, "content": {PROBLEM_JSON: {}}, "description": description}
    for status, description in (
        (400, "Malformed request or domain error (problem+json)"),
        (401, "No valid bearer token, when the service has API keys (problem+json)"),
        (422, "Invalid payload, unknown name or unsupported configuration (problem+json)"),
        (503, "Overloaded: every computation slot busy (problem+json)"),
        (504, "Computation deadline exceeded (problem+json)"),
    )
}


class ProblemResponse(JSONResponse):
    media_type = PROBLEM_JSON


def problem_response(
    request: Request,
    status: int,
    title: str,
    detail: str = "",
    *,
    kind: str | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> ProblemResponse:
    body = problem_dict(
        type=f"{PROBLEM_BASE}{kind}" if kind else "about:blank",
        title=title,
        status=status,
        detail=detail,
        instance=request.url.path,
        request_id=getattr(request.state, "request_id", None),
        **extra,
    )
    return ProblemResponse(body, status_code=status, headers=headers)


#: A 422 lists at most this many invalid fields (a body with 70,000 unknown keys would
#: otherwise answer megabytes); ``detail`` says how many were left out.
MAX_REPORTED_ERRORS = 50
#: Longest rendering of one location part or message (keys and messages come from the body).
MAX_ERROR_TEXT = 200


def _cut(text: str) -> str:
    return text if len(text) <= MAX_ERROR_TEXT else text[: MAX_ERROR_TEXT - 3] + "..."


def _loc(loc: Any) -> list[str | int]:
    return [part if isinstance(part, int) else _cut(str(part)) for part in loc]


async def _validation(request: Request, exc: Exception) -> ProblemResponse:
    assert isinstance(exc, RequestValidationError)
    raw = list(exc.errors())
    if any(err.get("type") == "json_invalid" for err in raw):
        return problem_response(
            request, 400, "Malformed request body", "the body is not valid JSON", kind="bad-json"
        )
    errors = [
        ProblemFieldError(
            loc=_loc(err.get("loc", ())),
            msg=_cut(str(err.get("msg", ""))),
            type=_cut(str(err.get("type"))),
        )
        for err in raw[:MAX_REPORTED_ERRORS]
    ]
    detail = "; ".join(
        f"{'.'.join(str(p) for p in e.loc if p != 'body') or 'body'}: {e.msg}" for e in errors
    )
    if len(raw) > MAX_REPORTED_ERRORS:
        detail += f"; and {len(raw) - MAX_REPORTED_ERRORS} more invalid fields"
    return problem_response(
        request,
        422,
        "Request validation failed",
        detail,
        kind="validation",
        errors=[e.model_dump() for e in errors],
    )


async def _domain(request: Request, exc: Exception) -> ProblemResponse:
    assert isinstance(exc, ChunkwiseError)
    detail = str(exc)
    if isinstance(exc, InvalidParameterError):
        return problem_response(
            request,
            422,
            "Invalid parameter",
            detail,
            kind="invalid-parameter",
            errors=[ProblemFieldError(loc=["body", exc.field], msg=detail).model_dump()],
        )
    if isinstance(exc, UnknownNameError):
        return problem_response(
            request,
            422,
            f"Unknown {exc.kind}",
            detail,
            kind=f"unknown-{exc.kind}",
            valid=exc.valid,
            errors=[
                ProblemFieldError(
                    loc=["body", exc.field], msg=f"unknown {exc.kind} {exc.name!r}"
                ).model_dump()
            ],
        )
    if isinstance(exc, UnsupportedError):
        return problem_response(
            request, 422, "Unsupported configuration", detail, kind="unsupported"
        )
    if isinstance(exc, SearchLimitError):
        return problem_response(request, 422, "Search too large", detail, kind="search-limit")
    if isinstance(exc, SimulationError):
        return problem_response(request, 422, "Simulation failed", detail, kind="simulation")
    if isinstance(exc, InfeasibleError):
        return problem_response(request, 422, "Infeasible configuration", detail, kind="infeasible")
    if isinstance(exc, DeadlineExceededError):
        return problem_response(
            request,
            504,
            "Computation deadline exceeded",
            detail,
            kind="deadline",
            headers={"Retry-After": "1"},
        )
    return problem_response(request, 400, "Bad request", detail, kind="domain")


async def _overloaded(request: Request, exc: Exception) -> ProblemResponse:
    return problem_response(
        request,
        503,
        "Service overloaded",
        str(exc),
        kind="overloaded",
        headers={"Retry-After": "1"},
    )


async def _store(request: Request, exc: Exception) -> ProblemResponse:
    assert isinstance(exc, CalibrationStoreError)
    retry = exc.retry_after_s
    return problem_response(
        request,
        503,
        exc.title,
        str(exc),
        kind="calibration-store",
        headers=None if retry is None else {"Retry-After": str(retry)},
    )


async def _sweep_store(request: Request, exc: Exception) -> ProblemResponse:
    return problem_response(
        request,
        503,
        "Sweep not queued",
        str(exc),
        kind="sweep-store",
        headers={"Retry-After": "5"},
    )


async def _http(request: Request, exc: Exception) -> ProblemResponse:
    assert isinstance(exc, StarletteHTTPException)
    title = {401: "Unauthorized", 404: "Not found", 405: "Method not allowed"}.get(
        exc.status_code, "HTTP error"
    )
    detail = exc.detail if isinstance(exc.detail, str) else ""
    headers = dict(exc.headers) if exc.headers else None
    if exc.status_code == 405:
        headers = {**(headers or {}), "Allow": _allowed_methods(request)}
    return problem_response(request, exc.status_code, title, detail, headers=headers)


#: The methods a 405's ``Allow`` may name (RFC 9110's, and PATCH).
_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def _allowed_methods(request: Request) -> str:
    """Every method some route serves on this path (Starlette's 405 names only the first
    matching route's, and ``/v1/calibrations/{id}`` has a GET and a DELETE route). Asked of
    each top-level route with ``matches``: FastAPI's included routers (``app.include_router``)
    keep their routes' methods to themselves, so reading ``route.methods`` gave an empty
    ``Allow``."""
    return ", ".join(
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL
            for route in request.app.router.routes
        )
    )


async def _unhandled(request: Request, exc: Exception) -> ProblemResponse:
    logger.exception(
        "unhandled error on %s %s (request_id=%s)",
        loggable(request.method),
        loggable(request.url.path),
        getattr(request.state, "request_id", "-"),
    )
    return problem_response(
        request, HTTP_500_INTERNAL_SERVER_ERROR, "Internal server error", kind="internal"
    )


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(ChunkwiseError, _domain)
    app.add_exception_handler(OverloadedError, _overloaded)
    app.add_exception_handler(ChildProcessLostError, _overloaded)
    app.add_exception_handler(CalibrationStoreError, _store)
    app.add_exception_handler(SweepStoreError, _sweep_store)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(Exception, _unhandled)
