"""``chunkwise validate``: replay published and measured data through the latency model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the replay harness loads when a validation runs, not with app.services
    from app.core.validation import ValidationReport


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
