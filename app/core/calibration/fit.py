"""Robust, bounded least squares on log errors: the fit behind a calibration profile.

The model is a black box ``residuals(values, points)`` returning, for the chosen points, the
log errors ``ln(predicted / measured)`` of every measurement of each point (TTFT and TPOT).
The fit minimises ``sum(rho(r)) + prior`` where ``rho`` is the soft-L1 loss (quadratic for
errors below :data:`LOSS_SCALE`, linear beyond, so one odd run cannot drag the parameters) and
the prior is a weak pull towards the catalog values (it only decides directions the points do
not pin). It runs Levenberg-Marquardt in internal coordinates (log of multiplicative
parameters, additive ones in their ``step``), projected onto the bounds after every step, with
a finite-difference Jacobian refreshed by Broyden updates (one model evaluation per accepted
step instead of one per parameter). The fit always returns bounded finite values: a run that
stops on its iteration limit says it did not converge.

Cross-validation (:func:`cross_validate`) refits the linearised problem without each fold and
evaluates the held-out points exactly at the fold's parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from app.core.errors import InvalidParameterError

#: Log error where the soft-L1 loss turns from quadratic to linear (about 10 %).
LOSS_SCALE = 0.1
#: Weight of the pull towards the catalog value, per squared prior width: a deviation of one
#: width costs as much as one measurement at the loss's knee (10 % off), so the points move a
#: parameter only as far as they agree on it. On the held-out protocol (bench/README.md) a
#: weight of 1e-4 / 1e-2 / 1e-1 gave TTFT 26.6 / 25.7 / 27.8 % and TPOT 7.1 / 6.7 / 7.2 %.
PRIOR_WEIGHT = LOSS_SCALE**2
#: Prior width: a factor e for multiplicative parameters, ten steps for additive ones.
PRIOR_WIDTH_LOG = 1.0
PRIOR_WIDTH_STEPS = 10.0
#: Finite-difference step in internal units (5 % for multiplicative parameters).
FD_STEP = 0.05
MAX_ITERATIONS = 12
#: Relative cost decrease below which the fit has converged.
TOLERANCE = 1e-5
#: Largest number of folds of the cross-validation (leave-one-out below it).
MAX_FOLDS = 10

#: ``residuals(values, points)``: the log errors of the listed points' measurements, in order.
Residuals = Callable[[dict[str, float], Sequence[int]], list[float]]


@dataclass(frozen=True, slots=True, kw_only=True)
class FreeParameter:
    """A parameter the fit may move: its start (the catalog value), bounds and scale."""

    name: str
    start: float
    low: float
    high: float
    log_scale: bool
    step: float

    def __post_init__(self) -> None:
        if not (self.low <= self.high) or (self.log_scale and self.low <= 0) or self.step <= 0:
            raise InvalidParameterError(self.name, (self.low, self.high), "valid bounds")

    def to_internal(self, value: float) -> float:
        value = min(max(value, self.low), self.high)
        return math.log(value) if self.log_scale else value / self.step

    def to_value(self, internal: float) -> float:
        value = math.exp(internal) if self.log_scale else internal * self.step
        return min(max(value, self.low), self.high)

    @property
    def internal_bounds(self) -> tuple[float, float]:
        return self.to_internal(self.low), self.to_internal(self.high)

    @property
    def prior_width(self) -> float:
        return PRIOR_WIDTH_LOG if self.log_scale else PRIOR_WIDTH_STEPS


@dataclass(frozen=True, slots=True, kw_only=True)
class FitResult:
    """The fitted values (every free parameter), the residuals at them, and how the fit ran."""

    values: tuple[tuple[str, float], ...]
    residuals: tuple[float, ...]
    cost: float
    converged: bool
    iterations: int
    evaluations: int
    #: Jacobian of the residuals at the fitted values (rows: residuals; internal units).
    jacobian: tuple[tuple[float, ...], ...]

    def value_map(self) -> dict[str, float]:
        return dict(self.values)


def soft_l1(r: float) -> float:
    z = (r / LOSS_SCALE) ** 2
    return 2.0 * LOSS_SCALE**2 * (math.sqrt(1.0 + z) - 1.0)


def _weight(r: float) -> float:
    """IRLS weight of the soft-L1 loss (1 for small errors, ``scale / |r|`` for large)."""
    return 1.0 / math.sqrt(1.0 + (r / LOSS_SCALE) ** 2)


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """``a x = b`` by Gaussian elimination with partial pivoting (a tiny, damped system)."""
    n = len(b)
    m = [[*row[:], b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-300:
            raise ZeroDivisionError("singular system")
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            for c in range(col, n + 1):
                m[r][c] -= f * m[col][c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - sum(m[r][c] * x[c] for c in range(r + 1, n))) / m[r][r]
    return x


class _Problem:
    """The objective over internal coordinates, counting model evaluations."""

    def __init__(
        self,
        residuals: Residuals,
        free: Sequence[FreeParameter],
        points: Sequence[int],
        scales: Sequence[float],
    ) -> None:
        self.residuals = residuals
        self.free = tuple(free)
        self.points = tuple(points)
        self.scales = tuple(scales)
        self.start = [p.to_internal(p.start) for p in self.free]
        self.evaluations = 0

    def values(self, x: Sequence[float]) -> dict[str, float]:
        return {p.name: p.to_value(xi) for p, xi in zip(self.free, x, strict=True)}

    def internal(self, values: Mapping[str, float]) -> list[float]:
        return [p.to_internal(values.get(p.name, p.start)) for p in self.free]

    def project(self, x: Sequence[float]) -> list[float]:
        out = []
        for p, xi in zip(self.free, x, strict=True):
            lo, hi = p.internal_bounds
            out.append(min(max(xi, lo), hi))
        return out

    def evaluate(self, x: Sequence[float]) -> list[float]:
        self.evaluations += 1
        r = self.residuals(self.values(x), self.points)
        return [v if math.isfinite(v) else 1e3 for v in r]

    def prior(self, x: Sequence[float]) -> float:
        return PRIOR_WEIGHT * sum(
            ((xi - si) / p.prior_width) ** 2
            for p, xi, si in zip(self.free, x, self.start, strict=True)
        )

    def cost(self, x: Sequence[float], r: Sequence[float]) -> float:
        return sum(soft_l1(v / s) for v, s in zip(r, self.scales, strict=True)) + self.prior(x)

    def jacobian(self, x: list[float], r: list[float]) -> list[list[float]]:
        """Forward differences, stepping inward at an upper bound."""
        columns: list[list[float]] = []
        for i, p in enumerate(self.free):
            lo, hi = p.internal_bounds
            h = FD_STEP if x[i] + FD_STEP <= hi or x[i] - FD_STEP < lo else -FD_STEP
            moved = x[:]
            moved[i] += h
            r2 = self.evaluate(moved)
            columns.append([(b - a) / h for a, b in zip(r, r2, strict=True)])
        return [list(row) for row in zip(*columns, strict=True)] if columns else [[] for _ in r]

    def normal_equations(
        self,
        x: Sequence[float],
        r: Sequence[float],
        jac: Sequence[Sequence[float]],
        rows: Sequence[int] | None = None,
    ) -> tuple[list[list[float]], list[float]]:
        """``J'WJ + P`` and ``J'Wr + P(x - x0)`` over ``rows`` (all residuals by default)."""
        k = len(self.free)
        a = [[0.0] * k for _ in range(k)]
        g = [0.0] * k
        for j in range(len(r)) if rows is None else rows:
            z = r[j] / self.scales[j]
            w = _weight(z) / self.scales[j] ** 2
            row = jac[j]
            for u in range(k):
                g[u] += w * row[u] * r[j]
                for v in range(k):
                    a[u][v] += w * row[u] * row[v]
        for u, p in enumerate(self.free):
            a[u][u] += PRIOR_WEIGHT / p.prior_width**2
            g[u] += PRIOR_WEIGHT / p.prior_width**2 * (x[u] - self.start[u])
        return a, g


def _damped_step(a: list[list[float]], g: list[float], damping: float) -> list[float]:
    k = len(g)
    damped = [
        [a[u][v] + (damping * (a[u][u] + 1e-12) if u == v else 0.0) for v in range(k)]
        for u in range(k)
    ]
    try:
        return _solve(damped, [-gi for gi in g])
    except ZeroDivisionError:
        return [0.0] * k


def fit(
    residuals: Residuals,
    free: Sequence[FreeParameter],
    points: Sequence[int],
    scales: Sequence[float],
    *,
    max_iterations: int = MAX_ITERATIONS,
    initial: Mapping[str, float] | None = None,
) -> FitResult:
    """Fit ``free`` to the measurements of ``points`` (see the module docstring); ``scales``:
    the expected size of each residual (a residual counts as ``r / scale``, so a kind of
    measurement the model predicts less well weighs less). ``initial``: where the search
    starts (default: each parameter's start, the catalog value the prior pulls towards)."""
    problem = _Problem(residuals, free, points, scales)
    x = problem.project(problem.start if initial is None else problem.internal(initial))
    r = problem.evaluate(x)
    cost = problem.cost(x, r)
    jac = problem.jacobian(x, r)  # no column per residual without a free parameter
    fresh = True  # the Jacobian was differenced at ``x`` (not a Broyden estimate)
    damping = 1e-3
    converged = not free
    iterations = 0
    while not converged and iterations < max_iterations:
        iterations += 1
        a, g = problem.normal_equations(x, r, jac)
        accepted = False
        for _ in range(6):
            step = _damped_step(a, g, damping)
            x_new = problem.project([xi + si for xi, si in zip(x, step, strict=True)])
            moved = [xn - xi for xn, xi in zip(x_new, x, strict=True)]
            if max((abs(m) for m in moved), default=0.0) < 1e-9:
                break
            r_new = problem.evaluate(x_new)
            cost_new = problem.cost(x_new, r_new)
            if cost_new < cost:
                jac = _broyden(jac, moved, r, r_new)
                fresh = False
                improvement = (cost - cost_new) / max(cost, 1e-300)
                x, r, cost = x_new, r_new, cost_new
                damping = max(damping / 3.0, 1e-7)
                accepted = True
                converged = improvement < TOLERANCE
                break
            damping *= 4.0
        if not accepted:
            if fresh:
                converged = True  # no downhill step along the true local slope: the minimum
            else:
                jac, fresh = problem.jacobian(x, r), True  # the estimate went stale: refresh
    return FitResult(
        values=tuple(problem.values(x).items()),
        residuals=tuple(r),
        cost=cost,
        converged=converged,
        iterations=iterations,
        evaluations=problem.evaluations,
        jacobian=tuple(tuple(row) for row in jac),
    )


def cost_at(
    residuals: Residuals,
    free: Sequence[FreeParameter],
    points: Sequence[int],
    scales: Sequence[float],
    values: Mapping[str, float],
) -> float:
    """The fit's objective at ``values`` (one model evaluation)."""
    problem = _Problem(residuals, free, points, scales)
    x = problem.project(problem.internal(values))
    return problem.cost(x, problem.evaluate(x))


def _broyden(
    jac: list[list[float]], dx: Sequence[float], r: Sequence[float], r_new: Sequence[float]
) -> list[list[float]]:
    """Broyden's rank-one update of the Jacobian after the step ``dx``."""
    norm = sum(d * d for d in dx)
    if norm <= 0:
        return jac
    out = []
    for j, row in enumerate(jac):
        predicted = sum(row[u] * dx[u] for u in range(len(dx)))
        err = (r_new[j] - r[j]) - predicted
        out.append([row[u] + err * dx[u] / norm for u in range(len(dx))])
    return out


def folds(count: int) -> list[list[int]]:
    """Leave-one-out up to :data:`MAX_FOLDS` points, else that many interleaved folds."""
    k = min(count, MAX_FOLDS)
    return [list(range(i, count, k)) for i in range(k)]


def cross_validate(
    residuals: Residuals,
    free: Sequence[FreeParameter],
    result: FitResult,
    point_rows: Sequence[Sequence[int]],
    scales: Sequence[float],
) -> list[float]:
    """Held-out log errors of every point, in point order (the rows of ``point_rows[i]``).

    For each fold: one Gauss-Newton step of the linearised problem at the full fit without the
    fold's residuals, then the fold's points evaluated exactly at those parameters. With no
    free parameter the held-out errors are the fit's own."""
    out: list[float] = [0.0] * sum(len(rows) for rows in point_rows)
    problem = _Problem(residuals, free, (), scales)
    values = result.value_map()
    x = [p.to_internal(values[p.name]) for p in problem.free]
    r = list(result.residuals)
    jac = [list(row) for row in result.jacobian]
    offsets = []
    position = 0
    for rows in point_rows:
        offsets.append(position)
        position += len(rows)
    for fold in folds(len(point_rows)):
        if not free:
            held = [r[j] for i in fold for j in point_rows[i]]
        else:
            held_rows = {j for i in fold for j in point_rows[i]}
            kept = [j for j in range(len(r)) if j not in held_rows]
            a, g = problem.normal_equations(x, r, jac, kept)
            step = _damped_step(a, g, 1e-6)
            x_fold = problem.project([xi + si for xi, si in zip(x, step, strict=True)])
            held = residuals(problem.values(x_fold), fold)
        cursor = 0
        for i in fold:
            for n in range(len(point_rows[i])):
                out[offsets[i] + n] = held[cursor]
                cursor += 1
    return out
