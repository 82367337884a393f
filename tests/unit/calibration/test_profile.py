"""Calibration values: parameters apply within their bounds, spreads give the intervals, and a
profile survives JSON and refuses tampering."""

from __future__ import annotations

import json
import math

import pytest

from app.core.calibration.interval import Spread, estimate_intervals, t90
from app.core.calibration.parameters import (
    GEMM_EFFICIENCY_SCALE,
    MEMORY_EFFICIENCY,
    STEP_HOST_MS,
    apply_to_device,
    apply_to_profile,
    bounds,
    defaults,
    exposed_step_host_ms,
)
from app.core.calibration.profile import CalibrationProfile, FitStats, Range, profile_from_dict
from app.core.calibration.residuals import lookup, shipped_table
from app.core.catalog.devices import get_device
from app.core.errors import InvalidParameterError
from app.core.profiles import get_profile

H100 = get_device("NVIDIA_H100_SXM_80G")


def test_gemm_scale_never_lifts_an_efficiency_above_one() -> None:
    low, high = bounds(GEMM_EFFICIENCY_SCALE, H100)
    assert high * max(H100.gemm_efficiency_16bit, H100.gemm_efficiency_8bit) <= 1.0 + 1e-12
    assert low == 0.25
    device = apply_to_device(H100, {GEMM_EFFICIENCY_SCALE: 5.0})
    assert max(device.gemm_efficiency_8bit, device.gemm_efficiency_16bit) <= 1.0
    assert apply_to_device(H100, {MEMORY_EFFICIENCY: 0.5}).memory_efficiency == 0.5
    assert apply_to_device(H100, {}) is H100


def test_fitted_host_time_is_the_exposed_time() -> None:
    vllm, sglang = get_profile("vllm"), get_profile("sglang")
    assert exposed_step_host_ms(apply_to_profile(vllm, {STEP_HOST_MS: 2.0})) == 2.0
    assert exposed_step_host_ms(apply_to_profile(sglang, {STEP_HOST_MS: 2.0})) == 2.0
    assert defaults(H100, vllm)[STEP_HOST_MS] == exposed_step_host_ms(vllm)


def test_spread_small_samples_widen_with_student_t() -> None:
    errors = [-0.1, 0.0, 0.1]
    spread = Spread.of(errors)
    # A prediction interval: the next error's spread, the mean's uncertainty included.
    assert math.isclose(spread.high, t90(2) * 0.1 * math.sqrt(1 + 1 / 3), rel_tol=1e-9)
    assert math.isclose(spread.low, -spread.high, rel_tol=1e-9)
    many = Spread.of([i / 100 for i in range(-50, 51)])
    assert math.isclose(many.low, -0.4, abs_tol=1e-9) and math.isclose(many.high, 0.4, abs_tol=1e-9)


def test_interval_reads_log_errors_as_predicted_over_measured() -> None:
    """Predictions that run 10 % high: the measurement lies below the prediction."""
    spread = Spread(low=math.log(1.05), high=math.log(1.15), count=30)
    low, high = spread.interval(100.0)
    assert low < high < 100.0
    wide = spread.widened(Spread(low=-0.5, high=0.0, count=5))
    assert wide.low == -0.5 and wide.high == spread.high and wide.count == 5


def test_throughput_interval_moves_against_latency() -> None:
    spread = Spread(low=-0.2, high=0.2, count=30)
    iv = estimate_intervals(
        ttft_ms=100, tpot_ms=10, throughput=1000, output_length=100, ttft=spread, tpot=spread
    )
    assert iv.throughput[0] < 1000 < iv.throughput[1]
    assert iv.ttft_ms[0] < 100 < iv.ttft_ms[1]


def test_shipped_residuals_cover_every_fallback() -> None:
    table = shipped_table()
    assert "overall" in table and {"vllm", "sglang", "trtllm"} <= set(table)
    # An engine the measured file lacks falls back to the overall group; an NVIDIA device to
    # its groups, per metric (TPOT by concurrency band).
    assert lookup(table, "NVIDIA_H100_SXM_80G", "msmodeling", True).group == "overall"
    h100 = lookup(table, "NVIDIA_H100_SXM_80G", "trtllm", False)
    assert h100.group == "NVIDIA_H100_SXM_80G | trtllm"
    banded = lookup(table, "NVIDIA_H100_SXM_80G", "trtllm", False, 64)
    assert banded.group == (
        "NVIDIA_H100_SXM_80G | trtllm (TTFT), NVIDIA_H100_SXM_80G | trtllm | c17-128 (TPOT)"
    )
    assert banded.tpot == table["NVIDIA_H100_SXM_80G | trtllm | c17-128"].tpot
    # An Ascend device takes its vendor's groups only, down to the vendor's own.
    assert lookup(table, "ATLAS_800_A2_376T_64G", "msmodeling", True).group == "huawei"
    assert lookup(table, "ATLAS_800_A2_376T_64G", "vllm", False).group == "huawei | vllm | dense"


def _profile() -> CalibrationProfile:
    vllm = get_profile("vllm")
    return CalibrationProfile(
        device=H100.name,
        engine="vllm",
        model="meta-llama/Llama-3.1-8B-Instruct",
        quantization="DISABLED",
        parameters=((MEMORY_EFFICIENCY, 0.7),),
        defaults=tuple(defaults(H100, vllm).items()),
        fixed=((STEP_HOST_MS, "needs two distinct concurrencies"),),
        isl=Range(low=1024, high=4096),
        osl=Range(low=128, high=1024),
        concurrency=Range(low=4, high=4),
        layouts=("TP1 DP1",),
        fit=FitStats(
            points=3,
            ttft_fit_median_ape_pct=10.0,
            tpot_fit_median_ape_pct=2.0,
            ttft_cv_median_ape_pct=12.0,
            tpot_cv_median_ape_pct=3.0,
            converged=True,
            iterations=3,
            evaluations=6,
            cross_validation="leave-one-out",
        ),
        ttft_spread=Spread(low=-0.2, high=0.1, count=3),
        tpot_spread=Spread(low=-0.05, high=0.05, count=3),
    )


def test_profile_round_trips_through_json_with_a_content_id() -> None:
    profile = _profile()
    again = profile_from_dict(json.loads(json.dumps(profile.to_dict())))
    assert again == profile and again.id == profile.id and again.id.startswith("cal-")
    edited = profile.to_dict()
    edited["parameters"][MEMORY_EFFICIENCY] = 0.71
    assert profile_from_dict(edited).id != profile.id


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("parameters", MEMORY_EFFICIENCY), 7.0, "calibration.parameters.memory_efficiency"),
        (("parameters", "warp_speed"), 1.0, "calibration.parameters.warp_speed"),
        (("ranges", "isl"), [0, 5], "calibration.ranges.isl"),
        (
            ("residuals", "ttft"),
            {"low": 1, "high": 0, "count": 3},
            "calibration.residuals.ttft.low",
        ),
        (("fit", "converged"), "yes", "calibration.fit.converged"),
        (("version",), 2, "calibration.version"),
        (("extra",), 1, "calibration.extra"),
        (("dropped",), ["a"], "calibration.dropped"),
        (("dropped",), {"no room": []}, "calibration.dropped.no room"),
        (("dropped",), {"no room": [3]}, "calibration.dropped.no room"),
        (("dropped",), {"no room": ["x"] * 501}, "calibration.dropped"),
    ],
)
def test_a_malformed_profile_names_its_field(
    path: tuple[str, ...], value: object, field: str
) -> None:
    body = _profile().to_dict()
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(InvalidParameterError) as err:
        profile_from_dict(body)
    assert err.value.field == field


def test_applicability_names_what_differs() -> None:
    profile = _profile()
    base = {
        "device": H100.name,
        "engine": "vllm",
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "quantization": "DISABLED",
        "isl": 2048,
        "osl": 512,
        "concurrency": 8,
    }
    assert profile.applicability(**base) == (True, "")  # type: ignore[arg-type]
    ok, why = profile.applicability(**{**base, "device": "NVIDIA_B200_SXM_180G"})  # type: ignore[arg-type]
    assert not ok and "device" in why
    ok, why = profile.applicability(**{**base, "concurrency": 64})  # type: ignore[arg-type]
    assert not ok and "concurrency 64" in why
