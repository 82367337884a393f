"""The residual table behind uncalibrated intervals: the measured file's groups, and the
groups of a vendor it does not cover (its own published results only, a deployment once)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.calibration.interval import Spread
from app.core.calibration.residuals import (
    Residual,
    build_table,
    concurrency_band,
    device_vendor,
    group_keys,
    lookup,
    metric_keys,
    parse_table,
)
from app.core.errors import InvalidParameterError

H100, A2, A3 = "NVIDIA_H100_SXM_80G", "ATLAS_800_A2_313T_64G", "ATLAS_800_A3_752T_128G_DIE"

errors = st.floats(-2.0, 2.0, allow_nan=False)


def _nvidia(ttft: float, tpot: float, engine: str = "vllm", is_moe: bool = False) -> Residual:
    return Residual(
        device=H100, engine=engine, is_moe=is_moe, ttft_log_error=ttft, tpot_log_error=tpot
    )


def _ascend(
    source: str, ttft: float, tpot: float, *, device: str = A2, engine: str = "vllm"
) -> Residual:
    return Residual(
        device=device,
        engine=engine,
        is_moe=False,
        ttft_log_error=ttft,
        tpot_log_error=tpot,
        vendor=device_vendor(device),
        source=source,
    )


def test_vendors_come_from_the_catalog() -> None:
    assert (device_vendor(A2), device_vendor(H100), device_vendor("no such device")) == (
        "huawei",
        "nvidia",
        "",
    )
    assert group_keys(A2, "vllm", False, "huawei") == (
        f"{A2} | vllm | dense",
        "huawei | vllm | dense",
        "huawei | vllm",
        "huawei",
    )


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.tuples(errors, errors), min_size=20, max_size=40),
    st.lists(st.tuples(errors, errors), min_size=3, max_size=6),
)
def test_another_vendors_results_leave_the_measured_groups_as_they_were(
    nvidia: list[tuple[float, float]], ascend: list[tuple[float, float]]
) -> None:
    rows = [_nvidia(a, b) for a, b in nvidia]
    alone = build_table(rows)["groups"]
    both = build_table(rows + [_ascend(f"d{i}", a, b) for i, (a, b) in enumerate(ascend)])
    assert {k: v for k, v in both["groups"].items() if not k.startswith(("huawei", A2))} == alone


def test_a_deployment_counts_once_and_a_sparse_group_takes_the_next_ones_spread() -> None:
    rows = [
        # One deployment swept over ten loads: its mean (-0.8) is one error, not ten.
        *(_ascend("sweep", math.nan, -0.8 + 0.001 * i) for i in range(10)),
        _ascend("b", -1.0, -0.5),
        _ascend("c", -2.0, -0.6),
        _ascend("d", 0.1, -0.4, device=A3),
    ]
    table = parse_table(build_table(rows))
    tpot = Spread.of([-0.7955, -0.5, -0.6])  # the sweep's mean, b, c
    assert table[f"{A2} | vllm | dense"].tpot == tpot
    # Its TTFT: two A2 deployments are too few; the vendor's engine group has three.
    vendor_ttft = Spread.of([-1.0, -2.0, 0.1])
    assert table[f"{A2} | vllm | dense"].ttft == vendor_ttft == table["huawei"].ttft
    # The A3 device has one deployment: both metrics from the vendor's groups.
    assert table[f"{A3} | vllm | dense"].tpot == Spread.of([-0.7955, -0.5, -0.6, -0.4])


def test_an_ascend_estimate_never_borrows_nvidia_residuals() -> None:
    rows = [_nvidia(0.05 * (i % 3), 0.01 * (i % 4)) for i in range(30)]
    rows += [_ascend(s, -1.5, -0.7) for s in ("a", "b")] + [_ascend("c", -1.0, -0.8)]
    table = parse_table(build_table(rows))
    assert lookup(table, A2, "vllm", False).group == f"{A2} | vllm | dense"
    # Another engine or device of the vendor: the vendor's group, not the NVIDIA "sglang".
    assert lookup(table, A3, "sglang", True).group == "huawei"
    assert lookup(table, H100, "vllm", False).group == f"{H100} | vllm"
    # Without any result of the vendor, the measured file's chain as before.
    plain = parse_table(build_table(rows[:30]))
    assert lookup(plain, A2, "vllm", False).group == "vllm"


def test_a_vendor_with_too_few_deployments_is_refused() -> None:
    with pytest.raises(InvalidParameterError, match="at least 3 deployments"):
        build_table([_ascend("a", -1.0, -0.5), _ascend("b", -1.0, -0.5)])


def test_every_deployment_of_the_measured_file_weighs_the_same_in_a_group() -> None:
    """A 40-row sweep at +1.0 beside twenty one-row deployments at 0: unweighted, the sweep
    would set both percentiles (40 of 60 rows); weighted by deployment it is one of 21, so the
    10th percentile is 0 and only the top tail reaches towards +1."""
    sweep = [
        Residual(
            device=H100,
            engine="vllm",
            is_moe=False,
            ttft_log_error=1.0,
            tpot_log_error=1.0,
            source="sweep",
        )
    ] * 40
    singles = [
        Residual(
            device=H100,
            engine="vllm",
            is_moe=False,
            ttft_log_error=0.0,
            tpot_log_error=0.0,
            source=f"d{i}",
        )
        for i in range(20)
    ]
    spread = parse_table(build_table(sweep + singles))[f"{H100} | vllm"].ttft
    assert spread.low == 0.0 and 0.0 <= spread.high < 1.0 and spread.count == 60


@given(st.lists(errors, min_size=20, max_size=60))
def test_equal_weights_give_percentiles_within_the_errors(values: list[float]) -> None:
    spread = Spread.of_weighted([(v, 1.0) for v in values])
    assert min(values) <= spread.low <= spread.high <= max(values)
    ordered = sorted(values)
    # the 10th percentile lies between the errors around it
    below = sum(v < spread.low for v in ordered) / len(ordered)
    assert below <= 0.1 + 1 / len(ordered)


def test_weights_must_be_positive() -> None:
    with pytest.raises(InvalidParameterError):
        Spread.of_weighted([(0.1, 1.0)] * 19 + [(0.2, 0.0)])


def test_concurrency_bands_split_at_2_16_128() -> None:
    assert [concurrency_band(c) for c in (1, 2, 3, 16, 17, 128, 129, 4096)] == [
        "c<=2",
        "c<=2",
        "c3-16",
        "c3-16",
        "c17-128",
        "c17-128",
        "c>128",
        "c>128",
    ]
    assert metric_keys("ttft", H100, "vllm", 64) == (f"{H100} | vllm", "vllm", "overall")
    assert metric_keys("tpot", H100, "vllm", 64) == (
        f"{H100} | vllm | c17-128",
        "vllm | c17-128",
        "vllm",
        "overall",
    )
    assert metric_keys("tpot", H100, "vllm", None) == metric_keys("ttft", H100, "vllm", 1)


def _deployment(source: str, error: float, concurrency: int, rows: int = 10) -> list[Residual]:
    return [
        Residual(
            device=H100,
            engine="vllm",
            is_moe=False,
            ttft_log_error=error,
            tpot_log_error=error,
            source=source,
            concurrency=concurrency,
        )
    ] * rows


def test_a_group_needs_three_deployments_and_tpot_takes_its_band() -> None:
    """Two 10-row deployments at 4 clients make 20 rows but only two deployments: their band
    is not a group, and TPOT falls back to the engine's; three deployments at 64 clients make
    theirs one. TTFT never takes a band."""
    rows = _deployment("a", 0.1, 4) + _deployment("b", 0.2, 4)
    rows += [r for s in ("c", "d", "e") for r in _deployment(s, -0.5, 64)]
    table = parse_table(build_table(rows))
    assert f"{H100} | vllm | c3-16" not in table and "vllm | c3-16" not in table
    assert f"{H100} | vllm | c17-128" in table
    assert lookup(table, H100, "vllm", False, 4).tpot == table[f"{H100} | vllm"].tpot
    hot = lookup(table, H100, "vllm", False, 64)
    assert hot.tpot.high == -0.5 and hot.ttft == table[f"{H100} | vllm"].ttft
