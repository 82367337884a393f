"""Closed-loop workload: known answers, admission, windows, and the per-request reference."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from app.core.chunking import prefill_chunk_plan
from app.core.errors import InvalidParameterError
from app.core.scheduler import DecodeFirstWithSlack, make_scheduler
from app.core.spec import WorkloadSpec
from app.core.workload import (
    plan_closed_loop,
    simulate_closed_loop,
    simulate_serving,
)
from tests.unit.engine.fakes import ConstantLatency, LinearLatency, reference_simulation, spec


def test_single_client_runs_requests_back_to_back() -> None:
    # Every forward 1 ms: each request prefills (first token at +1) and decodes once (+2);
    # the client sends the next one when it finishes.
    result = simulate_closed_loop(spec(4, 4, 2), 1, ConstantLatency(), num_requests=3)
    assert result.workload == "closed_loop" and result.window == "benchmark"
    assert result.measured_requests == 3
    assert result.ttft_ms == pytest.approx(1.0)
    assert result.tpot_ms == pytest.approx(1.0)
    assert result.e2e_ms == pytest.approx(2.0)
    assert result.duration_ms == pytest.approx(6.0)
    assert result.throughput_tokens_s == pytest.approx(1000 * 3 * 2 / 6)
    assert result.total_throughput == pytest.approx(1000 * 3 * (4 + 2) / 6)
    assert result.request_throughput == pytest.approx(500.0)
    assert result.steps == 6
    assert result.mean_running_batch == pytest.approx(1.0)
    assert result.mean_prefill_tokens_per_step == pytest.approx(2.0)
    assert result.mean_decode_tokens_per_step == pytest.approx(0.5)


def test_kv_admission_queues_requests() -> None:
    # Room for one request at a time: the four clients are served one after another, and the
    # queueing shows up in TTFT (first tokens at 1, 3, 5, 7).
    result = simulate_closed_loop(
        spec(4, 16, 2), 4, ConstantLatency(), num_requests=4, max_running=1
    )
    assert result.ttft_ms == pytest.approx((1 + 3 + 5 + 7) / 4)
    assert result.tpot_ms == pytest.approx(1.0)
    unlimited = simulate_closed_loop(spec(4, 16, 2), 4, ConstantLatency(), num_requests=4)
    assert unlimited.ttft_ms == pytest.approx(1.0)  # all four prefill in the first step


def test_default_request_count_is_ten_per_client() -> None:
    plan = plan_closed_loop(spec(8, 8, 4), 3)
    assert plan.num_requests == 30
    assert sum(count for count, *_ in plan.records.all_finish()) == 30


def test_steady_state_window() -> None:
    latency = LinearLatency(base_ms=1.0, per_token_ms=0.01)
    steady = simulate_closed_loop(
        spec(64, 64, 16), 8, latency, num_requests=200, window="steady_state"
    )
    bench = simulate_closed_loop(spec(64, 64, 16), 8, latency, num_requests=200)
    assert steady.window == "steady_state"
    assert 0 < steady.measured_requests < 200
    assert steady.duration_ms < bench.duration_ms
    assert steady.tpot_ms > 0 and steady.ttft_ms > 0
    assert steady.throughput_tokens_s > 0
    with pytest.raises(InvalidParameterError, match="num_requests"):
        simulate_closed_loop(spec(64, 64, 16), 8, latency, num_requests=8, window="steady_state")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"num_requests": 2}, "num_requests"),
        ({"window": "forever"}, "window"),
        ({"max_running": 0}, "max_running"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidParameterError, match=field):
        simulate_closed_loop(spec(8, 4, 4), 4, ConstantLatency(), **kwargs)


closed_loop = st.fixed_dictionaries(
    {
        "effective": st.integers(1, 40),
        "budget": st.integers(1, 20),
        "clients": st.integers(1, 8),
        "extra": st.integers(0, 20),
        "output": st.integers(1, 8),
        "order": st.sampled_from(["continue_first", "fifo"]),
        "slack": st.sampled_from([1.15, 2.0, 4.0]),
        "cap": st.one_of(st.none(), st.integers(1, 8)),
        "per_token": st.sampled_from([0.0, 0.05]),
        "spread": st.sampled_from([0.0, 0.0, 0.25, 0.4, 0.5]),
        "turnaround": st.booleans(),
    }
)


@settings(max_examples=300, deadline=None)
@given(closed_loop)
@example(  # admission inside a round-robin stretch must see the requests that just left
    {
        "effective": 1,
        "budget": 1,
        "clients": 2,
        "extra": 1,
        "output": 2,
        "order": "continue_first",
        "slack": 2.0,
        "cap": 2,
        "per_token": 0.0,
        "spread": 0.0,
        "turnaround": False,
    }
)
def test_closed_loop_matches_per_request_reference(s: dict[str, Any]) -> None:
    plan = prefill_chunk_plan(s["effective"], s["budget"])
    scheduler = DecodeFirstWithSlack(slack_ratio=s["slack"], prefill_order=s["order"])
    latency = LinearLatency(base_ms=1.0, per_token_ms=s["per_token"])
    n = s["clients"] + s["extra"]
    got = simulate_closed_loop(
        dataclasses.replace(
            spec(s["effective"], s["budget"], s["output"]),
            arrival_spread=s["spread"],
            client_turnaround=s["turnaround"],
        ),
        s["clients"],
        latency,
        scheduler,
        num_requests=n,
        max_running=s["cap"],
    )
    want = reference_simulation(
        plan,
        s["clients"],
        s["output"],
        s["budget"],
        latency,
        scheduler,
        s["effective"],
        num_requests=n,
        max_running=s["cap"],
        arrival_spread=s["spread"],
        client_turnaround=s["turnaround"],
    )
    assert got.measured_requests == n
    assert got.ttft_ms == pytest.approx(want.ttft_ms, rel=1e-9, abs=1e-9)
    assert got.tpot_ms == pytest.approx(want.tpot_ms, rel=1e-9, abs=1e-9)
    assert got.duration_ms == pytest.approx(want.makespan_ms, rel=1e-9)
    assert got.steps == want.steps
    e2e = sum(want.finish[i] - want.arrival[i] for i in range(n)) / n
    assert got.e2e_ms == pytest.approx(e2e, rel=1e-9, abs=1e-9)


def test_burst_is_the_closed_loop_without_resubmission() -> None:
    from app.core.engine import simulate

    data = spec(300, 128, 32)
    burst = simulate(data, 16, LinearLatency())
    loop = simulate_closed_loop(data, 16, LinearLatency(), num_requests=16)
    assert loop.ttft_ms == pytest.approx(burst.ttft_ms)
    assert loop.tpot_ms == pytest.approx(burst.tpot_ms)
    assert loop.duration_ms == pytest.approx(burst.makespan_ms)
    assert loop.throughput_tokens_s == pytest.approx(burst.throughput_tokens_s)


policies = st.fixed_dictionaries(
    {
        "policy": st.sampled_from(["vllm", "sglang", "sglang_mixed_chunk"]),
        "mixed": st.sampled_from(["max", "sum", "fused"]),
        "effective": st.integers(1, 40),
        "budget": st.integers(1, 20),
        "clients": st.integers(1, 8),
        "extra": st.integers(0, 16),
        "output": st.integers(1, 8),
        "cap": st.one_of(st.none(), st.integers(1, 8)),
        "per_token": st.sampled_from([0.0, 0.05]),
        "spread": st.sampled_from([0.0, 0.0, 0.25, 0.4, 0.5]),
        "turnaround": st.booleans(),
    }
)


@settings(max_examples=300, deadline=None)
@given(policies)
def test_engine_policies_match_per_request_reference(s: dict[str, Any]) -> None:
    """Chunks cut to the budget left (vLLM, SGLang mixed chunk) and prefill-first order."""
    plan = prefill_chunk_plan(s["effective"], s["budget"])
    scheduler = make_scheduler(s["policy"], mixed_latency=s["mixed"], max_num_seqs=s["cap"])
    latency = LinearLatency(base_ms=1.0, per_token_ms=s["per_token"])
    n = s["clients"] + s["extra"]
    got = simulate_serving(
        WorkloadSpec(
            input_length=s["effective"],
            output_length=s["output"],
            max_batched_tokens=s["budget"],
            arrival_spread=s["spread"],
            client_turnaround=s["turnaround"],
        ),
        s["clients"],
        latency,
        scheduler,
        num_requests=n,
    )
    want = reference_simulation(
        plan,
        s["clients"],
        s["output"],
        s["budget"],
        latency,
        scheduler,
        s["effective"],
        num_requests=n,
        max_running=s["cap"],
        arrival_spread=s["spread"],
        client_turnaround=s["turnaround"],
    )
    assert got.max_running == s["cap"]
    assert got.ttft_ms == pytest.approx(want.ttft_ms, rel=1e-9, abs=1e-9)
    assert got.tpot_ms == pytest.approx(want.tpot_ms, rel=1e-9, abs=1e-9)
    assert got.duration_ms == pytest.approx(want.makespan_ms, rel=1e-9)
    assert got.steps == want.steps


def test_vllm_long_prompt_overlaps_decode_with_cut_chunks() -> None:
    data = spec(4096, 1024, 64)
    latency = LinearLatency(base_ms=1.0, per_token_ms=0.001)
    vllm = simulate_closed_loop(
        data, 8, latency, make_scheduler("vllm"), num_requests=32, record_steps=True
    )
    assert vllm.timeline is not None
    cut = {s.prefill_shape.query_len for s in vllm.timeline if s.prefill_shape}
    assert 1024 in cut and any(q < 1024 for q in cut)  # chunks shrink beside decodes
    sglang = simulate_closed_loop(
        data, 8, latency, make_scheduler("sglang"), num_requests=32, record_steps=True
    )
    assert sglang.timeline is not None
    assert all(not (s.p_step and s.d_step) for s in sglang.timeline)  # never mixed
    assert sglang.tpot_ms > vllm.tpot_ms  # decode stalls behind every prefill
