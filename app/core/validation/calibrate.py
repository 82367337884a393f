"""Fitting a calibration profile to measurement rows (``chunkwise calibrate FILE.csv``).

The rows have the columns of a measurement file (:data:`~app.core.validation.CASE_COLUMNS`) and
map to deployments exactly as ``validate --cases`` maps them (:func:`row_case`). One fit covers
one device, one engine family, one model and one quantization: points of several are refused
(their parameters differ by construction). Every point is replayed by the closed-loop serving
simulation under its engine profile (:class:`ServingReplay`), with the candidate parameters.

**Which parameters are free.** A fit with ``n`` points frees at most ``n - 1`` parameters (each
point gives a TTFT and a TPOT; one point's worth is kept for the cross-validation), in the
order of :data:`~app.core.calibration.parameters.PARAMETERS`, and only those the points can
tell apart from the others:

- ``memory_efficiency`` and ``gemm_efficiency_scale``: always (every point pins its decode and
  prefill level);
- ``request_frontend_ms``: at least two distinct (input length, concurrency) pairs (a fixed
  cost separates from a per-token one only when the prompt work varies);
- ``step_host_ms``: at least two distinct concurrencies (a per-iteration cost separates from
  bandwidth only when the batch varies);
- ``arrival_spread``: at least two distinct concurrencies, one of them at least 2 (lone
  clients have no wave to split). It moves TTFT in whole requests (no slope to follow), so
  it is chosen from its grid: the other parameters are fitted at the profile's value, the
  objective is evaluated at every other grid value both at those fitted values and at the
  catalog's (the first fit may have bent the others to make up for the lock step), and at
  the lowest one, when it beats the first fit, they are fitted again from the first fit's
  values (:data:`REFIT_ITERATIONS` steps). It is then held fixed in the cross-validation:
  the held-out errors do not charge the choice itself;
- ``attention_efficiency``: sequence lengths (input + output) that vary by at least 2x.

A request naming its free parameters gets exactly those (422 when there are fewer points than
they need). The result states every parameter left at the catalog value and why.

**Points the product cannot place.** A row that maps to a deployment the product cannot run
(its weights or one request's KV do not fit, a layout the runner refuses: ``InfeasibleError``,
``UnsupportedError`` at the catalog values, which no fitted parameter moves) is dropped from the
fit and named in the profile's ``dropped`` (reason -> case ids), instead of refusing the whole
profile; the fit needs :data:`MIN_POINTS` placed points. A row that is bad input (a number, a
model, another deployment) still refuses the file.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from app.core import limits
from app.core.calibration.fit import (
    FitResult,
    FreeParameter,
    Residuals,
    cost_at,
    cross_validate,
    fit,
    folds,
)
from app.core.calibration.interval import Spread
from app.core.calibration.parameters import (
    ARRIVAL_SPREAD,
    ATTENTION_EFFICIENCY,
    PARAMETER_NAMES,
    REQUEST_FRONTEND_MS,
    SPECS,
    STEP_HOST_MS,
    bounds,
    defaults,
)
from app.core.calibration.profile import MAX_TEXT, CalibrationProfile, FitStats, Range
from app.core.calibration.residuals import lookup, shipped_table
from app.core.catalog.devices import get_device
from app.core.catalog.models import get_model
from app.core.errors import (
    ChunkwiseError,
    InfeasibleError,
    InvalidParameterError,
    UnsupportedError,
)
from app.core.parallel import ParallelLayout
from app.core.profiles import get_profile
from app.core.runner.serving import ForwardMemo
from app.core.validation.case_file import _measured, read_case_rows, row_case
from app.core.validation.cases import ValidationCase
from app.core.validation.predict import PRECISIONS, ServingReplay, case_profile, engine_family
from app.core.workload.closed_loop import PlanMemo

#: Fewest points a fit takes (one free parameter and one point to cross-validate it).
MIN_POINTS = 2
#: Most points one fit takes (a replay of each point per model evaluation).
MAX_POINTS = limits.MAX_CALIBRATION_POINTS
#: Iterations of the refit at a grid value other than the profile's (it starts from the first
#: fit: a few steps settle what the new spread moved).
REFIT_ITERATIONS = 4
#: Sequence lengths must vary by this factor to free the attention efficiency.
ATTENTION_SPAN = 2.0
PERCENT = 100.0
#: Narrowest interval width (log units) a residual scale is taken from (a 1 % band).
MIN_SPREAD_WIDTH = 0.01


@dataclass(frozen=True, slots=True, kw_only=True)
class Point:
    """One measured row: its case and both measurements."""

    case: ValidationCase
    ttft_ms: float
    tpot_ms: float


def calibration_points(text: str, *, engine: str | None = None) -> list[Point]:
    """The points of a measurement file (``engine``: the family every row must have)."""
    rows = read_case_rows(text)
    if len(rows) > MAX_POINTS:
        raise InvalidParameterError("rows", len(rows), f"at most {MAX_POINTS} points per fit")
    points: list[Point] = []
    for row in rows:
        try:
            case = row_case(row)
            tpot = _measured(row, "tpot_ms")
            if engine is not None and engine_family(case.engine) != engine:
                raise InvalidParameterError(
                    "engine", row["engine"], f"the engine family {engine!r} of the fit"
                )
            case_profile(case)  # an unknown engine family is refused here
        except ChunkwiseError as err:
            raise _row_error(row["case_id"] or str(len(points) + 1), err) from None
        points.append(Point(case=case, ttft_ms=case.measured, tpot_ms=tpot))
    _single_deployment_family(points)
    return points


def _row_error(case_id: str, err: ChunkwiseError) -> InvalidParameterError:
    """A point that cannot be fitted, named by its case id (the field and range when known)."""
    if isinstance(err, InvalidParameterError):
        return InvalidParameterError(f"rows[{case_id}].{err.field}", err.value, err.allowed)
    return InvalidParameterError(f"rows[{case_id}]", case_id, f"a predictable point ({err})")


def _single_deployment_family(points: Sequence[Point]) -> None:
    for what, key in (
        ("hardware", lambda c: c.device),
        ("engine", lambda c: engine_family(c.engine)),
        ("model", lambda c: c.model),
        ("quantization", lambda c: c.precision),
    ):
        seen = sorted({key(p.case) for p in points})
        if len(seen) > 1:
            raise InvalidParameterError(
                what, ", ".join(seen), f"one {what} per calibration (fit each separately)"
            )


def choose_free(points: Sequence[Point], requested: Sequence[str] | None = None) -> dict[str, str]:
    """Every parameter -> "" when free, else the reason it stays at the catalog value."""
    n = len(points)
    if n < MIN_POINTS:
        raise InvalidParameterError("points", n, f"at least {MIN_POINTS} measured points")
    if requested is not None:
        unknown = [name for name in requested if name not in SPECS]
        if unknown:
            raise InvalidParameterError("free", unknown[0], f"one of {', '.join(PARAMETER_NAMES)}")
        if len(set(requested)) > n - 1:
            raise InvalidParameterError(
                "points",
                n,
                f"at least {len(set(requested)) + 1} for {len(set(requested))} free "
                "parameters (one more than the parameters)",
            )
        return {name: "" if name in requested else "not requested" for name in PARAMETER_NAMES}
    pairs = {(p.case.query_len, p.case.concurrency) for p in points}
    concurrencies = {p.case.concurrency for p in points}
    lengths = [p.case.query_len + p.case.output_len for p in points]
    needs = {
        REQUEST_FRONTEND_MS: (len(pairs) >= 2, "needs two distinct (input length, concurrency)"),
        STEP_HOST_MS: (len(concurrencies) >= 2, "needs two distinct concurrencies"),
        ATTENTION_EFFICIENCY: (
            max(lengths) >= ATTENTION_SPAN * min(lengths),
            f"needs sequence lengths varying by {ATTENTION_SPAN:g}x",
        ),
        ARRIVAL_SPREAD: (
            len(concurrencies) >= 2 and max(concurrencies) >= 2,
            "needs two distinct concurrencies, one of them at least 2",
        ),
    }
    out: dict[str, str] = {}
    budget = n - 1
    for name in PARAMETER_NAMES:
        ok, reason = needs.get(name, (True, ""))
        if not ok:
            out[name] = reason
        elif budget == 0:
            out[name] = f"{n} points free at most {n - 1} parameters"
        else:
            out[name] = ""
            budget -= 1
    return out


def _log_errors(
    replay: ServingReplay,
    points: Sequence[Point],
    which: Sequence[int],
    interrupt: Callable[[], None] | None = None,
) -> list[float]:
    out: list[float] = []
    for i in which:
        if interrupt is not None:
            interrupt()  # the caller's deadline: raises once it passed
        p = points[i]
        ttft, tpot = replay.predict(p.case)
        out.append(math.log(ttft / p.ttft_ms) if ttft > 0 else math.inf)
        out.append(math.log(tpot / p.tpot_ms) if tpot > 0 else math.inf)
    return out


def _median_ape(log_errors: Sequence[float]) -> float:
    return statistics.median(abs(math.expm1(e)) * PERCENT for e in log_errors)


#: What makes a point unplaceable rather than bad input (see the module docstring).
_UNPLACEABLE = (InfeasibleError, UnsupportedError)
#: Dropped points: each reason with the case ids it dropped.
Dropped = tuple[tuple[str, tuple[str, ...]], ...]


def placed_points(
    replay: ServingReplay,
    points: Sequence[Point],
    interrupt: Callable[[], None] | None = None,
) -> tuple[list[Point], Dropped]:
    """The points ``replay`` can predict, and the others by reason (a reason longer than a
    profile holds is cut); a point that fails as bad input refuses the file. ``interrupt``
    (the caller's deadline check) runs before every point's replay."""
    placed: list[Point] = []
    dropped: dict[str, list[str]] = {}
    for p in points:
        if interrupt is not None:
            interrupt()
        try:
            replay.predict(p.case)
        except _UNPLACEABLE as err:
            reason = str(err)
            if len(reason) > MAX_TEXT:
                reason = reason[: MAX_TEXT - 3] + "..."
            dropped.setdefault(reason, []).append(p.case.name)
            continue
        except ChunkwiseError as err:
            raise _row_error(p.case.name, err) from None
        placed.append(p)
    if dropped and len(placed) < MIN_POINTS:
        reason, case_ids = next(iter(dropped.items()))
        raise InvalidParameterError(
            "points",
            len(placed),
            f"at least {MIN_POINTS} points the product can place ({len(points) - len(placed)} "
            f"dropped, e.g. {case_ids[0]}: {reason})",
        )
    return placed, tuple((reason, tuple(ids)) for reason, ids in dropped.items())


def fit_calibration(
    points: Sequence[Point],
    *,
    free: Sequence[str] | None = None,
    interrupt: Callable[[], None] | None = None,
) -> CalibrationProfile:
    """Fit the free parameters to ``points`` (see the module docstring). ``interrupt`` (the
    caller's deadline check) is called before every point's replay and raises
    :class:`~app.core.errors.DeadlineExceededError` once the deadline passed."""
    # Every point must be predictable at all (memory and layout do not depend on the fit);
    # those that are not are dropped with the reason.
    plans: PlanMemo = {}  # the points' plans, shared by every evaluation (they need no latency)
    points, dropped = placed_points(ServingReplay(None, plans), points, interrupt)
    selection = choose_free(points, free)
    first = points[0].case
    device = get_device(first.device)
    profile = get_profile(case_profile(first).name)
    start = defaults(device, profile)
    free_params = [
        FreeParameter(
            name=name,
            start=start[name],
            low=bounds(name, device)[0],
            high=bounds(name, device)[1],
            log_scale=SPECS[name].log_scale,
            step=SPECS[name].step,
        )
        for name in PARAMETER_NAMES
        if selection[name] == "" and not SPECS[name].grid
    ]
    gridded = [name for name in PARAMETER_NAMES if selection[name] == "" and SPECS[name].grid]
    # Device times, shared by evaluations whose efficiencies agree (host times, front-end
    # time and arrival spread move no forward): the grid and half the Jacobian's columns.
    forwards: ForwardMemo = {}

    def residuals_at(chosen: dict[str, float]) -> Residuals:
        def residuals(values: dict[str, float], which: Sequence[int]) -> list[float]:
            replay = ServingReplay({**values, **chosen}, plans, forwards)
            return _log_errors(replay, points, which, interrupt)

        return residuals

    indices = list(range(len(points)))
    scales = _scales(first) * len(points)
    chosen = {name: start[name] for name in gridded}
    result = fit(residuals_at(chosen), free_params, indices, scales)
    evaluations = result.evaluations
    if gridded:
        chosen, result, more = _refit_on_grid(
            residuals_at, free_params, indices, scales, start, chosen, result
        )
        evaluations += more
    held_out = cross_validate(
        residuals_at(chosen), free_params, result, [[2 * i, 2 * i + 1] for i in indices], scales
    )
    fitted_ttft, fitted_tpot = result.residuals[0::2], result.residuals[1::2]
    cv_ttft, cv_tpot = held_out[0::2], held_out[1::2]
    n_folds = len(folds(len(points)))
    return CalibrationProfile(
        device=device.name,
        engine=profile.name,
        model=first.model,
        quantization=PRECISIONS[first.precision].linear.value,
        parameters=(*result.values, *chosen.items()),
        defaults=tuple(start.items()),
        fixed=tuple((name, reason) for name, reason in selection.items() if reason),
        isl=_range(p.case.query_len for p in points),
        osl=_range(p.case.output_len for p in points),
        concurrency=_range(p.case.concurrency for p in points),
        layouts=tuple(
            sorted({ParallelLayout(tp=p.case.tp, dp=p.case.dp, ep=p.case.ep).label for p in points})
        ),
        fit=FitStats(
            points=len(points),
            ttft_fit_median_ape_pct=_median_ape(fitted_ttft),
            tpot_fit_median_ape_pct=_median_ape(fitted_tpot),
            ttft_cv_median_ape_pct=_median_ape(cv_ttft),
            tpot_cv_median_ape_pct=_median_ape(cv_tpot),
            converged=result.converged,
            iterations=result.iterations,
            evaluations=evaluations,
            cross_validation=(
                "leave-one-out" if n_folds == len(points) else f"{n_folds}-fold (interleaved)"
            ),
        ),
        ttft_spread=Spread.of(cv_ttft),
        tpot_spread=Spread.of(cv_tpot),
        dropped=dropped,
    )


def _refit_on_grid(
    residuals_at: Callable[[dict[str, float]], Residuals],
    free: Sequence[FreeParameter],
    indices: Sequence[int],
    scales: Sequence[float],
    start: Mapping[str, float],
    chosen: dict[str, float],
    result: FitResult,
) -> tuple[dict[str, float], FitResult, int]:
    """The gridded parameters' best values and the fit at them, from the fit ``result`` at
    ``chosen`` (see the module docstring), and the model evaluations it took."""
    fitted = result.value_map()
    best: tuple[float, dict[str, float]] | None = None
    evaluations = 0
    for choice in _grid_choices(list(chosen)):
        if choice == chosen:
            continue
        # At the first fit's values and at the catalog's: the first fit may have bent the
        # others to make up for the lock step.
        evaluations += 2
        cost = min(
            cost_at(residuals_at(choice), free, indices, scales, at) for at in (fitted, start)
        )
        if best is None or cost < best[0]:
            best = (cost, choice)
    if best is None or best[0] >= result.cost:
        return chosen, result, evaluations
    refit = fit(
        residuals_at(best[1]),
        free,
        indices,
        scales,
        initial=fitted,
        max_iterations=REFIT_ITERATIONS,
    )
    return best[1], refit, evaluations + refit.evaluations


def _grid_choices(names: Sequence[str]) -> list[dict[str, float]]:
    """Every combination of the gridded parameters' values (one empty choice without any)."""
    choices: list[dict[str, float]] = [{}]
    for name in names:
        choices = [{**c, name: value} for c in choices for value in SPECS[name].grid]
    return choices


def _scales(case: ValidationCase) -> list[float]:
    """How much less well the product predicts TTFT than TPOT for this kind of deployment (the
    ratio of their uncalibrated 80 % interval widths, :mod:`app.core.calibration.residuals`):
    TTFT residuals count divided by it, so a structural TTFT error the parameters cannot
    remove does not pull the decode parameters off the TPOT measurements."""
    group = lookup(
        shipped_table(),
        case.device,
        case_profile(case).name,
        get_model(case.model).is_moe,
        case.concurrency,
    )
    tpot = max(group.tpot.high - group.tpot.low, MIN_SPREAD_WIDTH)
    ttft = max(group.ttft.high - group.ttft.low, MIN_SPREAD_WIDTH)
    return [max(1.0, ttft / tpot), 1.0]


def _range(values: Iterable[int]) -> Range:
    items = list(values)
    return Range(low=min(items), high=max(items))


def calibrate_case_file(
    text: str,
    *,
    engine: str | None = None,
    free: Sequence[str] | None = None,
    interrupt: Callable[[], None] | None = None,
) -> CalibrationProfile:
    """``chunkwise calibrate FILE.csv``: the profile fitted to every row of a file
    (``interrupt``: the caller's deadline check, see :func:`fit_calibration`)."""
    points = calibration_points(text, engine=engine)
    return fit_calibration(points, free=free, interrupt=interrupt)
