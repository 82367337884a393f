"""``/v1/sweeps``: submit a sweep (202), watch it, stream its rows, cancel it (docs/sweeps.md)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import partial
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Depends, Header, HTTPException, Path, Query, Request, Response
from fastapi.responses import StreamingResponse

from app.api.deps import ContextDep, GateDep
from app.api.errors import PROBLEM_JSON, PROBLEM_RESPONSES
from app.core.errors import InvalidParameterError
from app.models.common import Problem
from app.models.sweep import ResultFormat, SweepRequest, SweepStatus
from app.services import sweep as sweep_service
from app.services.context import REQUEST_OWNER
from app.services.sweep_jobs import Sweeps, rate_and_eta
from app.services.sweep_store import SweepProgress, UnknownSweepError

RESPONSES: dict[int | str, dict[str, Any]] = {
    **PROBLEM_RESPONSES,
    **{
        status: {"model": Problem, "content": {PROBLEM_JSON: {}}, "description": description}
        for status, description in (
            (404, "No sweep with that id (unknown, expired, or another key's)"),
            (405, "Method not allowed on this path"),
            (413, "Body over the size limit"),
            (
                503,
                "Overloaded, or the sweep store or broker did not answer (Retry-After): "
                "nothing was queued",
            ),
        )
    },
}
router = APIRouter(prefix="/v1/sweeps", tags=["sweeps"], responses=RESPONSES)
SweepIdPath = Annotated[
    str, Path(max_length=64, description="the id POST /v1/sweeps returned (swp- and 32 hex)")
]
#: The media type of each results format.
MEDIA_TYPES = {
    "csv": "text/csv; charset=utf-8",
    "json": "application/json",
    "parquet": "application/vnd.apache.parquet",
}
RESULTS_CONTENT: dict[str, Any] = {
    "text/csv": {"schema": {"type": "string"}},
    "application/json": {"schema": {"type": "array", "items": {"type": "object"}}},
    "application/vnd.apache.parquet": {"schema": {"type": "string", "format": "binary"}},
}


def get_sweeps(request: Request) -> Sweeps:
    sweeps: Sweeps = request.state.sweeps
    return sweeps


SweepsDep = Annotated[Sweeps, Depends(get_sweeps)]


def _status(progress: SweepProgress, sweeps: Sweeps, now_s: float) -> SweepStatus:
    rate, eta = rate_and_eta(progress, now_s)
    sweep_id = progress.meta.id
    return SweepStatus(
        id=sweep_id,
        state=progress.state,  # type: ignore[arg-type]  # one of STATES
        total=progress.meta.total,
        done=progress.done,
        failed=progress.failed,
        rate_scenarios_s=rate,
        eta_s=eta,
        created_at_s=progress.meta.created_s,
        results=f"/v1/sweeps/{sweep_id}/results",
        executor=sweeps.executor,  # type: ignore[arg-type]  # celery or local
    )


async def _progress(sweeps: Sweeps, sweep_id: str) -> SweepProgress:
    owner = REQUEST_OWNER.get()
    try:
        return await anyio.to_thread.run_sync(sweeps.progress, sweep_id, owner)
    except UnknownSweepError:
        raise HTTPException(404, f"no sweep {sweep_id!r}") from None


@router.post(
    "",
    response_model=SweepStatus,
    status_code=202,
    responses={202: {"headers": {"Location": {"description": "the sweep's URL (GET it)"}}}},
)
async def create_sweep(
    request: SweepRequest,
    response: Response,
    context: ContextDep,
    gate: GateDep,
    sweeps: SweepsDep,
    idempotency_key: Annotated[
        str | None,
        Header(
            max_length=255,
            description="a key of your choosing: a resubmission with it returns the sweep it "
            "created (for the same API key) instead of a new one",
        ),
    ] = None,
) -> SweepStatus:
    """Queue a sweep: every scenario of the spec (a grid over a base request, or CSV rows) is
    validated and resolved first (422 naming the scenario and the field, or the count over
    100,000), then stored and queued in batches to the workers (``chunkwise worker``) or,
    without a broker, to the API's own process pool. 202 with the sweep and its
    ``Location``; poll it, read ``/results`` while it runs."""
    owner = REQUEST_OWNER.get()
    submit = partial(sweeps.submit, context, request, owner=owner, idempotency_key=idempotency_key)
    submitted = await gate.run(submit)
    progress = await _progress(sweeps, submitted.sweep_id)
    response.headers["Location"] = f"/v1/sweeps/{submitted.sweep_id}"
    return _status(progress, sweeps, time.time())


@router.get("/{sweep_id}", response_model=SweepStatus)
async def read_sweep(sweep_id: SweepIdPath, sweeps: SweepsDep) -> SweepStatus:
    """A sweep's state, scenarios done / failed / total, rate and ETA (404 when unknown)."""
    return _status(await _progress(sweeps, sweep_id), sweeps, time.time())


@router.get(
    "/{sweep_id}/results",
    response_class=StreamingResponse,
    responses={200: {"content": RESULTS_CONTENT, "description": "one row per scenario done"}},
)
async def sweep_results(
    sweep_id: SweepIdPath,
    sweeps: SweepsDep,
    format: Annotated[
        ResultFormat, Query(description="csv, json or parquet (parquet needs pyarrow)")
    ] = "csv",
) -> Response:
    """The rows written so far, in the spec's order (streamed; complete once the sweep is
    done): each scenario's sweep values, ``scenario_key``, the main figures (``ttft_ms``,
    ``tpot_ms``, ``throughput_tokens_s``, ``feasible``, an optimize row's best layout and
    concurrency) and ``error``."""
    owner = REQUEST_OWNER.get()
    try:
        meta, rows = await anyio.to_thread.run_sync(sweeps.rows, sweep_id, owner)
    except UnknownSweepError:
        raise HTTPException(404, f"no sweep {sweep_id!r}") from None
    names = list(meta.columns)
    if format == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise InvalidParameterError(
                "format", "parquet", f"csv or json ({sweep_service.PARQUET_NEEDS} on the server)"
            ) from None
        body = await anyio.to_thread.run_sync(sweep_service.parquet_bytes, names, rows)
        return Response(body, media_type=MEDIA_TYPES["parquet"])
    chunks: Iterator[str] = (
        sweep_service.csv_lines(names, rows)
        if format == "csv"
        else sweep_service.json_chunks(names, rows)
    )
    return StreamingResponse(chunks, media_type=MEDIA_TYPES[format])


@router.delete("/{sweep_id}", response_model=SweepStatus)
async def cancel_sweep(sweep_id: SweepIdPath, sweeps: SweepsDep) -> SweepStatus:
    """Cancel a sweep: batches not started are dropped (a worker takes them and writes
    nothing), the rows written stay readable; the sweep's state is ``cancelled`` (404 when
    unknown)."""
    owner = REQUEST_OWNER.get()
    try:
        progress = await anyio.to_thread.run_sync(sweeps.cancel, sweep_id, owner)
    except UnknownSweepError:
        raise HTTPException(404, f"no sweep {sweep_id!r}") from None
    return _status(progress, sweeps, time.time())
