"""Every float a response carries is finite, or the configuration is reported infeasible with
the reason (the class closure behind issue 15's D6): the device and model bounds keep latencies
finite, and this guard holds whatever a future formula does."""

from __future__ import annotations

import math
from typing import Any, TypeVar

from pydantic import BaseModel

from app.core import limits

ModelT = TypeVar("ModelT", bound=BaseModel)


def non_finite_paths(document: object, path: str = "") -> list[str]:
    """Where ``document`` (a dumped response) holds a NaN or an infinity."""
    if isinstance(document, float):
        return [] if math.isfinite(document) else [path or "<value>"]
    if isinstance(document, dict):
        return [
            p
            for k, v in document.items()
            for p in non_finite_paths(v, f"{path}.{k}" if path else str(k))
        ]
    if isinstance(document, list | tuple):
        return [p for i, v in enumerate(document) for p in non_finite_paths(v, f"{path}[{i}]")]
    return []


#: The figures a response may hold below zero: memory left and available (the forward or the
#: configuration does not fit).
SIGNED_FIGURES = frozenset({"memory_left_gb", "available_gb"})


def out_of_range_paths(document: object, path: str = "", key: str = "") -> list[str]:
    """Where a (cached) response document holds a figure no answer has: not finite, below zero
    (but :data:`SIGNED_FIGURES`), a latency (``*_ms``) beyond ``MAX_CACHED_LATENCY_MS``."""
    if isinstance(document, bool):
        return []
    if isinstance(document, int | float):
        bad = (
            not math.isfinite(document)
            or (document < 0 and key not in SIGNED_FIGURES)
            or (key.endswith("_ms") and document > limits.MAX_CACHED_LATENCY_MS)
        )
        return [path or "<value>"] if bad else []
    if isinstance(document, dict):
        return [
            p
            for k, v in document.items()
            for p in out_of_range_paths(v, f"{path}.{k}" if path else str(k), str(k))
        ]
    if isinstance(document, list | tuple):
        return [
            p for i, v in enumerate(document) for p in out_of_range_paths(v, f"{path}[{i}]", key)
        ]
    return []


def _zeroed(document: Any) -> Any:
    if isinstance(document, float):
        return document if math.isfinite(document) else 0.0
    if isinstance(document, dict):
        return {k: _zeroed(v) for k, v in document.items()}
    if isinstance(document, list | tuple):
        return [_zeroed(v) for v in document]
    return document


def reason_for(paths: list[str]) -> str:
    shown = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
    return (
        f"the latency model produced non-finite numbers ({shown}): the device's or the model's "
        "numbers are outside what it represents"
    )


def finite_or_infeasible(response: ModelT) -> ModelT:
    """``response`` as is when every float is finite; else with those numbers zeroed,
    ``feasible: false`` and the reason (a response model with ``feasible`` and ``reason``)."""
    document = response.model_dump()
    paths = non_finite_paths(document)
    if not paths:
        return response
    fixed = {**_zeroed(document), "feasible": False, "reason": reason_for(paths)}
    return type(response).model_validate(fixed)
