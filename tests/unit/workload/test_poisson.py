"""Poisson arrivals: known answers, the per-request reference, conservation, determinism."""

from __future__ import annotations

import math
from collections import Counter
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from app.core.chunking import prefill_chunk_plan
from app.core.errors import InvalidParameterError
from app.core.scheduler import make_scheduler
from app.core.spec import WorkloadSpec
from app.core.workload import (
    plan_poisson,
    poisson_arrivals_ms,
    simulate_poisson,
    simulate_poisson_serving,
)
from tests.unit.engine.fakes import ConstantLatency, LinearLatency, reference_simulation, spec


def test_arrivals_are_a_seeded_poisson_process() -> None:
    times = poisson_arrivals_ms(50.0, 20_000, 7)
    assert times[0] == 0.0
    assert all(a <= b for a, b in pairwise(times))
    assert poisson_arrivals_ms(50.0, 20_000, 7) == times
    assert poisson_arrivals_ms(50.0, 20_000, 8) != times
    # Exponential gaps of mean 1 / rate = 20 ms (standard error of the mean: 20 / sqrt(n)).
    assert times[-1] / (len(times) - 1) == pytest.approx(20.0, rel=0.03)
    gaps = [b - a for a, b in pairwise(times)]
    below_mean = sum(gap < 20.0 for gap in gaps) / len(gaps)
    assert below_mean == pytest.approx(1 - math.exp(-1), abs=0.02)


@pytest.mark.parametrize(
    ("rate", "requests", "seed", "field"),
    [
        (0.0, 10, 0, "request_rate"),
        (-1.0, 10, 0, "request_rate"),
        (math.nan, 10, 0, "request_rate"),
        (math.inf, 10, 0, "request_rate"),
        (True, 10, 0, "request_rate"),
        (1.0, 0, 0, "num_requests"),
        (1.0, 10, -1, "seed"),
    ],
)
def test_bad_arrival_parameters(rate: float, requests: int, seed: int, field: str) -> None:
    with pytest.raises(InvalidParameterError, match=field):
        poisson_arrivals_ms(rate, requests, seed)


def test_a_very_low_rate_sees_an_empty_engine() -> None:
    # One request every ~1000 s, each done in 5 ms (two 1-ms prefill steps, three decode
    # steps): every TTFT is the isolated prefill, nobody waits for a slot or for KV blocks.
    result = simulate_poisson(spec(512, 256, 4), 0.001, ConstantLatency(), num_requests=20, seed=3)
    assert result.workload == "poisson" and result.method == "poisson_simulation"
    assert result.window == "benchmark" and result.clients == 0
    assert result.measured_requests == 20
    assert result.ttft_ms == 2.0
    assert result.tpot_ms == 1.0
    assert result.e2e_ms == 5.0
    assert result.mean_running_batch == 1.0
    assert result.steps == 20 * 5
    times = poisson_arrivals_ms(0.001, 20, 3)
    assert result.duration_ms == pytest.approx(times[-1] + 5.0)
    assert result.request_throughput == pytest.approx(1000 * 20 / result.duration_ms)
    plan, _ = plan_poisson(spec(512, 256, 4), 0.001, ConstantLatency(), num_requests=20, seed=3)
    assert plan.records.sent_ms == times  # sent when they arrived


def test_ttft_grows_as_the_rate_passes_capacity() -> None:
    latency = LinearLatency(base_ms=1.0, per_token_ms=0.002)
    results = [
        simulate_poisson(spec(512, 256, 64), rate, latency, num_requests=400, seed=1)
        for rate in (1.0, 20.0, 100.0, 400.0, 2000.0)
    ]
    ttft = [r.ttft_ms for r in results]
    assert ttft == sorted(ttft)
    assert ttft[-1] > 20 * ttft[0]
    assert ttft[0] == pytest.approx(2 * (1.0 + 0.002 * 256), rel=0.05)  # almost never shared
    # Throughput follows the offered load, then saturates.
    served = [r.request_throughput for r in results]
    assert served[0] == pytest.approx(1.0, rel=0.2)
    assert served[-1] == pytest.approx(served[-2], rel=0.2)
    assert served[-1] < 400.0


def test_a_client_side_cap_is_not_part_of_ttft_but_kv_admission_is() -> None:
    # 10 requests almost at once. max_concurrency=1: each is sent when the previous one
    # finishes, so its TTFT is the isolated prefill; the run takes 10 x 5 ms.
    capped = simulate_poisson(
        spec(512, 256, 4), 1e9, ConstantLatency(), num_requests=10, max_concurrency=1
    )
    assert capped.ttft_ms == 2.0
    assert capped.e2e_ms == 5.0
    assert capped.duration_ms == pytest.approx(50.0)
    assert capped.request_throughput == pytest.approx(200.0)
    assert capped.mean_running_batch == 1.0
    # The same one-at-a-time engine through KV admission: requests were sent and queue on the
    # server, so their wait is TTFT.
    queued = simulate_poisson(
        spec(512, 256, 4), 1e9, ConstantLatency(), num_requests=10, max_running=1
    )
    assert queued.duration_ms == pytest.approx(50.0)
    assert queued.ttft_ms == pytest.approx(sum(2.0 + 5 * i for i in range(10)) / 10, abs=1e-3)
    free = simulate_poisson(spec(512, 256, 4), 1e9, ConstantLatency(), num_requests=10)
    assert free.mean_running_batch > 1.0 and free.duration_ms < 50.0


def test_zero_latency_steps_still_finish_every_request() -> None:
    result = simulate_poisson(spec(512, 256, 8), 100.0, ConstantLatency(0.0, 0.0), num_requests=50)
    assert result.measured_requests == 50 and result.ttft_ms == 0.0


def test_timeline_keeps_the_idle_gaps() -> None:
    result = simulate_poisson(
        spec(512, 256, 4), 0.5, ConstantLatency(), num_requests=5, seed=2, record_steps=True
    )
    assert result.timeline is not None
    times = poisson_arrivals_ms(0.5, 5, 2)
    starts = [s.start_ms for s in result.timeline if s.first_tokens == 0 and s.p_step]
    assert starts == pytest.approx(times)  # each request's first chunk starts on arrival
    assert sum(s.finished for s in result.timeline) == 5
    ends = [s.end_ms for s in result.timeline]
    assert ends[-1] == pytest.approx(result.duration_ms)


DYADIC = LinearLatency(base_ms=1.0, per_token_ms=2**-7, per_context_ms=2**-14)  # exact sums

poisson_cases = st.fixed_dictionaries(
    {
        "policy": st.sampled_from(
            [
                "decode_first_with_slack",
                "fifo",
                "slack4",
                "vllm",
                "vllm_fused",
                "sglang",
                "sglang_mixed_chunk",
            ]
        ),
        "effective": st.integers(1, 40),
        "budget": st.integers(1, 20),
        "requests": st.integers(1, 40),
        "output": st.integers(1, 8),
        "rate": st.sampled_from([5.0, 50.0, 300.0, 5000.0]),
        "seed": st.integers(0, 2**32 - 1),
        "kv_cap": st.one_of(st.none(), st.integers(1, 6)),
        "client_cap": st.one_of(st.none(), st.integers(1, 6)),
    }
)


def scheduler_for(policy: str) -> Any:
    if policy == "fifo":
        return make_scheduler("decode_first_with_slack", prefill_order="fifo")
    if policy == "slack4":  # prefills beside a full decode batch: more decodes than the budget
        return make_scheduler("decode_first_with_slack", slack_ratio=4.0)
    if policy == "vllm_fused":  # a mixed step is one forward (a MixedShape)
        return make_scheduler("vllm", mixed_latency="fused")
    return make_scheduler(policy)


@settings(max_examples=300, deadline=None)
@given(poisson_cases)
@example(  # round-robin stretches (more decodes than the budget) cut by arrivals
    {
        "policy": "slack4",
        "effective": 1,
        "budget": 3,
        "requests": 24,
        "output": 8,
        "rate": 300.0,
        "seed": 0,
        "kv_cap": None,
        "client_cap": None,
    }
)
def test_poisson_matches_per_request_reference(s: dict[str, Any]) -> None:
    plan = prefill_chunk_plan(s["effective"], s["budget"])
    scheduler = scheduler_for(s["policy"])
    times = poisson_arrivals_ms(s["rate"], s["requests"], s["seed"])
    got = simulate_poisson(
        spec(s["effective"], s["budget"], s["output"]),
        s["rate"],
        DYADIC,
        scheduler,
        num_requests=s["requests"],
        seed=s["seed"],
        max_concurrency=s["client_cap"],
        max_running=s["kv_cap"],
    )
    want = reference_simulation(
        plan,
        0,
        s["output"],
        s["budget"],
        DYADIC,
        scheduler,
        s["effective"],
        max_running=s["kv_cap"],
        arrival_times=times,
        max_in_flight=s["client_cap"],
    )
    n = s["requests"]
    assert got.measured_requests == n
    assert got.steps == want.steps
    assert got.ttft_ms == pytest.approx(want.ttft_ms, rel=1e-9, abs=1e-9)
    assert got.tpot_ms == pytest.approx(want.tpot_ms, rel=1e-9, abs=1e-9)
    assert got.duration_ms == pytest.approx(want.makespan_ms, rel=1e-9)
    e2e = sum(want.finish[i] - want.arrival[i] for i in range(n)) / n
    assert got.e2e_ms == pytest.approx(e2e, rel=1e-9, abs=1e-9)
    # The reference's own invariants: nobody is sent before arriving or starts before sent.
    assert all(want.arrival[i] >= times[i] for i in range(n))
    assert all(want.started[i] >= want.arrival[i] for i in range(n))


conservation_cases = st.fixed_dictionaries(
    {
        "chunks": st.integers(1, 6),
        "requests": st.integers(1, 300),
        "output": st.integers(1, 64),
        "rate": st.floats(0.5, 5000.0),
        "seed": st.integers(0, 2**32 - 1),
        "kv_cap": st.one_of(st.none(), st.integers(1, 64)),
        "client_cap": st.one_of(st.none(), st.integers(1, 64)),
        "policy": st.sampled_from(["decode_first_with_slack", "vllm", "sglang"]),
    }
)


@settings(max_examples=150, deadline=None)
@given(conservation_cases)
def test_every_request_finishes_after_it_arrives_and_runs_are_reproducible(
    s: dict[str, Any],
) -> None:
    data = spec(64 * s["chunks"], 64, s["output"])
    kwargs: dict[str, Any] = {
        "num_requests": s["requests"],
        "seed": s["seed"],
        "max_concurrency": s["client_cap"],
        "max_running": s["kv_cap"],
    }
    args = (data, s["rate"], ConstantLatency(), scheduler_for(s["policy"]))
    serving, _ = plan_poisson(*args, **kwargs)
    records = serving.records
    assert records.sent_ms is not None and records.ends_ms is not None
    # Conservation: every request emits its first token and finishes, once.
    assert sum(c for c, _, _ in records.first) == s["requests"]
    assert sum(c for c, *_ in records.finish) == s["requests"]
    # Arrivals respected: in arrival order, request k is sent no earlier than it arrives, and
    # (every step 1 ms) its first token comes at least one step per chunk after it was sent.
    sent_counts = Counter[int]()
    for count, arrival, first_run in records.first:
        sent_counts[arrival] += count
        assert records.ends_ms[first_run] - records.sent_ms[arrival] >= s["chunks"] - 1e-9
    sent = [records.sent_ms[a] for a in sorted(sent_counts) for _ in range(sent_counts[a])]
    times = poisson_arrivals_ms(s["rate"], s["requests"], s["seed"])
    assert all(s_ms >= a_ms for s_ms, a_ms in zip(sent, times, strict=True))
    # Determinism: the same seed gives the same result.
    result = simulate_poisson(*args, **kwargs)
    assert simulate_poisson(*args, **kwargs) == result
    if s["client_cap"] is not None:
        assert result.mean_running_batch <= s["client_cap"] + 1e-9


DATA = WorkloadSpec(input_length=512, output_length=32, max_batched_tokens=256)


def test_replicas_share_the_rate_and_the_requests() -> None:
    one = simulate_poisson_serving(DATA, 50.0, LinearLatency(), num_requests=100)
    two = simulate_poisson_serving(DATA, 100.0, LinearLatency(), dp=2, num_requests=200)
    assert two.measured_requests == 200
    assert two.ttft_ms == pytest.approx(one.ttft_ms)
    assert two.throughput_tokens_s == pytest.approx(2 * one.throughput_tokens_s)
    # 201 over two replicas: 101 and 100, each at 50 req/s; the client cap splits alike.
    big = simulate_poisson(DATA, 50.0, LinearLatency(), num_requests=101)
    uneven = simulate_poisson_serving(DATA, 100.0, LinearLatency(), dp=2, num_requests=201)
    assert uneven.measured_requests == 201
    assert uneven.ttft_ms == pytest.approx((101 * big.ttft_ms + 100 * one.ttft_ms) / 201)
    assert uneven.throughput_tokens_s == pytest.approx(
        big.throughput_tokens_s + one.throughput_tokens_s
    )
    with pytest.raises(InvalidParameterError, match="num_requests"):
        simulate_poisson_serving(DATA, 10.0, LinearLatency(), dp=4, num_requests=3)
    with pytest.raises(InvalidParameterError, match="max_concurrency"):
        simulate_poisson_serving(DATA, 10.0, LinearLatency(), dp=4, max_concurrency=2)


def test_the_running_cap_is_the_closed_loops() -> None:
    capped = simulate_poisson_serving(
        DATA,
        1e4,
        LinearLatency(),
        num_requests=50,
        scheduler=make_scheduler("vllm"),
        max_num_seqs=3,
    )
    assert capped.max_running == 3
    assert capped.mean_running_batch <= 3


class BatchCounting(ConstantLatency):
    """A batch latency model (like the cached runner) that counts its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def forward_latencies_ms(self, shapes: Any) -> dict[Any, float]:
        self.batches.append(len(shapes))
        return dict.fromkeys(shapes, 1.0)


def test_each_shape_is_priced_once_and_likely_ones_together() -> None:
    latency = ConstantLatency()
    result = simulate_poisson(spec(512, 256, 16), 300.0, latency, num_requests=300, seed=5)
    assert max(latency.calls.values()) == 1
    assert result.forward_evaluations == len(latency.calls)
    # A 16-chunk prompt at a low rate: one call prices the whole walk, one the decode sizes.
    batch = BatchCounting()
    walk = spec(16 * 64, 64, 8)
    sparse = simulate_poisson(walk, 0.01, batch, num_requests=10, max_running=4)
    assert sparse.ttft_ms == 16.0
    assert len(batch.batches) == 2 and sorted(batch.batches) == [4, 16]
