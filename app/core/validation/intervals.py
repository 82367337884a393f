"""The 80 % interval spreads of a replayed case: its calibration's cross-validated residuals when
one applies, the product's validation residuals of its group otherwise, and their union when a
calibration is given but the case lies outside it (:mod:`app.core.calibration`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.core.calibration.interval import Spread
from app.core.calibration.profile import CalibrationProfile
from app.core.calibration.residuals import GroupSpread, Residual, lookup, shipped_table
from app.core.catalog.models import get_model
from app.core.errors import ChunkwiseError
from app.core.validation.cases import ValidationCase
from app.core.validation.predict import PRECISIONS, ServingReplay, case_profile


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseSpreads:
    ttft: Spread
    tpot: Spread
    #: Whether the calibration covers the case ("" reason when it does or none is given).
    applicable: bool
    reason: str


def case_applicability(profile: CalibrationProfile, case: ValidationCase) -> tuple[bool, str]:
    return profile.applicability(
        device=case.device,
        engine=case_profile(case).name,
        model=case.model,
        quantization=PRECISIONS[case.precision].linear.value,
        isl=case.query_len,
        osl=case.output_len,
        concurrency=case.concurrency,
    )


def case_spreads(
    case: ValidationCase,
    calibration: CalibrationProfile | None,
    table: Mapping[str, GroupSpread] | None = None,
) -> CaseSpreads:
    """The case's spreads (``table``: the uncalibrated residuals, the shipped ones by default)."""
    group = lookup(
        shipped_table() if table is None else table,
        case.device,
        case_profile(case).name,
        get_model(case.model).is_moe,
        case.concurrency,
    )
    if calibration is None:
        return CaseSpreads(ttft=group.ttft, tpot=group.tpot, applicable=True, reason="")
    applicable, reason = case_applicability(calibration, case)
    ttft, tpot = calibration.spreads(applicable, (group.ttft, group.tpot))
    return CaseSpreads(ttft=ttft, tpot=tpot, applicable=applicable, reason=reason)


def case_residual(
    case: ValidationCase, ttft_pred: float, tpot_pred: float, tpot_ms: float
) -> Residual:
    """The log errors of one predicted case (``case.measured`` is its TTFT), its groups and its
    deployment (``source``: device, engine, model; a deployment weighs once in a group)."""
    engine = case_profile(case).name
    return Residual(
        device=case.device,
        engine=engine,
        is_moe=get_model(case.model).is_moe,
        ttft_log_error=math.log(ttft_pred / case.measured),
        tpot_log_error=math.log(tpot_pred / tpot_ms),
        source=f"{case.device} | {engine} | {case.model}",
        concurrency=case.concurrency,
    )


def replay_residuals(
    points: Sequence[tuple[ValidationCase, float]], replay: ServingReplay | None = None
) -> list[Residual]:
    """The log errors of every predictable case (``(case, measured TPOT)`` pairs; a case that
    cannot be predicted is left out: it has no error)."""
    replay = replay or ServingReplay()
    out: list[Residual] = []
    for case, tpot_ms in points:
        try:
            ttft_pred, tpot_pred = replay.predict(case)
        except ChunkwiseError:
            continue
        out.append(case_residual(case, ttft_pred, tpot_pred, tpot_ms))
    return out
