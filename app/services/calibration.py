"""Calibrations: fit a profile to measured points, store it, apply it, and give every estimate
its 80 % interval (:mod:`app.core.calibration`).

A stored profile lives in the durable store (:mod:`.calibration_store`: the sweeps' Redis when
one is configured, so every worker sees it and nothing evicts it; the process's own store
otherwise) under ``calibration:<id>``, with an expiry time inside the value
(``calibration_ttl_s``) and the same TTL on the key. A profile's JSON is at most
:data:`MAX_PROFILE_BYTES`. A request names a stored
profile by id or sends one inline; either way it is read once per request, never refitted.

Ids are random (128 bits: nobody computes one from a CSV), and a profile belongs to the
request's owner (:data:`~app.services.context.REQUEST_OWNER`, the digest of its API key when
authentication is on): another owner reading, applying or deleting it is told it does not
exist, exactly as for an unknown id.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.core.calibration import (
    CalibrationProfile,
    Intervals,
    apply_to_device,
    apply_to_profile,
    estimate_intervals,
    profile_from_dict,
)
from app.core.calibration.residuals import lookup, shipped_table
from app.core.errors import DeadlineExceededError, InvalidParameterError, UnknownNameError
from app.core.profiles import EngineProfile
from app.services.calibration_store import KEY_PREFIX, UnsharedStoreError
from app.services.context import REQUEST_OWNER, ServiceContext, deadline_from
from app.services.resolve import ResolvedDeployment

if TYPE_CHECKING:  # the calibration wire models load with the calibrations API, not a search
    from app.models.calibration import CalibrationRequest

#: Largest stored profile (its JSON); a fit's profile is a few kilobytes.
MAX_PROFILE_BYTES = 64 * 1024


class UnknownCalibrationError(UnknownNameError):
    kind = "calibration"


def _rows_csv(points: Sequence[Mapping[str, object]]) -> str:
    """Points given as objects with the measurement file's columns -> that file's text."""
    from app.core.validation import CASE_COLUMNS

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CASE_COLUMNS)
    for i, point in enumerate(points):
        unknown = sorted(set(point) - set(CASE_COLUMNS))
        if unknown:
            raise InvalidParameterError(
                f"points[{i}].{unknown[0]}", unknown[0], f"one of {', '.join(CASE_COLUMNS)}"
            )
        writer.writerow(["" if point.get(c) is None else str(point.get(c)) for c in CASE_COLUMNS])
    return buffer.getvalue()


def calibrate_text(
    text: str,
    *,
    engine: str | None = None,
    free: Sequence[str] | None = None,
    deadline: float | None = None,
) -> CalibrationProfile:
    """The profile fitted to a measurement file's rows (domain errors name a bad input);
    ``deadline`` (monotonic time): past it the fit stops with :class:`DeadlineExceededError`."""
    from app.core.validation.calibrate import calibrate_case_file

    def interrupt() -> None:
        if deadline is not None and time.monotonic() > deadline:
            raise DeadlineExceededError(
                "the calibration fit ran past its deadline (APP_REQUEST_DEADLINE_S); fit fewer "
                "points"
            )

    return calibrate_case_file(
        text, engine=engine, free=free, interrupt=None if deadline is None else interrupt
    )


def calibrate_points(
    points: Sequence[Mapping[str, object]],
    *,
    engine: str | None = None,
    free: Sequence[str] | None = None,
    deadline: float | None = None,
) -> CalibrationProfile:
    return calibrate_text(_rows_csv(points), engine=engine, free=free, deadline=deadline)


def load_profile_text(text: str) -> CalibrationProfile:
    """A profile saved by ``chunkwise calibrate --out`` (a domain error when malformed)."""
    try:
        data = json.loads(text)
    except ValueError as err:
        raise InvalidParameterError("calibration", "<file>", f"a JSON profile ({err})") from None
    return profile_from_dict(data)


# -- the store ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class StoredCalibration:
    profile: CalibrationProfile
    expires_at_s: float


def new_calibration_id() -> str:
    """``cal-`` and 32 random hex digits (128 bits)."""
    return "cal-" + secrets.token_hex(16)


def store(context: ServiceContext, profile: CalibrationProfile) -> StoredCalibration:
    body = profile.to_dict()
    if len(json.dumps(body)) > MAX_PROFILE_BYTES:
        raise InvalidParameterError(
            "calibration", "<profile>", f"at most {MAX_PROFILE_BYTES} bytes"
        )
    settings = context.settings
    if settings.workers > 1 and not context.calibrations.shared:
        raise UnsharedStoreError(
            f"calibrations need the shared store: {settings.workers} workers each keep their "
            "own, so a profile one stored the others would not know; set APP_CACHE_BACKEND=redis "
            "and APP_REDIS_URL, or APP_SWEEP_STORE_URL (or serve with one worker)"
        )
    expires = time.time() + settings.calibration_ttl_s
    calibration_id = new_calibration_id()
    value = {
        "id": calibration_id,
        "owner": REQUEST_OWNER.get(),
        "profile": body,
        "expires_at_s": expires,
    }
    context.calibrations.put(calibration_id, value, ttl_s=settings.calibration_ttl_s)
    return StoredCalibration(
        profile=dataclasses.replace(profile, stored_id=calibration_id), expires_at_s=expires
    )


def fetch(context: ServiceContext, calibration_id: str) -> StoredCalibration:
    """The stored profile, or :class:`UnknownCalibrationError` (also for an expired one, one
    of another owner, or a stored value that does not read back as a profile)."""
    value = context.calibrations.get(calibration_id)
    if (
        isinstance(value, dict)
        and value.get("id") == calibration_id
        and value.get("owner") == REQUEST_OWNER.get()
        and isinstance(value.get("expires_at_s"), int | float)
    ):
        expires = float(value["expires_at_s"])
        if expires > time.time():
            try:
                profile = profile_from_dict(value.get("profile"))
            except InvalidParameterError:
                context.cache.stats.reject(KEY_PREFIX + calibration_id, "not a calibration")
            else:
                stored = dataclasses.replace(profile, stored_id=calibration_id)
                return StoredCalibration(profile=stored, expires_at_s=expires)
    raise UnknownCalibrationError(calibration_id, ["the id a POST /v1/calibrations returned"])


def delete(context: ServiceContext, calibration_id: str) -> None:
    fetch(context, calibration_id)  # 404 for an unknown one
    context.calibrations.delete(calibration_id)


def resolve_calibration(
    context: ServiceContext, ref: str | Mapping[str, Any] | None
) -> CalibrationProfile | None:
    """A request's ``calibration``: a stored id, an inline profile, or none."""
    if ref is None:
        return None
    if isinstance(ref, str):
        try:
            return fetch(context, ref).profile
        except UnknownCalibrationError:
            raise InvalidParameterError(
                "calibration", ref, "the id of a stored calibration (POST /v1/calibrations)"
            ) from None
    return profile_from_dict(ref)


# -- applying it ----------------------------------------------------------------------------------
def calibrated_profile(
    profile: EngineProfile, calibration: CalibrationProfile | None
) -> EngineProfile:
    """The engine profile with the fitted host and front-end times."""
    return profile if calibration is None else apply_to_profile(profile, calibration.values)


def calibrated(
    deployment: ResolvedDeployment, calibration: CalibrationProfile | None
) -> ResolvedDeployment:
    """The deployment (resolved with :func:`calibrated_profile`) with the fitted efficiencies."""
    if calibration is None:
        return deployment
    return dataclasses.replace(
        deployment,
        device=apply_to_device(deployment.device, calibration.values),
        calibration=calibration,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Uncertainty:
    """What the response says of one estimate's uncertainty."""

    intervals: Intervals
    calibration: dict[str, Any] | None


def uncertainty(
    deployment: ResolvedDeployment,
    *,
    input_length: int,
    output_length: int,
    concurrency: int | None,
    ttft_ms: float,
    tpot_ms: float,
    throughput: float,
) -> Uncertainty:
    """The 80 % intervals of one estimate (see :mod:`app.core.calibration.interval`): from the
    calibration's cross-validated residuals when it covers the estimate, their union with the
    product's own validation residuals of the group when it does not, those alone without one."""
    group = lookup(
        shipped_table(),
        deployment.device.name,
        deployment.profile.name,
        deployment.model.is_moe,
        concurrency,
    )
    ttft, tpot = group.ttft, group.tpot
    note: dict[str, Any] | None = None
    cal = deployment.calibration
    if cal is not None:
        applicable, reason = cal.applicability(
            device=deployment.device.name,
            engine=deployment.profile.name,
            model=deployment.model.name,
            quantization=deployment.quantization.linear.value,
            isl=input_length,
            osl=output_length,
            concurrency=concurrency,
        )
        ttft, tpot = cal.spreads(applicable, (ttft, tpot))
        note = {
            "id": cal.id,
            "applicable": applicable,
            "reason": reason or None,
            "parameters": dict(cal.parameters),
        }
    intervals = estimate_intervals(
        ttft_ms=ttft_ms,
        tpot_ms=tpot_ms,
        throughput=throughput,
        output_length=output_length,
        ttft=ttft,
        tpot=tpot,
    )
    return Uncertainty(intervals=intervals, calibration=note)


def create_calibration(context: ServiceContext, request: CalibrationRequest) -> StoredCalibration:
    """``POST /v1/calibrations``: fit the request's points under the request deadline
    (``APP_REQUEST_DEADLINE_S``, from the request's arrival) and store the profile."""
    free = None if request.free is None else list(request.free)
    deadline = deadline_from(context.settings)
    if request.points is not None:
        profile = calibrate_points(
            request.points, engine=request.engine, free=free, deadline=deadline
        )
    else:
        text = request.csv or ""
        profile = calibrate_text(text, engine=request.engine, free=free, deadline=deadline)
    return store(context, profile)
