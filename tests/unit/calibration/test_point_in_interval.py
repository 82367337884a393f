"""A point estimate is never outside its own 80 % interval: a spread whose errors all lie on one
side is centred on the estimate and widened to their symmetric hull (with a notice), and the SLA
confidence is the share of the interval inside the limits."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from app.core.calibration import Spread, answer_notice, at_risk, estimate_intervals
from app.core.calibration.interval import MAX_WIDTH_RATIO
from app.core.calibration.residuals import lookup, shipped_table
from app.core.catalog.devices import DEVICES
from app.core.profiles import engines_for_vendor

ASCEND = sorted(name for name, d in DEVICES.items() if d.vendor == "huawei")
ENGINES = engines_for_vendor("huawei")
errors = st.floats(min_value=-3.0, max_value=3.0, allow_nan=False)
latency = st.floats(min_value=0.01, max_value=1e6, allow_nan=False)


def _inside(point: float, interval: tuple[float, float]) -> bool:
    low, high = interval
    return low <= point * (1 + 1e-12) and point <= high * (1 + 1e-12)


@given(st.lists(errors, min_size=1, max_size=40), latency)
def test_no_spread_puts_the_point_outside(log_errors: list[float], point: float) -> None:
    spread = Spread.of(log_errors).around_point()
    assert _inside(point, spread.interval(point))
    original = Spread.of(log_errors)
    # Widened, never narrowed: the original interval stays inside.
    low, high = spread.interval(point)
    o_low, o_high = original.interval(point)
    assert low <= o_low * (1 + 1e-12) and o_high <= high * (1 + 1e-12)


@given(
    st.sampled_from(ASCEND),
    st.sampled_from(ENGINES),
    st.booleans(),
    latency,
    latency,
    st.integers(min_value=1, max_value=4096),
)
def test_no_ascend_estimate_is_outside_its_interval(
    device: str, engine: str, is_moe: bool, ttft_ms: float, tpot_ms: float, output_length: int
) -> None:
    group = lookup(shipped_table(), device, engine, is_moe)
    intervals = estimate_intervals(
        ttft_ms=ttft_ms,
        tpot_ms=tpot_ms,
        throughput=1000.0,
        output_length=output_length,
        ttft=group.ttft,
        tpot=group.tpot,
    )
    assert _inside(ttft_ms, intervals.ttft_ms) and _inside(tpot_ms, intervals.tpot_ms)
    assert _inside(1000.0, intervals.throughput)
    assert (intervals.notice is not None) == bool(intervals.centred or intervals.wide)
    assert {m for m, _ in intervals.wide} == {
        name
        for name, (low, high) in (("ttft", intervals.ttft_ms), ("tpot", intervals.tpot_ms))
        if high / low > MAX_WIDTH_RATIO * (1 + 1e-9)
    }
    assert set(intervals.centred) == {
        name for name, s in (("ttft", group.ttft), ("tpot", group.tpot)) if s.excludes_zero
    }


@given(
    st.sampled_from(sorted(name for name, d in DEVICES.items() if d.vendor == "nvidia")),
    st.sampled_from(("vllm", "sglang", "trtllm", "msmodeling")),
    st.one_of(st.none(), st.integers(min_value=1, max_value=4096)),
    latency,
    latency,
)
def test_no_measured_file_estimate_is_outside_its_interval(
    device: str, engine: str, concurrency: int | None, ttft_ms: float, tpot_ms: float
) -> None:
    """The measured file's per-metric chains (device, engine, concurrency band) keep every
    point inside its interval, and a too-wide interval always carries its notice."""
    group = lookup(shipped_table(), device, engine, True, concurrency)
    intervals = estimate_intervals(
        ttft_ms=ttft_ms,
        tpot_ms=tpot_ms,
        throughput=1000.0,
        output_length=128,
        ttft=group.ttft,
        tpot=group.tpot,
    )
    assert _inside(ttft_ms, intervals.ttft_ms) and _inside(tpot_ms, intervals.tpot_ms)
    wide = group.ttft.around_point().width_ratio > MAX_WIDTH_RATIO
    assert wide == ("ttft" in dict(intervals.wide))
    assert not wide or "exceeds the informative range" in (intervals.notice or "")


def test_sla_confidence_is_the_share_inside_the_limits() -> None:
    spread = Spread(low=-math.log(2), high=math.log(2), count=5)  # [p / 2, 2 p]
    intervals = estimate_intervals(
        ttft_ms=100.0, tpot_ms=10.0, throughput=1.0, output_length=10, ttft=spread, tpot=spread
    )
    assert intervals.sla_confidence(ttft_limit_ms=None, tpot_limit_ms=None) is None
    assert intervals.sla_confidence(ttft_limit_ms=100.0, tpot_limit_ms=None) == 0.5
    assert intervals.sla_confidence(ttft_limit_ms=400.0, tpot_limit_ms=20.0) == 1.0
    assert intervals.sla_confidence(ttft_limit_ms=40.0, tpot_limit_ms=20.0) == 0.0
    # The likelier miss decides: TPOT at a quarter of its interval.
    quarter = intervals.sla_confidence(ttft_limit_ms=400.0, tpot_limit_ms=10 / math.sqrt(2))
    assert math.isclose(quarter or 0.0, 0.25)
    assert at_risk(quarter) and not at_risk(0.5) and not at_risk(None)
    assert answer_notice(intervals) is None
    assert "not plainly feasible" in (answer_notice(intervals, ["agg TP8"]) or "")


def test_the_reported_ascend_vllm_tpot_interval_holds_its_point() -> None:
    """The issue's case: TPOT 49.8 ms read 71-118 ms from vLLM-Ascend's residuals, all of
    them above the estimates. With the per-layer host time of vLLM-Ascend's graph modes
    modelled (``EngineProfile.layer_host_ms``), the group's residuals straddle zero: the
    interval holds its point without being centred, and no notice is needed."""
    group = lookup(shipped_table(), "ATLAS_800_A2_376T_64G", "vllm", False)
    assert not group.tpot.excludes_zero
    intervals = estimate_intervals(
        ttft_ms=1549.5,
        tpot_ms=49.8,
        throughput=1.0,
        output_length=1024,
        ttft=group.ttft,
        tpot=group.tpot,
    )
    low, high = intervals.tpot_ms
    assert low < 49.8 < high
    assert math.isclose(high, 49.8 * math.exp(-group.tpot.low), rel_tol=1e-9)
    assert "tpot" not in intervals.centred
