"""Replay published measurements through the latency model and report the error.

Each row of a measurement file becomes a :class:`ValidationCase` of some ``kind``
(:mod:`~app.core.validation.cases`); every kind has a loader (``LOADERS``) and a predictor
(:func:`~app.core.validation.predict.predictors`) that turns a case into a predicted value in
the case's unit; :mod:`~app.core.validation.report` summarises the errors. Kinds today:

- ``ttft_bs1`` (the acceptance target): first-token latency of one request at batch 1 = one
  prefill forward of ``query_len`` tokens (TensorRT-LLM v0.9 performance overview,
  ``data/published_points.csv``).
- ``msmodeling_forward`` (reported, not a target): msmodeling's per-forward fidelity
  baselines on Ascend for the models the catalog has (``data/msmodeling_forward_cases.csv``).
- ``serving_ttft`` / ``serving_tpot``: TTFT/TPOT under concurrency
  (``data/measured_agg_serving_cases.csv``), predicted by running the engine.

The report is kind-agnostic (errors grouped per kind and device).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from app.core.errors import UnknownNameError
from app.core.validation.cases import (
    SERVING_TPOT_KIND,
    SERVING_TTFT_KIND,
    TARGET_KIND,
    ValidationCase,
    load_agg_serving_cases,
    load_msmodeling_cases,
    load_published_points,
)
from app.core.validation.predict import Predictor
from app.core.validation.predict import predictors as default_predictors
from app.core.validation.report import CaseResult, ValidationReport, summarise

Loader = Callable[[], list[ValidationCase]]
LOADERS: dict[str, Loader] = {
    TARGET_KIND: load_published_points,
    "msmodeling_forward": load_msmodeling_cases,
    SERVING_TTFT_KIND: lambda: [c for c in load_agg_serving_cases() if c.kind == SERVING_TTFT_KIND],
    SERVING_TPOT_KIND: lambda: [c for c in load_agg_serving_cases() if c.kind == SERVING_TPOT_KIND],
}


def load_cases(
    kinds: Sequence[str], *, drop_layout_duplicates: bool = False
) -> list[ValidationCase]:
    """Every case of ``kinds``; ``drop_layout_duplicates`` leaves out the serving rows that
    repeat a smaller deployment's measurement (:func:`layout_duplicates`)."""
    unknown = sorted(set(kinds) - set(LOADERS))
    if unknown:
        raise UnknownNameError(", ".join(unknown), LOADERS)
    serving = [k for k in kinds if k in (SERVING_TTFT_KIND, SERVING_TPOT_KIND)]
    chosen = [case for kind in kinds if kind not in serving for case in LOADERS[kind]()]
    if serving:
        rows = load_agg_serving_cases(drop_layout_duplicates=drop_layout_duplicates)
        chosen += [case for kind in serving for case in rows if case.kind == kind]
    return chosen


def run_validation(
    cases: Iterable[ValidationCase] | None = None,
    predictors: Mapping[str, Predictor] | None = None,
    kinds: Sequence[str] = (TARGET_KIND,),
    *,
    drop_layout_duplicates: bool = False,
) -> ValidationReport:
    """Predict every case (default: all cases of ``kinds``) and summarise the absolute
    percentage error per kind and device."""
    table = default_predictors() if predictors is None else predictors
    if cases is None:
        chosen = load_cases(kinds, drop_layout_duplicates=drop_layout_duplicates)
    else:
        chosen = list(cases)
    results = tuple(CaseResult(case=c, predicted=table[c.kind](c)) for c in chosen)
    groups: dict[tuple[str, str], list[CaseResult]] = {}
    by_kind: dict[str, list[CaseResult]] = {}
    for result in results:
        group = result.case.group or result.case.device
        groups.setdefault((result.case.kind, group), []).append(result)
        by_kind.setdefault(result.case.kind, []).append(result)
    return ValidationReport(
        results=results,
        groups=tuple(summarise(kind, device, items) for (kind, device), items in groups.items()),
        kinds=tuple(summarise(kind, "overall", items) for kind, items in by_kind.items()),
    )
