"""Group time simulation and closed-form waves: known answers, policy-free loop, properties."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.chunking import prefill_chunk_plan
from app.core.cost import ForwardShape
from app.core.engine import (
    CLOSED_FORM_WAVES,
    TIME_SIMULATION,
    SimulationPlan,
    plan_serving,
    plan_waves,
    simulate,
)
from app.core.errors import InvalidParameterError, SimulationError
from app.core.scheduler import DecodeFirstWithSlack, Scheduler

from .fakes import ConstantLatency, LinearLatency, ScriptedScheduler, reference_simulation, spec


def time_simulation(
    effective: int,
    budget: int,
    concurrency: int,
    output: int,
    latency: ConstantLatency,
    scheduler: Scheduler | None = None,
    **kwargs: Any,
) -> Any:
    """The time simulation of a burst (forced, whatever the chunk count)."""
    input_length = kwargs.pop("input_length", None)
    mtp = kwargs.pop("num_mtp_tokens", 0)
    data = spec(effective, budget, output, input_length=input_length, num_mtp_tokens=mtp)
    return simulate(data, concurrency, latency, scheduler, force_simulation=True, **kwargs)


def burst_plan(effective: int, budget: int, concurrency: int, output: int) -> SimulationPlan:
    plan = plan_serving(spec(effective, budget, output), concurrency, force_simulation=True)
    assert isinstance(plan, SimulationPlan)
    return plan


class WaveLatency(ConstantLatency):
    """The DIGEST example: prefill of 2 requests 10 ms, of 1 request 4 ms, decode 2 ms."""

    def prefill_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        super().prefill_ms(concurrency, query_len, seq_len)
        return {2: 10.0, 1: 4.0}[concurrency]

    def decode_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        super().decode_ms(concurrency, query_len, seq_len)
        return 2.0


def test_closed_form_waves_known_answer() -> None:
    result = simulate(spec(10, 20, 5), 5, WaveLatency())
    assert result.method == CLOSED_FORM_WAVES
    assert result.ttft_ms == pytest.approx(16.8)
    assert result.tpot_ms == pytest.approx(5.36)
    assert result.throughput_tokens_s == pytest.approx(932.8358, abs=1e-4)


def test_entry_point_picks_waves_for_one_chunk_and_can_be_forced() -> None:
    data = spec(10, 20, 5)
    waves = simulate(data, 5, WaveLatency())
    assert waves.method == CLOSED_FORM_WAVES
    assert waves.ttft_ms == pytest.approx(16.8)
    forced = simulate(data, 5, WaveLatency(), force_simulation=True)
    assert forced.method == TIME_SIMULATION
    assert simulate(spec(30, 20, 5), 5, ConstantLatency()).method == TIME_SIMULATION


def test_fifo_order_known_answer() -> None:
    result = time_simulation(
        5, 3, 2, 2, ConstantLatency(), DecodeFirstWithSlack(prefill_order="fifo")
    )
    assert result.ttft_ms == pytest.approx(3.5)
    assert result.tpot_ms == pytest.approx(1.0)
    assert result.throughput_tokens_s == pytest.approx(800.0)
    assert result.makespan_ms == pytest.approx(5.0)
    assert result.steps == 5


def test_continue_first_finishes_a_started_request_first() -> None:
    result = time_simulation(5, 3, 2, 2, ConstantLatency())
    # Request A: chunks at t=1, 2 (first token 2); B waits for A's decode step, then 4, 5.
    assert result.ttft_ms == pytest.approx((2 + 5) / 2)
    assert result.tpot_ms == pytest.approx(1.0)
    assert result.makespan_ms == pytest.approx(6.0)


def test_timeline_on_request() -> None:
    result = time_simulation(
        5, 3, 2, 2, ConstantLatency(), DecodeFirstWithSlack(prefill_order="fifo"), record_steps=True
    )
    assert result.timeline is not None
    decisions = [(s.p_step, s.d_step, s.repeat) for s in result.timeline]
    assert decisions == [(1, 0, 1), (1, 0, 1), (1, 0, 1), (1, 1, 1), (0, 1, 1)]
    assert [s.first_tokens for s in result.timeline] == [0, 0, 1, 1, 0]
    assert [s.finished for s in result.timeline] == [0, 0, 0, 1, 1]
    assert result.timeline[-1].end_ms == pytest.approx(result.makespan_ms)
    assert time_simulation(5, 3, 2, 2, ConstantLatency()).timeline is None


def test_scripted_scheduler_drives_the_loop() -> None:
    """The loop has no policy of its own: a prefill-first script is followed to the letter."""
    script = [(2, 0), (2, 0), (0, 2), (0, 2)]
    scheduler = ScriptedScheduler(script)
    latency = LinearLatency(base_ms=1.0, per_token_ms=0.0, per_context_ms=0.0)
    result = time_simulation(8, 4, 2, 3, latency, scheduler, record_steps=True)
    assert [(s.ready_decode, s.pending_prefill, s.chunk_query_len) for s in scheduler.seen] == [
        (0, 2, 4),
        (0, 2, 4),
        (2, 0, 4),
        (2, 0, 4),
    ]
    assert result.timeline is not None
    assert [(s.p_step, s.d_step) for s in result.timeline] == script
    # step_latency comes from the scheduler too: the script sums, every forward costs 1 ms.
    assert result.ttft_ms == pytest.approx(2.0)
    assert result.makespan_ms == pytest.approx(4.0)
    assert result.tpot_ms == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ([(0, 0)], "no progress"),
        ([(3, 0)], "p_step=3"),
        ([(1, 1)], "d_step=1"),
    ],
)
def test_invalid_decisions_are_domain_errors(script: list[tuple[int, int]], message: str) -> None:
    with pytest.raises(SimulationError, match=message):
        time_simulation(8, 4, 2, 3, ConstantLatency(), ScriptedScheduler(script))


def test_each_shape_is_evaluated_once() -> None:
    latency = LinearLatency()
    time_simulation(4096, 1024, 64, 256, latency)
    assert latency.calls
    assert max(latency.calls.values()) == 1


def test_decode_shape_uses_full_input_and_mtp_tokens() -> None:
    latency = ConstantLatency()
    time_simulation(6, 4, 1, 4, latency, input_length=12, num_mtp_tokens=1)
    decode = [s for s in latency.calls if isinstance(s, ForwardShape) and s.is_decode]
    assert {(s.query_len, s.seq_len) for s in decode} == {(2, 12 + 4 // 2 + 2)}


@pytest.mark.parametrize("concurrency", [0, -1, 1_000_001, True, 2.0])
def test_bad_concurrency(concurrency: Any) -> None:
    """The workload is checked by its spec (tests/unit/engine/test_chunking.py); the entry
    points check what is not in it."""
    data = spec(8, 4, 4)
    with pytest.raises(InvalidParameterError, match="concurrency"):
        simulate(data, concurrency, ConstantLatency())
    with pytest.raises(InvalidParameterError, match="concurrency"):
        simulate(data, concurrency, ConstantLatency(), force_simulation=True)
    assert simulate(data, 2, ConstantLatency()).concurrency == 2  # a valid one runs


def test_closed_form_rejects_multi_chunk() -> None:
    with pytest.raises(InvalidParameterError, match="closed-form"):
        plan_waves(spec(30, 20, 4), 2)


def test_negative_latency_is_rejected() -> None:
    with pytest.raises(SimulationError, match="latency model returned"):
        time_simulation(8, 4, 2, 4, ConstantLatency(-1.0))


scenario = st.fixed_dictionaries(
    {
        "effective": st.integers(1, 48),
        "budget": st.integers(1, 24),
        "concurrency": st.integers(1, 12),
        "output": st.integers(1, 9),
        "extra_input": st.integers(0, 16),
        "mtp": st.integers(0, 2),
        "order": st.sampled_from(["continue_first", "fifo"]),
        "slack": st.sampled_from([1.0, 1.15, 1.5, 2.0]),
        "base": st.sampled_from([0.5, 1.0, 3.0]),
        "per_token": st.sampled_from([0.0, 0.01, 0.2]),
    }
)


@settings(max_examples=300, deadline=None)
@given(scenario)
def test_group_simulation_matches_per_request_reference(s: dict[str, Any]) -> None:
    """Groups and fast-forwarding change the cost, never the answer."""
    effective, budget = int(s["effective"]), int(s["budget"])
    plan = prefill_chunk_plan(effective, budget)
    scheduler = DecodeFirstWithSlack(
        slack_ratio=float(s["slack"]),
        prefill_order=s["order"],
    )
    latency = LinearLatency(
        base_ms=float(s["base"]),
        per_token_ms=float(s["per_token"]),
    )
    n, o = int(s["concurrency"]), int(s["output"])
    input_length = effective + int(s["extra_input"])
    mtp = int(s["mtp"])
    got = time_simulation(
        effective, budget, n, o, latency, scheduler, input_length=input_length, num_mtp_tokens=mtp
    )
    want = reference_simulation(plan, n, o, budget, latency, scheduler, input_length, mtp)
    assert got.ttft_ms == pytest.approx(want.ttft_ms, rel=1e-9, abs=1e-9)
    assert got.tpot_ms == pytest.approx(want.tpot_ms, rel=1e-9, abs=1e-9)
    assert got.makespan_ms == pytest.approx(want.makespan_ms, rel=1e-9)
    assert got.steps == want.steps


@settings(max_examples=150, deadline=None)
@given(scenario)
def test_conservation_and_sanity(s: dict[str, Any]) -> None:
    effective, budget = int(s["effective"]), int(s["budget"])
    n, o = int(s["concurrency"]), int(s["output"])
    chunks = prefill_chunk_plan(effective, budget)
    sim_plan = burst_plan(effective, budget, n, o)
    assert sum(run.first_tokens for run in sim_plan.runs) == n  # every request starts once
    assert sum(run.finished for run in sim_plan.runs) == n  # and finishes exactly once
    assert sum(run.p_step * run.repeat for run in sim_plan.runs) == n * len(chunks)
    assert sum(run.d_step * run.repeat for run in sim_plan.runs) == n * (o - 1)
    result = time_simulation(effective, budget, n, o, LinearLatency())
    assert 0 < result.ttft_ms <= result.makespan_ms
    assert result.tpot_ms >= 0
    assert result.throughput_tokens_s == pytest.approx(1000 * n * o / result.makespan_ms)
    again = time_simulation(effective, budget, n, o, LinearLatency())
    assert again == result  # deterministic


@settings(max_examples=100, deadline=None)
@given(
    effective=st.integers(1, 64),
    budget=st.integers(1, 1024),
    n=st.integers(1, 16),
    o=st.integers(1, 8),
)
def test_single_chunk_forced_simulation_and_waves_both_sane(
    effective: int, budget: int, n: int, o: int
) -> None:
    budget = max(budget, effective)  # one chunk
    data = spec(effective, budget, o)
    waves = simulate(data, n, LinearLatency())
    forced = simulate(data, n, LinearLatency(), force_simulation=True)
    assert waves.method == CLOSED_FORM_WAVES and forced.method == TIME_SIMULATION
    for result in (waves, forced):
        assert result.prefill_num_chunks == 1
        assert 0 < result.ttft_ms <= result.makespan_ms
        assert result.throughput_tokens_s > 0 and math.isfinite(result.throughput_tokens_s)
    if budget >= n * effective:
        # The budget never binds: the simulation prefills everyone in one step, then decodes all
        # together, like the single closed-form wave, except that the closed form also charges
        # a decode step for the first token.
        assert forced.ttft_ms == pytest.approx(waves.ttft_ms)
        decode_ms = (waves.makespan_ms - waves.ttft_ms) / o
        assert forced.makespan_ms == pytest.approx(waves.makespan_ms - decode_ms)


@settings(max_examples=150, deadline=None)
@given(effective=st.integers(2, 64), n=st.integers(1, 12), o=st.integers(1, 8), data=st.data())
def test_more_chunks_never_lower_ttft(effective: int, n: int, o: int, data: st.DataObject) -> None:
    """Same latencies (every forward 1 ms), smaller budget -> more chunks -> TTFT not lower."""
    big = data.draw(st.integers(1, effective))
    small = data.draw(st.integers(1, big))
    specs = [spec(effective, b, o) for b in (big, small)]
    if specs[1].prefill_num_chunks == specs[0].prefill_num_chunks:
        return
    ttft = [simulate(d, n, ConstantLatency(), force_simulation=True).ttft_ms for d in specs]
    assert ttft[1] >= ttft[0]


round_robin = st.fixed_dictionaries(
    {
        "budget": st.integers(1, 12),
        "concurrency": st.integers(2, 40),
        "output": st.integers(2, 12),
        "effective": st.integers(1, 3),
        "slack": st.sampled_from([1.15, 2.0, 3.0, 4.0]),
        "order": st.sampled_from(["continue_first", "fifo"]),
        "per_token": st.sampled_from([0.0, 0.05]),
    }
)


@settings(max_examples=300, deadline=None)
@given(round_robin)
def test_round_robin_regime_matches_reference(s: dict[str, Any]) -> None:
    """More ready decodes than the budget: the rotation fast-forward stays exact."""
    budget = s["budget"]
    plan = prefill_chunk_plan(s["effective"], budget)
    scheduler = DecodeFirstWithSlack(slack_ratio=s["slack"], prefill_order=s["order"])
    latency = LinearLatency(base_ms=1.0, per_token_ms=s["per_token"])
    n, o = s["concurrency"], s["output"]
    got = time_simulation(s["effective"], budget, n, o, latency, scheduler)
    want = reference_simulation(plan, n, o, budget, latency, scheduler, s["effective"])
    assert got.ttft_ms == pytest.approx(want.ttft_ms, rel=1e-9)
    assert got.tpot_ms == pytest.approx(want.tpot_ms, rel=1e-9, abs=1e-12)
    assert got.makespan_ms == pytest.approx(want.makespan_ms, rel=1e-9)
    assert got.steps == want.steps


def test_round_robin_stretch_is_fast_forwarded() -> None:
    """Short prompts, more decodes than the budget: cost follows decisions, not tokens."""
    sim_plan = burst_plan(16, 256, 4096, 1024)
    assert sim_plan.steps > 16_000
    assert len(sim_plan.runs) < sim_plan.steps / 4
