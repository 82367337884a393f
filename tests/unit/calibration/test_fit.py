"""The robust bounded fit: it recovers known parameters, never leaves its bounds, and says when
it did not converge."""

from __future__ import annotations

import math
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.calibration.fit import FreeParameter, cross_validate, fit, folds, soft_l1

SIZES = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]


def _model(eff: float, fixed_ms: float, size: float) -> tuple[float, float]:
    """A toy latency model: a bandwidth-bound term and a fixed cost (TTFT), a pure
    bandwidth term (TPOT)."""
    return size / eff + fixed_ms, 0.5 * size / eff


def _residuals(truth: tuple[float, float], noise: Sequence[float] = ()):  # type: ignore[no-untyped-def]
    measured = [_model(*truth, s) for s in SIZES]

    def residuals(values: dict[str, float], which: Sequence[int]) -> list[float]:
        out = []
        for i in which:
            ttft, tpot = _model(values.get("eff", 0.5), values.get("fixed", 0.0), SIZES[i])
            bump = noise[i] if i < len(noise) else 0.0
            out += [math.log(ttft / measured[i][0]) + bump, math.log(tpot / measured[i][1])]
        return out

    return residuals


FREE = [
    FreeParameter(name="eff", start=0.5, low=0.1, high=1.0, log_scale=True, step=1.0),
    FreeParameter(name="fixed", start=0.0, low=0.0, high=100.0, log_scale=False, step=1.0),
]
POINTS = list(range(len(SIZES)))
SCALES = [1.0, 1.0] * len(SIZES)


def test_recovers_known_parameters() -> None:
    result = fit(_residuals((0.8, 3.0)), FREE, POINTS, SCALES)
    values = result.value_map()
    assert math.isclose(values["eff"], 0.8, rel_tol=0.02)
    assert math.isclose(values["fixed"], 3.0, abs_tol=0.2)
    assert result.converged
    assert max(abs(r) for r in result.residuals) < 0.01


def test_one_outlier_does_not_drag_the_fit() -> None:
    """The soft-L1 loss: one measurement 3x off moves the parameters far less than least
    squares would."""
    result = fit(_residuals((0.8, 3.0), noise=[0, 0, 0, 1.1, 0, 0]), FREE, POINTS, SCALES)
    assert math.isclose(result.value_map()["eff"], 0.8, rel_tol=0.1)


@settings(max_examples=25, deadline=None)
@given(eff=st.floats(0.01, 3.0), fixed=st.floats(0.0, 500.0))
def test_values_stay_inside_the_bounds(eff: float, fixed: float) -> None:
    result = fit(_residuals((eff, fixed)), FREE, POINTS, SCALES)
    values = result.value_map()
    assert 0.1 <= values["eff"] <= 1.0
    assert 0.0 <= values["fixed"] <= 100.0
    assert all(math.isfinite(r) for r in result.residuals)


def test_iteration_limit_says_not_converged() -> None:
    result = fit(_residuals((0.2, 50.0)), FREE, POINTS, SCALES, max_iterations=1)
    assert not result.converged
    assert result.iterations == 1


def test_no_free_parameter_is_converged_with_the_catalog_errors() -> None:
    result = fit(_residuals((0.8, 3.0)), [], POINTS, SCALES)
    assert result.converged and result.values == ()
    assert result.residuals[1] == math.log(0.8 / 0.5)


def test_cross_validation_of_an_exact_model_is_exact() -> None:
    residuals = _residuals((0.8, 3.0))
    result = fit(residuals, FREE, POINTS, SCALES)
    held = cross_validate(residuals, FREE, result, [[2 * i, 2 * i + 1] for i in POINTS], SCALES)
    assert len(held) == 2 * len(SIZES)
    assert max(abs(r) for r in held) < 0.02


def test_folds_are_leave_one_out_then_interleaved() -> None:
    assert folds(3) == [[0], [1], [2]]
    parts = folds(25)
    assert len(parts) == 10 and sorted(i for p in parts for i in p) == list(range(25))


def test_soft_l1_is_quadratic_then_linear() -> None:
    assert math.isclose(soft_l1(0.001), 0.001**2, rel_tol=1e-3)
    assert soft_l1(2.0) < 2.0**2 / 5
