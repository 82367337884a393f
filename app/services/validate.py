"""``chunkwise validate``: replay published and measured data through the latency model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the replay harness loads when a validation runs, not with app.services
    from app.core.calibration import CalibrationProfile
    from app.core.validation import CaseFileReport, ValidationReport
    from app.core.validation.replicas import ReplicaReport


def validation_kinds() -> tuple[str, ...]:
    """Every case kind the validator can replay (``--all``), in report order."""
    from app.core.validation import LOADERS

    return tuple(LOADERS)


def validate(
    kinds: Sequence[str] | None = None,
    *,
    all_kinds: bool = False,
    drop_layout_duplicates: bool = False,
) -> ValidationReport:
    """Predict every case of ``kinds`` (default: the acceptance target ``ttft_bs1``; every
    kind with ``all_kinds``) and summarise the errors per kind and device.

    An unknown kind raises :class:`~app.core.errors.UnknownNameError` naming the valid ones.
    """
    from app.core.validation import TARGET_KIND, run_validation

    chosen = tuple(kinds) if kinds else (TARGET_KIND,)
    if all_kinds:
        chosen = validation_kinds()
    return run_validation(kinds=chosen, drop_layout_duplicates=drop_layout_duplicates)


def validate_cases(
    text: str,
    *,
    drop_layout_duplicates: bool = False,
    calibration: CalibrationProfile | None = None,
) -> CaseFileReport:
    """Replay every row of a measurement file (CSV text with the columns of
    ``measured_agg_serving_cases.csv``, or of ``measured_disagg_serving_cases.csv``: a header
    naming the prefill and decode pools is replayed disaggregated, or of
    ``ascend_serving_points.csv``: published Ascend results, one metric per row); a row that
    cannot be predicted carries its reason.

    A header with missing or unknown columns, no rows or more than ``MAX_CASE_ROWS`` raise
    :class:`~app.core.errors.InvalidParameterError` naming the problem.
    """
    from app.core.errors import InvalidParameterError
    from app.core.validation import (
        DisaggReplay,
        is_ascend_header,
        is_disagg_header,
        replay_ascend_file,
        replay_case_file,
        replay_disagg_file,
    )

    if calibration is not None and (is_disagg_header(text) or is_ascend_header(text)):
        raise InvalidParameterError(
            "--calibration",
            calibration.id,
            "an aggregated measurement file (a calibration "
            "profile is fitted to and applied on aggregated deployments)",
        )
    if is_ascend_header(text):
        return replay_ascend_file(text)
    if is_disagg_header(text):
        return replay_disagg_file(text, drop_layout_duplicates=drop_layout_duplicates)
    return replay_case_file(
        text,
        drop_layout_duplicates=drop_layout_duplicates,
        calibration=calibration,
        disaggregated=DisaggReplay().predict,  # rows whose recipe ran them disaggregated
    )


def validate_replicas(text: str) -> tuple[ReplicaReport, list[str]]:
    """The replica floor of a measurement file (CSV text with the configuration columns of
    either measured file, see :mod:`app.core.validation.replicas`) and its rows' case ids.

    A header without the columns a configuration needs, no rows or a measurement that is not a
    positive number raise :class:`~app.core.errors.InvalidParameterError` naming the problem.
    """
    from app.core.validation.replicas import replicas_of_text

    return replicas_of_text(text)
