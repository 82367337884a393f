"""Optimizers: layouts, the concurrency search, agg / disagg / PD-ratio with fake latencies."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.cost import ServingModel
from app.core.errors import InvalidParameterError
from app.core.optimizer import (
    Deployment,
    Probe,
    decode_qps,
    enumerate_layouts,
    limit_margin,
    optimize_agg,
    optimize_disagg_decode,
    optimize_disagg_prefill,
    optimize_pd_ratio,
    prefill_chunk_waves,
    prefill_qps,
    search_batch_sizes,
    split_instances,
)
from app.core.parallel import ParallelLayout
from app.core.spec import WorkloadSpec
from tests.unit.engine.fakes import ConstantLatency, LinearLatency

DEPLOYMENT = Deployment(model="fake-model", device="FAKE_DEVICE", quantization="bf16")


def serving_for(layout: ParallelLayout) -> ServingModel:
    """TP splits the work; memory grows with TP (weights split) and shrinks with context."""
    return LinearLatency(
        base_ms=2.0,
        per_token_ms=0.02 / layout.tp,
        per_context_ms=0.0002 / layout.tp,
        memory_gb_per_token=1e-4 / layout.tp,
        memory_gb=30.0 + 2 * layout.tp,
    )


def test_enumerate_layouts() -> None:
    assert [x.label for x in enumerate_layouts(8)] == ["TP1 DP8", "TP2 DP4", "TP4 DP2", "TP8 DP1"]
    assert [x.label for x in enumerate_layouts(6)] == ["TP1 DP6", "TP2 DP3"]
    assert [x.label for x in enumerate_layouts(8, [2, 8], [1, 8])] == [
        "TP2 DP4",
        "TP2 DP4 EP8",
        "TP8 DP1",
        "TP8 DP1 EP8",
    ]
    with pytest.raises(InvalidParameterError, match="tp_sizes"):
        enumerate_layouts(8, [3])
    with pytest.raises(InvalidParameterError, match="ep_sizes"):
        enumerate_layouts(8, [8], [16])
    with pytest.raises(InvalidParameterError, match="num_devices"):
        enumerate_layouts(0)


def _probe(batch_size: int, feasible: bool) -> Probe:
    return Probe(
        layout=ParallelLayout(),
        batch_size=batch_size,
        concurrency=batch_size,
        feasible=feasible,
        reason=None if feasible else "limit",
        ttft_ms=1.0,
        tpot_ms=1.0,
        throughput_tokens_s=float(batch_size),
        request_throughput=1.0,
        memory_left_gb=1.0,
        method="fake",
    )


@given(boundary=st.integers(0, 5000), cap=st.integers(1, 4096))
def test_search_finds_the_boundary_with_few_probes(boundary: int, cap: int) -> None:
    probes = search_batch_sizes(lambda b: _probe(b, b <= boundary), cap)
    feasible = [p.batch_size for p in probes if p.feasible]
    assert max(feasible, default=0) == min(boundary, cap)
    assert len({p.batch_size for p in probes}) == len(probes)  # memoised: each size once
    assert len(probes) <= 2 * cap.bit_length() + 2


def _tpot_probe(batch_size: int, tpot_ms: float | None, limit_ms: float) -> Probe:
    feasible = tpot_ms is not None and tpot_ms <= limit_ms
    return dataclasses.replace(_probe(batch_size, feasible), tpot_ms=tpot_ms)


@given(
    boundary=st.integers(1, 5000),
    cap=st.integers(1, 4096),
    power=st.floats(0.2, 4.0),
    refused_above=st.none() | st.integers(1, 5000),
)
def test_interpolating_search_finds_the_same_boundary(
    boundary: int, cap: int, power: float, refused_above: int | None
) -> None:
    """With a margin, the search lands on bisection's boundary for any increasing metric (TPOT
    ~ batch ** power crossing the limit just after ``boundary``), memoised, within three probes
    per halving; probes without a figure (refused for memory above
    ``refused_above``) fall back to bisection."""
    limit_ms = 10.0

    def evaluate(batch_size: int) -> Probe:
        if refused_above is not None and batch_size > refused_above:
            return _tpot_probe(batch_size, None, limit_ms)
        tpot_ms = limit_ms * (batch_size / (boundary + 0.5)) ** power
        return _tpot_probe(batch_size, tpot_ms, limit_ms)

    margin = limit_margin(
        WorkloadSpec(input_length=8, output_length=8, max_batched_tokens=8, tpot_limit_ms=limit_ms)
    )
    probes = search_batch_sizes(evaluate, cap, margin)
    bisected = search_batch_sizes(evaluate, cap)
    best = max((p.batch_size for p in probes if p.feasible), default=0)
    assert best == max((p.batch_size for p in bisected if p.feasible), default=0)
    expected = min(boundary, cap, refused_above if refused_above is not None else cap)
    assert best == expected
    assert len({p.batch_size for p in probes}) == len(probes)
    assert len(probes) <= 4 * cap.bit_length() + 2  # doubling, then <= 3 per halving


def test_interpolation_closes_a_linear_bracket_in_two_probes() -> None:
    """TPOT linear in the batch: after the doubling (1 .. 512), two probes find 470."""
    margin = limit_margin(
        WorkloadSpec(input_length=8, output_length=8, max_batched_tokens=8, tpot_limit_ms=47.05)
    )
    probes = search_batch_sizes(lambda b: _tpot_probe(b, b / 10.0, 47.05), 4096, margin)
    assert [p.batch_size for p in probes] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 470, 471]


def test_agg_optimizer_ranks_layouts_and_respects_limits() -> None:
    data = WorkloadSpec(
        input_length=4096,
        output_length=256,
        max_batched_tokens=2048,
        tpot_limit_ms=40.0,
        ttft_limit_ms=20_000.0,
        num_devices=4,
    )
    result = optimize_agg(data, enumerate_layouts(4), serving_for, DEPLOYMENT)
    assert result.rows and result.best is result.rows[0]
    throughputs = [r.throughput_tokens_s for r in result.rows]
    assert throughputs == sorted(throughputs, reverse=True)
    for row in result.rows:
        assert row.effective_input_length == 4096
        assert row.prefill_num_chunks == 2
        assert row.max_batched_tokens == 2048
        assert row.method == "time_simulation"
        assert row.concurrency == row.batch_size * row.dp
        assert row.tpot_ms is not None and row.tpot_ms <= 40.0
        assert row.ttft_ms is not None and row.ttft_ms <= 20_000.0
        assert row.throughput_per_device == pytest.approx(row.throughput_tokens_s / 4)
        assert row.memory_left_gb >= 0
    feasible = [p for p in result.probes if p.feasible]
    assert feasible and all(p.tpot_ms is not None and p.tpot_ms <= 40.0 for p in feasible)
    assert any(not p.feasible for p in result.probes)
    assert result.forward_evaluations > 0


def test_agg_single_chunk_uses_waves() -> None:
    data = WorkloadSpec(
        input_length=1000, output_length=64, max_batched_tokens=8192, tpot_limit_ms=30.0
    )
    result = optimize_agg(data, enumerate_layouts(2), serving_for, DEPLOYMENT)
    assert {r.method for r in result.rows} == {"closed_form_waves"}
    forced = optimize_agg(
        data, enumerate_layouts(2), serving_for, DEPLOYMENT, force_simulation=True
    )
    assert {r.method for r in forced.rows} == {"time_simulation"}


def test_agg_memory_limits_concurrency() -> None:
    def tight(layout: ParallelLayout) -> ServingModel:
        return LinearLatency(memory_gb_per_token=1e-3, memory_gb=10.0)

    data = WorkloadSpec(input_length=1000, output_length=100, max_batched_tokens=4096)
    result = optimize_agg(data, [ParallelLayout()], tight, DEPLOYMENT)
    best = result.rows[0]
    # 1e-3 GB per token of context 1000 + 50 + 1: 9 requests fit in 10 GB, 10 do not.
    assert best.batch_size == 9
    assert any(p.reason and p.reason.startswith("memory") for p in result.probes)


def test_infeasible_layout_is_reported_not_raised() -> None:
    data = WorkloadSpec(
        input_length=1000, output_length=100, max_batched_tokens=4096, tpot_limit_ms=0.5
    )
    result = optimize_agg(data, [ParallelLayout()], serving_for, DEPLOYMENT)
    assert result.rows == () and result.best is None
    assert result.infeasible["TP1 DP1"].startswith("tpot_limit")


def test_prefill_chunk_waves_known_answer() -> None:
    # Chunks [4, 4, 2] with budget 4, 3 requests, every forward 1 ms: chunk 0 and 1 run one
    # request per wave (t = 6), the last chunk fits 2 per wave: done at 7 (2 requests) and 8.
    spec = WorkloadSpec(input_length=10, output_length=1, max_batched_tokens=4)
    assert [c.query_len for c in spec.get_prefill_chunk_plan()] == [4, 4, 2]
    result = prefill_chunk_waves(spec, 3, ConstantLatency(), serving_overhead_ms=0.5)
    assert result.ttft_ms == pytest.approx((7 * 2 + 8) / 3 + 0.5)
    assert result.makespan_ms == pytest.approx(8.0)
    assert result.waves == 8


def test_disagg_prefill_and_decode() -> None:
    data = WorkloadSpec(
        input_length=8192,
        output_length=512,
        max_batched_tokens=4096,
        ttft_limit_ms=2000.0,
        tpot_limit_ms=25.0,
    )
    prefill = optimize_disagg_prefill(data, enumerate_layouts(2), serving_for, DEPLOYMENT)
    assert prefill.rows and all(r.method == "chunk_waves" for r in prefill.rows)
    assert all(r.ttft_ms is not None and r.ttft_ms <= 2000.0 for r in prefill.rows)
    assert all(r.throughput_kind == "input" and r.tpot_ms is None for r in prefill.rows)
    decode = optimize_disagg_decode(data, enumerate_layouts(2), serving_for, DEPLOYMENT)
    assert decode.rows and all(r.method == "decode_step" for r in decode.rows)
    for row in decode.rows:
        assert row.tpot_ms is not None and row.tpot_ms <= 25.0
        assert row.throughput_tokens_s == pytest.approx(1000 * row.concurrency / row.tpot_ms)
    # Decode is unaffected by chunking: a smaller budget gives the same decode rows.
    smaller = WorkloadSpec(
        input_length=8192,
        output_length=512,
        max_batched_tokens=1024,
        ttft_limit_ms=2000.0,
        tpot_limit_ms=25.0,
    )
    again = optimize_disagg_decode(smaller, enumerate_layouts(2), serving_for, DEPLOYMENT)
    assert [(r.concurrency, r.tpot_ms) for r in again.rows] == [
        (r.concurrency, r.tpot_ms) for r in decode.rows
    ]


def test_pd_ratio_known_answers() -> None:
    assert prefill_qps(10, 100.0) == pytest.approx(100.0)
    assert decode_qps(8, 10.0, 1024) == pytest.approx(0.78201, abs=1e-5)
    assert decode_qps(8, 10.0, 1) == pytest.approx(800.0)  # max(O - 1, 1)
    split = split_instances(100.0, 25.0, 1, 1, 10)
    assert split is not None
    assert (split.prefill_instances, split.decode_instances) == (2, 8)
    assert split.balanced_qps == pytest.approx(200.0)
    assert split_instances(100.0, 25.0, 4, 4, 6) is None


def test_pd_ratio_end_to_end() -> None:
    data = WorkloadSpec(
        input_length=4096,
        output_length=256,
        max_batched_tokens=4096,
        ttft_limit_ms=3000.0,
        tpot_limit_ms=30.0,
    )
    result = optimize_pd_ratio(
        data,
        enumerate_layouts(2),
        enumerate_layouts(2),
        serving_for,
        serving_for,
        DEPLOYMENT,
        DEPLOYMENT,
        device_budget=16,
    )
    assert result.reason is None
    assert result.prefill_row is not None and result.decode_row is not None
    assert result.p_qps == pytest.approx(
        prefill_qps(result.prefill_row.concurrency, result.prefill_row.ttft_ms or 0)
    )
    assert result.pd_ratio == pytest.approx(result.d_qps / result.p_qps)  # type: ignore[operator]
    assert result.split is not None and result.split.devices_used <= 16
    assert result.throughput_tokens_s == pytest.approx(result.split.balanced_qps * 256)
    with pytest.raises(InvalidParameterError, match="num_devices"):
        optimize_pd_ratio(
            data,
            enumerate_layouts(1),
            enumerate_layouts(1),
            serving_for,
            serving_for,
            DEPLOYMENT,
            DEPLOYMENT,
            device_budget=1,
        )


class KvFake(LinearLatency):
    def __init__(self, tp: int, capacity: int) -> None:
        super().__init__(base_ms=2.0, per_token_ms=0.02 / tp, per_context_ms=0.0002 / tp)
        self.capacity = capacity

    def kv_capacity_requests(self, context_len: int, max_batched_tokens: int) -> int:
        return self.capacity


def test_agg_closed_loop_queues_instead_of_failing_on_memory() -> None:
    data = WorkloadSpec(
        input_length=2048,
        output_length=128,
        max_batched_tokens=4096,
        ttft_limit_ms=5000.0,
        tpot_limit_ms=60.0,
    )
    result = optimize_agg(
        data,
        enumerate_layouts(2),
        lambda layout: KvFake(layout.tp, 16),
        DEPLOYMENT,
        workload="closed_loop",
        requests_per_client=4,
    )
    assert result.rows
    for row in result.rows:
        assert row.method == "closed_loop_simulation"
        assert row.ttft_ms is not None and row.ttft_ms <= 5000.0
        assert row.tpot_ms is not None and row.tpot_ms <= 60.0
    # Past the KV capacity clients only queue: the throughput stays the cap's, so the search
    # stops at 16 per replica with that reason, not with a memory failure.
    above = [p for p in result.probes if p.batch_size > 16]
    assert above and all(not p.feasible for p in above)
    assert all(p.reason is not None and p.reason.startswith("running cap") for p in above)
    assert all(row.batch_size <= 16 for row in result.rows)
    none_fit = optimize_agg(
        data, [ParallelLayout()], lambda layout: KvFake(1, 0), DEPLOYMENT, workload="closed_loop"
    )
    assert none_fit.rows == () and none_fit.infeasible["TP1 DP1"].startswith("memory")
    with pytest.raises(InvalidParameterError, match="not a request rate"):
        optimize_agg(data, [ParallelLayout()], serving_for, DEPLOYMENT, workload="poisson")
    with pytest.raises(InvalidParameterError, match="burst, closed_loop, poisson"):
        optimize_agg(data, [ParallelLayout()], serving_for, DEPLOYMENT, workload="open")  # type: ignore[arg-type]
