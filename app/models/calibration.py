"""Wire schemas of ``/v1/calibrations``: fit a calibration profile to measured points, read it
back, delete it (:mod:`app.services.calibration`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.core import limits
from app.core.calibration.parameters import PARAMETER_NAMES
from app.models.workload import EngineName

if TYPE_CHECKING:
    ParameterName = str
else:
    ParameterName = Literal[PARAMETER_NAMES]

#: Points one fit takes (``limits.MAX_CALIBRATION_POINTS``), and the longest CSV text a request
#: may carry instead.
MAX_POINTS = limits.MAX_CALIBRATION_POINTS
MAX_CSV_CHARS = 150_000

PointValue = str | int | float | None


class CalibrationRequest(BaseModel):
    """Measured runs, as objects with the columns of ``measured_agg_serving_cases.csv`` or as
    that CSV's text, and the fit's options."""

    model_config = ConfigDict(extra="forbid", strict=True)

    points: list[dict[str, PointValue]] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_POINTS,
        description="one object per measured run: case_id, model, hardware, engine, "
        "gemm_quant, moe_quant, tp, pp, attn_dp, moe_tp, moe_ep, num_devices, isl, osl, "
        "concurrency, ttft_ms, tpot_ms",
    )
    csv: str | None = Field(
        default=None,
        max_length=MAX_CSV_CHARS,
        description="the same runs as CSV text with that header (instead of points)",
    )
    engine: EngineName | None = Field(
        default=None, description="the engine family every run must have (default: theirs)"
    )
    free: list[ParameterName] | None = Field(
        default=None,
        min_length=1,
        max_length=len(PARAMETER_NAMES),
        description="fit exactly these parameters (default: chosen by how many points there "
        "are and what they vary; the profile says which and why)",
    )

    @model_validator(mode="after")
    def _one_source(self) -> CalibrationRequest:
        if (self.points is None) == (self.csv is None):
            raise ValueError("give exactly one of points and csv")
        return self


class CalibrationResponse(BaseModel):
    """A stored calibration profile (apply it with ``calibration: "<id>"``)."""

    id: str = Field(
        description="the stored profile's id: cal- and 32 random hex digits (128 bits; give "
        "it as calibration)"
    )
    expires_at_s: float = Field(description="Unix time, s, after which the stored profile is gone")
    profile: dict[str, Any] = Field(
        description="the profile: parameters (fitted), defaults, fixed (left, and why), "
        "ranges, fit (in-sample and cross-validated median errors, convergence), residuals, "
        "and dropped (reason -> case ids of points whose deployment cannot run) when any"
    )
