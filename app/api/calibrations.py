"""``/v1/calibrations``: fit a calibration profile to measured runs, read it, delete it."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Response

from app.api.deps import ContextDep, GateDep
from app.api.errors import PROBLEM_JSON, PROBLEM_RESPONSES
from app.models.calibration import CalibrationRequest, CalibrationResponse
from app.models.common import Problem
from app.services import calibration as service

RESPONSES: dict[int | str, dict[str, Any]] = {
    **PROBLEM_RESPONSES,
    **{
        status: {"model": Problem, "content": {PROBLEM_JSON: {}}, "description": description}
        for status, description in (
            (404, "No stored calibration with that id (unknown or expired)"),
            (405, "Method not allowed on this path"),
            (413, "Body over the size limit"),
            (
                503,
                "Overloaded, or the calibration store did not take the write or answer a read "
                "(Retry-After), or it cannot keep the profile (several workers without a shared "
                "store, a full in-process store)",
            ),
        )
    },
}
router = APIRouter(prefix="/v1/calibrations", tags=["calibration"], responses=RESPONSES)
CalibrationIdPath = Annotated[
    str, Path(description="the id POST /v1/calibrations returned (cal- and 32 hex digits)")
]


def _response(stored: service.StoredCalibration) -> CalibrationResponse:
    return CalibrationResponse(
        id=stored.profile.id, expires_at_s=stored.expires_at_s, profile=stored.profile.to_dict()
    )


@router.post("", response_model=CalibrationResponse, status_code=201)
async def create_calibration(
    request: CalibrationRequest, context: ContextDep, gate: GateDep
) -> CalibrationResponse:
    """Fit a profile to the measured runs and store it (in the durable store when configured, so
    every worker sees it and nothing evicts it). The profile states which parameters were fitted
    and why the others were not, the fit's errors and its cross-validated errors. Fewer points
    than the free parameters need, runs of several devices, engines, models or quantizations, or
    a non-positive measurement: 422 naming the problem. The fit runs in the heavy lane (a child
    process when the worker has them) under the request deadline (``APP_REQUEST_DEADLINE_S``:
    504 past it); at most ``MAX_CALIBRATION_POINTS`` points per fit (README, "Bounds")."""
    stored = await gate.run_service("calibrate", service.create_calibration, context, request)
    return _response(stored)


@router.get("/{calibration_id}", response_model=CalibrationResponse)
async def read_calibration(
    calibration_id: CalibrationIdPath, context: ContextDep
) -> CalibrationResponse:
    """A stored profile (404 when unknown or expired)."""
    try:
        return _response(service.fetch(context, calibration_id))
    except service.UnknownCalibrationError:
        raise HTTPException(404, f"no calibration {calibration_id!r}") from None


@router.delete("/{calibration_id}", status_code=204)
async def delete_calibration(calibration_id: CalibrationIdPath, context: ContextDep) -> Response:
    """Remove a stored profile (404 when unknown or expired)."""
    try:
        service.delete(context, calibration_id)
    except service.UnknownCalibrationError:
        raise HTTPException(404, f"no calibration {calibration_id!r}") from None
    return Response(status_code=204)
