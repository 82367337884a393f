"""A calibration profile: fitted parameters, what they were fitted on, and how well they fit.

A profile is a value: it is written once by a fit (``chunkwise calibrate``, ``POST
/v1/calibrations``), stored or saved as JSON, and applied to later estimates (the device's
efficiencies and the engine profile's host and front-end times replaced by the fitted ones,
:mod:`app.core.calibration.parameters`). Its ``id`` is a digest of its content, so the same fit
has the same id on every worker and the latency-cache keys of calibrated forwards differ from
the catalog's.

**Applicability.** The fit saw one device, one engine family, one model and quantization, and
ranges of prompt length, output length and concurrency. An estimate for another device, engine,
model or quantization, or with a length or concurrency more than :data:`RANGE_FACTOR` outside the
measured range, is still answered with the fitted parameters but flagged (``applicable: false``
with the reason) and its interval widened to include the uncalibrated one: the efficiencies are
those of the measured shapes, and beyond a factor of 2 the GEMM sizes and batch sizes move into
regimes the points did not cover.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.core.calibration.interval import Spread
from app.core.calibration.parameters import PARAMETER_NAMES, check_values
from app.core.errors import InvalidParameterError

PROFILE_VERSION = 1
#: How far outside a measured range (as a factor) an estimate is still within the calibration.
RANGE_FACTOR = 2.0
#: Longest text field of a profile (names, reasons) and most layouts it records.
MAX_TEXT = 300
MAX_LAYOUTS = 64
#: Most measured points a profile names (those a fit dropped; a fit takes at most 500 points).
MAX_POINT_IDS = 500


@dataclass(frozen=True, slots=True, kw_only=True)
class Range:
    """The smallest and largest value of one quantity among the points."""

    low: int
    high: int

    def __post_init__(self) -> None:
        for field in ("low", "high"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidParameterError(field, value, "a positive integer")
        if self.low > self.high:
            raise InvalidParameterError("low", self.low, f"<= high ({self.high})")

    def covers(self, value: int) -> bool:
        return self.low / RANGE_FACTOR <= value <= self.high * RANGE_FACTOR

    def to_list(self) -> list[int]:
        return [self.low, self.high]


@dataclass(frozen=True, slots=True, kw_only=True)
class FitStats:
    """How the fit went: in-sample and cross-validated median absolute % errors."""

    points: int
    ttft_fit_median_ape_pct: float
    tpot_fit_median_ape_pct: float
    ttft_cv_median_ape_pct: float
    tpot_cv_median_ape_pct: float
    converged: bool
    iterations: int
    evaluations: int
    cross_validation: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CalibrationProfile:
    """See the module docstring."""

    device: str
    engine: str
    model: str
    quantization: str
    #: The fitted values of the free parameters (the others keep the catalog's).
    parameters: tuple[tuple[str, float], ...]
    #: The catalog values the fit started from, for every parameter.
    defaults: tuple[tuple[str, float], ...]
    #: Parameters left at the catalog value, with the reason.
    fixed: tuple[tuple[str, str], ...]
    isl: Range
    osl: Range
    concurrency: Range
    layouts: tuple[str, ...]
    fit: FitStats
    ttft_spread: Spread
    tpot_spread: Spread
    #: Points the fit could not place (the product cannot run their deployment: weights or one
    #: request's KV do not fit, a layout the runner refuses): each reason with its case ids.
    dropped: tuple[tuple[str, tuple[str, ...]], ...] = ()
    version: int = PROFILE_VERSION
    #: The id it is stored under (``POST /v1/calibrations``: random, 128 bits), when read
    #: from the store; None: :attr:`id` is a digest of the content.
    stored_id: str | None = None

    def __post_init__(self) -> None:
        check_values(dict(self.parameters))
        check_values(dict(self.defaults), "defaults")
        for field in ("device", "engine", "model", "quantization"):
            value = getattr(self, field)
            if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
                raise InvalidParameterError(field, value, f"a name of 1-{MAX_TEXT} characters")

    @property
    def values(self) -> dict[str, float]:
        return dict(self.parameters)

    @property
    def free(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.parameters)

    @property
    def id(self) -> str:
        """The id it is stored under, else a digest of the content (the same fit has the same
        digest everywhere)."""
        if self.stored_id is not None:
            return self.stored_id
        body = json.dumps(self._content(), sort_keys=True, separators=(",", ":"))
        return "cal-" + hashlib.sha256(body.encode()).hexdigest()[:20]

    def _content(self) -> dict[str, Any]:
        # ``dropped`` only when a point was dropped: a fit that placed every point keeps the
        # content, and so the id, it had before the key existed.
        dropped = {reason: list(case_ids) for reason, case_ids in self.dropped}
        return {
            "version": self.version,
            "device": self.device,
            "engine": self.engine,
            "model": self.model,
            "quantization": self.quantization,
            "parameters": dict(self.parameters),
            "defaults": dict(self.defaults),
            "fixed": dict(self.fixed),
            "ranges": {
                "isl": self.isl.to_list(),
                "osl": self.osl.to_list(),
                "concurrency": self.concurrency.to_list(),
                "layouts": list(self.layouts),
            },
            "fit": {name: getattr(self.fit, name) for name in FitStats.__dataclass_fields__},
            "residuals": {"ttft": self.ttft_spread.to_dict(), "tpot": self.tpot_spread.to_dict()},
            **({"dropped": dropped} if dropped else {}),
        }

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, **self._content()}

    def spreads(
        self, applicable: bool, uncalibrated: tuple[Spread, Spread]
    ) -> tuple[Spread, Spread]:
        """The TTFT and TPOT spreads of an estimate under this calibration: its cross-validated
        ones, or where it does not cover the estimate their union with the ``uncalibrated``."""
        if applicable:
            return self.ttft_spread, self.tpot_spread
        ttft, tpot = uncalibrated
        return self.ttft_spread.widened(ttft), self.tpot_spread.widened(tpot)

    def applicability(
        self,
        *,
        device: str,
        engine: str,
        model: str,
        quantization: str,
        isl: int,
        osl: int,
        concurrency: int | None,
    ) -> tuple[bool, str]:
        """Whether an estimate lies within what the points covered, and if not, why."""
        for what, asked, fitted in (
            ("device", device, self.device),
            ("engine", engine, self.engine),
            ("model", model, self.model),
            ("quantization", quantization, self.quantization),
        ):
            if asked != fitted:
                return False, f"calibrated on {what} {fitted}, not {asked}"
        for what, value, measured in (
            ("input length", isl, self.isl),
            ("output length", osl, self.osl),
            ("concurrency", concurrency, self.concurrency),
        ):
            if value is not None and not measured.covers(value):
                return False, (
                    f"{what} {value} is more than {RANGE_FACTOR:g}x outside the calibrated "
                    f"{measured.low}-{measured.high}"
                )
        return True, ""


# -- reading a profile back (a saved file or an inline API object) ---------------------------
_TOP = {"id", "version", "device", "engine", "model", "quantization", "parameters", "defaults",
        "fixed", "ranges", "fit", "residuals", "dropped"}  # fmt: skip
#: Keys a profile saved before they existed may lack.
_OPTIONAL = {"id", "dropped"}


def _mapping(data: object, field: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise InvalidParameterError(field, data, "an object")
    return data


def _range(data: Mapping[str, Any], name: str) -> Range:
    value = data.get(name)
    if not isinstance(value, list) or len(value) != 2:
        raise InvalidParameterError(f"ranges.{name}", value, "[low, high]")
    try:
        return Range(low=value[0], high=value[1])
    except InvalidParameterError as err:
        raise InvalidParameterError(f"ranges.{name}", value, err.allowed) from None


def _number(data: Mapping[str, Any], name: str, field: str) -> float:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidParameterError(f"{field}.{name}", value, "a finite number")
    if value < 0:
        raise InvalidParameterError(f"{field}.{name}", value, "a number >= 0")
    return float(value)


def _count(data: Mapping[str, Any], name: str, field: str) -> int:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidParameterError(f"{field}.{name}", value, "an integer >= 0")
    return value


def _text(value: object, field: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise InvalidParameterError(field, value, f"a string of at most {MAX_TEXT} characters")
    return value


def _dropped(data: object) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The ``dropped`` map (reason -> case ids), bounded and checked."""
    field = "calibration.dropped"
    out: list[tuple[str, tuple[str, ...]]] = []
    named = 0
    for reason, case_ids in _mapping(data, field).items():
        _text(reason, field)
        if not isinstance(case_ids, list) or not case_ids:
            raise InvalidParameterError(f"{field}.{reason}", case_ids, "a list of case ids")
        named += len(case_ids)
        if named > MAX_POINT_IDS:
            raise InvalidParameterError(field, named, f"at most {MAX_POINT_IDS} case ids")
        out.append((reason, tuple(_text(c, f"{field}.{reason}") for c in case_ids)))
    return tuple(out)


def profile_from_dict(data: object) -> CalibrationProfile:
    """A profile from its JSON form, every field checked (domain errors name the field). The
    ``id`` is recomputed from the content, never trusted."""
    body = _mapping(data, "calibration")
    unknown = sorted(set(body) - _TOP)
    if unknown:
        raise InvalidParameterError(
            f"calibration.{unknown[0]}", unknown[0], f"one of {sorted(_TOP)}"
        )
    missing = sorted(_TOP - _OPTIONAL - set(body))
    if missing:
        raise InvalidParameterError(f"calibration.{missing[0]}", None, "present")
    if body["version"] != PROFILE_VERSION:
        raise InvalidParameterError("calibration.version", body["version"], str(PROFILE_VERSION))
    parameters = _mapping(body["parameters"], "calibration.parameters")
    defaults = _mapping(body["defaults"], "calibration.defaults")
    fixed = _mapping(body["fixed"], "calibration.fixed")
    for name in fixed:
        if name not in PARAMETER_NAMES:
            raise InvalidParameterError(
                f"calibration.fixed.{name}", name, f"one of {', '.join(PARAMETER_NAMES)}"
            )
    ranges = _mapping(body["ranges"], "calibration.ranges")
    layouts = ranges.get("layouts")
    if not isinstance(layouts, list) or len(layouts) > MAX_LAYOUTS:
        raise InvalidParameterError(
            "calibration.ranges.layouts", layouts, f"a list of at most {MAX_LAYOUTS} layouts"
        )
    dropped = _dropped(body.get("dropped", {}))
    fit = _mapping(body["fit"], "calibration.fit")
    residuals = _mapping(body["residuals"], "calibration.residuals")
    converged = fit.get("converged")
    if not isinstance(converged, bool):
        raise InvalidParameterError("calibration.fit.converged", converged, "true or false")
    stats = FitStats(
        points=_count(fit, "points", "calibration.fit"),
        ttft_fit_median_ape_pct=_number(fit, "ttft_fit_median_ape_pct", "calibration.fit"),
        tpot_fit_median_ape_pct=_number(fit, "tpot_fit_median_ape_pct", "calibration.fit"),
        ttft_cv_median_ape_pct=_number(fit, "ttft_cv_median_ape_pct", "calibration.fit"),
        tpot_cv_median_ape_pct=_number(fit, "tpot_cv_median_ape_pct", "calibration.fit"),
        converged=converged,
        iterations=_count(fit, "iterations", "calibration.fit"),
        evaluations=_count(fit, "evaluations", "calibration.fit"),
        cross_validation=_text(fit.get("cross_validation"), "calibration.fit.cross_validation"),
    )
    try:
        return CalibrationProfile(
            device=body["device"],
            engine=body["engine"],
            model=body["model"],
            quantization=body["quantization"],
            parameters=tuple(check_values(parameters, "calibration.parameters").items()),
            defaults=tuple(check_values(defaults, "calibration.defaults").items()),
            fixed=tuple(
                (name, _text(reason, f"calibration.fixed.{name}")) for name, reason in fixed.items()
            ),
            isl=_range(ranges, "isl"),
            osl=_range(ranges, "osl"),
            concurrency=_range(ranges, "concurrency"),
            layouts=tuple(_text(x, "calibration.ranges.layouts") for x in layouts),
            fit=stats,
            ttft_spread=Spread.from_dict(residuals.get("ttft"), "calibration.residuals.ttft"),
            tpot_spread=Spread.from_dict(residuals.get("tpot"), "calibration.residuals.tpot"),
            dropped=dropped,
        )
    except InvalidParameterError as err:
        if err.field.startswith("calibration"):
            raise
        raise InvalidParameterError(f"calibration.{err.field}", err.value, err.allowed) from None
