"""The disaggregated search: worker layouts, worker counts and concurrency under a budget."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.errors import InvalidParameterError
from app.core.optimizer.agg import limit_reason
from app.core.optimizer.disagg_search import (
    CONCURRENCY_TOLERANCE,
    DisaggSearchResult,
    DisaggSearchSettings,
    PoolOption,
    optimize_disagg,
)
from app.core.parallel import ParallelLayout
from app.core.spec import WorkloadSpec
from app.core.workload.disagg_serving import (
    DisaggServingResult,
    KvTransfer,
    simulate_disagg_serving,
)
from app.core.workload.disagg_setup import PoolWorker, disagg_pools
from tests.unit.engine.fakes import LinearLatency

ISL, OSL = 1024, 64


def option(tp: int, dp: int = 1, *, kv_requests: int = 64) -> PoolOption:
    """A worker of ``tp`` x ``dp`` devices whose forwards speed up with ``tp``."""
    latency = LinearLatency(base_ms=2.0 + tp, per_token_ms=0.02 / tp, per_context_ms=2e-5 / tp)
    layout = ParallelLayout(tp=tp, dp=dp)
    worker = PoolWorker(
        workers=1,
        ranks=dp,
        coupled=False,
        latency=latency,
        kv_requests=kv_requests * tp,
        label=layout.label,
    )
    return PoolOption(layout=layout, worker=worker)


def transfer(layout: ParallelLayout, decode: ParallelLayout, devices: int) -> KvTransfer:
    """NVLink-like inside 8 devices, a NIC beyond (a larger deployment transfers slower)."""
    bandwidth = 300e9 if devices <= 8 else 35e9
    return KvTransfer(
        bytes_per_request=ISL * 70e3 / layout.tp, bandwidth_bytes_per_s=bandwidth, fixed_ms=1.0
    )


def spec(ttft_ms: float | None = 400.0, tpot_ms: float | None = 12.0) -> WorkloadSpec:
    return WorkloadSpec(
        input_length=ISL,
        output_length=OSL,
        max_batched_tokens=4096,
        ttft_limit_ms=ttft_ms,
        tpot_limit_ms=tpot_ms,
    )


OPTIONS = (option(1), option(2), option(1, 2))


def search(
    data: WorkloadSpec | None = None,
    prefill: tuple[PoolOption, ...] = OPTIONS,
    decode: tuple[PoolOption, ...] = OPTIONS,
    *,
    num_devices: int = 16,
    max_workers: int = 6,
    requests_per_client: int = 3,
) -> DisaggSearchResult:
    return optimize_disagg(
        data or spec(),
        prefill,
        decode,
        DisaggSearchSettings(
            num_devices=num_devices,
            transfer=transfer,
            max_workers=max_workers,
            requests_per_client=requests_per_client,
        ),
    )


def simulate(
    data: WorkloadSpec,
    p: PoolOption,
    d: PoolOption,
    n_p: int,
    n_d: int,
    c: int,
    devices: int | None = None,
) -> DisaggServingResult:
    """One closed loop (3 requests per client), its transfer over the tier of ``devices``
    (default: its own)."""
    prefill, decode = disagg_pools(
        replace(p.worker, workers=n_p),
        replace(d.worker, workers=n_d),
        input_length=ISL,
        output_length=OSL,
        running_cap=None,
    )
    devices = devices or n_p * p.layout.num_devices + n_d * d.layout.num_devices
    return simulate_disagg_serving(
        data, c, prefill, decode, transfer(p.layout, d.layout, devices), num_requests=3 * c
    )


def test_every_row_is_within_the_budget_and_the_limits_and_best_leads_the_ranking() -> None:
    data = spec()
    result = search(data)
    assert result.rows, result.reason
    assert result.best is result.rows[0]
    per_device = [row.throughput_per_device for row in result.rows]
    assert per_device == sorted(per_device, reverse=True)
    for row in result.rows:
        config = row.config
        assert config.num_devices <= 16
        assert 1 <= config.prefill_workers <= 6 and 1 <= config.decode_workers <= 6
        assert limit_reason(data, row.result.ttft_ms, row.result.tpot_ms) is None
        assert row.concurrency % row.copies == 0
    for probe in result.probes:
        assert probe.config.num_devices <= 16
        assert probe.feasible == (
            limit_reason(data, probe.result.ttft_ms, probe.result.tpot_ms) is None
        )


def test_best_is_the_highest_throughput_per_device_of_every_feasible_probe() -> None:
    result = search()
    assert result.best is not None
    feasible = [p.throughput_per_device for p in result.probes if p.feasible]
    assert result.best.throughput_per_device == pytest.approx(max(feasible))


def test_a_configuration_is_feasible_below_and_infeasible_above_its_boundary() -> None:
    """Monotone in concurrency: on every searched configuration, each feasible probe has fewer
    clients than each infeasible one, and the row's clients are the most feasible ones."""
    result = search()
    by_config: dict[object, list[tuple[int, bool]]] = {}
    for probe in result.probes:
        by_config.setdefault(probe.config, []).append((probe.concurrency, probe.feasible))
    for points in by_config.values():
        ok = [c for c, feasible in points if feasible]
        over = [c for c, feasible in points if not feasible]
        if ok and over:
            assert max(ok) < min(over)
    for row in result.rows:
        ok = [c for c, f in by_config[row.config] if f]
        assert row.concurrency == max(ok)


def test_the_search_finds_what_an_exhaustive_walk_finds_at_a_fraction_of_the_cost() -> None:
    """Every (layouts, counts) pair of a small grid, each at its exact highest feasible
    concurrency (bisection over every client count): the search's best is as good, up to
    its concurrency tolerance, and it simulates far fewer configurations."""
    data = spec()
    options = (option(1), option(2))
    best = 0.0
    simulations = 0
    for p in options:
        for d in options:
            for n_p in range(1, 5):
                for n_d in range(1, 5):
                    devices = n_p * p.layout.num_devices + n_d * d.layout.num_devices
                    if devices > 16:
                        continue
                    lo, hi = 0, 4 * 64 * 4 + 1
                    while hi - lo > 1:
                        mid = (lo + hi) // 2
                        r = simulate(data, p, d, n_p, n_d, mid)
                        simulations += 1
                        if limit_reason(data, r.ttft_ms, r.tpot_ms) is None:
                            lo = mid
                            best = max(best, r.throughput_tokens_s / devices)
                        else:
                            hi = mid
    result = search(data, options, options, max_workers=4)
    assert result.best is not None
    assert result.best.throughput_per_device >= best * (1 - 2 * CONCURRENCY_TOLERANCE)
    assert len(result.probes) * 5 < simulations
    assert result.evaluated < result.configurations


def test_a_fixed_worker_size_is_honoured() -> None:
    """Given only 2-device prefill workers and 1-device decode workers (the service's
    prefill_/decode_devices_per_instance), every configuration uses exactly those."""
    result = search(prefill=(option(2), option(1, 2)), decode=(option(1),))
    assert result.rows
    for probe in result.probes:
        assert probe.config.prefill.num_devices == 2
        assert probe.config.decode.num_devices == 1


@settings(max_examples=8, deadline=None)
@given(
    num_devices=st.integers(2, 24),
    max_workers=st.integers(1, 8),
    ttft_ms=st.sampled_from([None, 150.0, 400.0]),
    tpot_ms=st.sampled_from([None, 8.0, 12.0]),
)
def test_rows_fit_any_budget_and_worker_cap(
    num_devices: int, max_workers: int, ttft_ms: float | None, tpot_ms: float | None
) -> None:
    data = spec(ttft_ms, tpot_ms)
    result = search(data, num_devices=num_devices, max_workers=max_workers)
    for row in result.rows:
        assert row.config.num_devices <= num_devices
        assert max(row.config.prefill_workers, row.config.decode_workers) <= max_workers
        assert limit_reason(data, row.result.ttft_ms, row.result.tpot_ms) is None
    assert (result.best is None) == (result.reason is not None)


def test_the_search_is_deterministic() -> None:
    first, second = search(), search()
    assert [(r.config, r.concurrency) for r in first.rows] == [
        (r.config, r.concurrency) for r in second.rows
    ]
    assert first.probes == second.probes or [p.concurrency for p in first.probes] == [
        p.concurrency for p in second.probes
    ]


def test_copies_scale_clients_and_throughput_but_not_latency() -> None:
    """A deployment of k equal parts is simulated as one part: its row has k times the
    part's clients and throughput at the part's TTFT and TPOT."""
    result = search(prefill=(option(1),), decode=(option(1),), num_devices=16, max_workers=8)
    assert result.best is not None
    row = result.best
    part = simulate(
        spec(),
        option(1),
        option(1),
        row.config.prefill_workers // row.copies,
        row.config.decode_workers // row.copies,
        row.concurrency // row.copies,
        row.config.num_devices,
    )
    assert row.copies > 1
    assert row.result.ttft_ms == pytest.approx(part.ttft_ms)
    assert row.throughput_tokens_s == pytest.approx(part.throughput_tokens_s * row.copies)


def test_a_limit_no_single_request_meets_names_it() -> None:
    result = search(spec(ttft_ms=1.0))
    assert result.best is None and not result.rows
    assert result.reason is not None and "prefill" in result.reason
    assert all("ttft_limit" in why for pool, _, why in result.infeasible if pool == "prefill")
    tpot = search(spec(tpot_ms=0.5))
    assert tpot.best is None and tpot.reason is not None and "decode" in tpot.reason
    assert not tpot.probes  # refused per layout, nothing simulated


def test_a_worker_without_room_for_one_request_is_a_memory_refusal() -> None:
    full = option(1, kv_requests=0)
    result = search(prefill=(full, option(2)), decode=(full,))
    assert result.best is None
    assert ("prefill", "TP1 DP1", result.infeasible[0][2]) == result.infeasible[0]
    assert result.infeasible[0][2].startswith("memory:")
    assert result.reason is not None and result.reason.startswith("no feasible decode")


def test_no_pair_within_the_budget_says_so() -> None:
    result = search(prefill=(option(2),), decode=(option(2),), num_devices=3)
    assert result.best is None and result.configurations == 0
    assert result.reason is not None and "num_devices" in result.reason


def test_cost_follows_decisions_not_the_grid() -> None:
    """Eight names for the same worker multiply the grid by 64, not the simulations."""
    one = (option(1, 2),)
    base = search(prefill=one, decode=one, max_workers=4)
    many = one * 8
    wide = search(prefill=many, decode=many, max_workers=4)
    assert wide.configurations >= 64 * base.configurations // 4
    assert len(wide.probes) <= 3 * max(len(base.probes), 1)


def test_settings_and_options_are_checked() -> None:
    with pytest.raises(InvalidParameterError, match="max_workers"):
        DisaggSearchSettings(num_devices=8, transfer=transfer, max_workers=0)
    with pytest.raises(InvalidParameterError, match="decode_options"):
        optimize_disagg(spec(), OPTIONS, (), DisaggSearchSettings(num_devices=8, transfer=transfer))
    assert math.isfinite(CONCURRENCY_TOLERANCE)
