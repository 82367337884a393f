"""The disaggregated closed loop: a prefill pool, a KV transfer and a decode pool."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from app.core.errors import InvalidParameterError
from app.core.limits import FirstToken
from app.core.spec import WorkloadSpec
from app.core.workload.disagg_serving import (
    DecodePool,
    DisaggServingResult,
    KvTransfer,
    PrefillPool,
    least_loaded_spread,
    simulate_disagg_poisson,
    simulate_disagg_serving,
)
from app.core.workload.poisson import poisson_arrivals_ms
from tests.unit.engine.fakes import ConstantLatency, LinearLatency

#: A prefill that costs the tokens it computes, a decode step that costs its batch.
LATENCY = LinearLatency(base_ms=5.0, per_token_ms=0.02, per_context_ms=0.00001)
#: ~70 KB of KV per token (an MLA model's latent cache) over 35 GB/s (one 400 Gb/s NIC at 70 %).
KV_BYTES_PER_TOKEN = 70e3
NIC_BYTES_PER_S = 35e9


def workload(isl: int = 1024, osl: int = 64, budget: int = 8192) -> WorkloadSpec:
    return WorkloadSpec(input_length=isl, output_length=osl, max_batched_tokens=budget)


def transfer(isl: int = 1024, bandwidth: float = NIC_BYTES_PER_S) -> KvTransfer:
    return KvTransfer(
        bytes_per_request=isl * KV_BYTES_PER_TOKEN, bandwidth_bytes_per_s=bandwidth, fixed_ms=1.0
    )


def run(
    concurrency: int,
    *,
    isl: int = 1024,
    osl: int = 64,
    prefill_workers: int = 1,
    decode_workers: int = 1,
    max_running: int = 256,
    bandwidth: float = NIC_BYTES_PER_S,
    first_token: FirstToken = "decode_step",
    num_requests: int | None = None,
) -> DisaggServingResult:
    return simulate_disagg_serving(
        workload(isl, osl),
        concurrency,
        PrefillPool(workers=prefill_workers, latency=LATENCY),
        DecodePool(workers=decode_workers, latency=LATENCY, max_running=max_running),
        transfer(isl, bandwidth),
        first_token=first_token,
        num_requests=num_requests,
    )


def test_one_client_sees_prefill_transfer_and_the_first_step() -> None:
    """One client, nothing to queue for: TTFT is the prefill forward, the transfer of its
    prompt's KV and (the engine computing it on the decode side) the first decode step."""
    isl, osl = 2048, 16
    result = run(1, isl=isl, osl=osl)
    prefill_ms = LATENCY._cost(1, isl, isl)
    transfer_ms = 1.0 + isl * KV_BYTES_PER_TOKEN / NIC_BYTES_PER_S * 1e3
    step_ms = LATENCY._cost(1, 1, isl + osl // 2 + 1)
    assert result.ttft_ms == pytest.approx(prefill_ms + transfer_ms + step_ms)
    assert result.tpot_ms == pytest.approx(step_ms)
    assert result.transfer_ms == pytest.approx(transfer_ms)
    assert result.prefill_queue_ms == 0 and result.decode_wait_ms == 0
    assert result.num_requests == 10


def test_a_length_range_decodes_its_mean_output_and_prefills_its_mean_prompt() -> None:
    """A benchmark client drawing lengths from 0.8-1.0 of the nominal ones (``--random-range-
    ratio 0.8``): every request prefills the range's mean prompt and decodes its mean output,
    so one client's end-to-end time is the mean request's, not the nominal one's."""
    isl, osl = 2048, 101
    ranged = WorkloadSpec(
        input_length=isl, output_length=osl, max_batched_tokens=8192, length_range_ratio=0.8
    )
    mean_in, mean_out = ranged.mean_input_length, ranged.mean_output_length
    assert (mean_in, mean_out) == (1843, 91)
    result = simulate_disagg_serving(
        ranged,
        1,
        PrefillPool(workers=1, latency=LATENCY),
        DecodePool(workers=1, latency=LATENCY, max_running=256),
        transfer(mean_in),
        first_token="admission",
    )
    prefill_ms = LATENCY._cost(1, mean_in, mean_in)
    step_ms = LATENCY._cost(1, 1, ranged.decode_seq_len)
    transfer_ms = 1.0 + mean_in * KV_BYTES_PER_TOKEN / NIC_BYTES_PER_S * 1e3
    assert result.ttft_ms == pytest.approx(prefill_ms + transfer_ms)
    assert result.e2e_ms == pytest.approx(prefill_ms + transfer_ms + (mean_out - 1) * step_ms)
    assert result.throughput_tokens_s == pytest.approx(
        result.num_requests * mean_out / result.makespan_ms * 1e3
    )


def test_where_the_first_token_comes_from_moves_the_transfer_between_ttft_and_tpot() -> None:
    isl, osl = 2048, 16
    on_step, on_admission, on_prefill = (
        run(1, isl=isl, osl=osl, first_token=rule)
        for rule in ("decode_step", "admission", "prefill")
    )
    step_ms = on_step.tpot_ms
    transfer_ms = on_step.transfer_ms
    assert on_admission.ttft_ms == pytest.approx(on_step.ttft_ms - step_ms)
    assert on_prefill.ttft_ms == pytest.approx(on_admission.ttft_ms - transfer_ms)
    # streamed with the prefill: the transfer sits between the first and second tokens
    assert on_prefill.tpot_ms == pytest.approx(step_ms + transfer_ms / (osl - 1))
    assert on_admission.tpot_ms == pytest.approx(step_ms)


def test_transfer_time_grows_with_the_prompt_and_with_a_slower_tier() -> None:
    assert transfer(8192).time_ms(1) > transfer(1024).time_ms(1)
    assert transfer(1024, NIC_BYTES_PER_S / 10).time_ms(1) > transfer(1024).time_ms(1)
    assert transfer(1024).time_ms(8) > transfer(1024).time_ms(1)  # a job's prompts share the link
    nvlink, network = run(4, bandwidth=720e9), run(4, bandwidth=NIC_BYTES_PER_S)
    assert network.transfer_ms > nvlink.transfer_ms
    assert network.ttft_ms > nvlink.ttft_ms
    short, long = run(4, isl=1024), run(4, isl=4096)
    assert long.transfer_ms > short.transfer_ms


def test_a_single_prefill_worker_queues_at_high_concurrency() -> None:
    low = run(2, osl=64, decode_workers=8)
    high = run(512, osl=64, decode_workers=8)
    assert high.prefill_queue_ms > 10 * max(low.prefill_queue_ms, 1.0)
    assert high.ttft_ms > 5 * low.ttft_ms
    assert high.binding_pool == "prefill"
    assert high.prefill_utilisation > 0.9
    # more prefill workers take the queue away
    spread_out = run(512, osl=64, decode_workers=8, prefill_workers=8)
    assert spread_out.prefill_queue_ms < high.prefill_queue_ms / 4
    assert spread_out.ttft_ms < high.ttft_ms


def test_a_full_decode_pool_makes_requests_wait_for_a_slot() -> None:
    capped = run(64, osl=256, max_running=8, prefill_workers=4)
    assert capped.binding_pool == "decode"
    assert capped.decode_wait_ms > capped.prefill_queue_ms
    roomy = run(64, osl=256, max_running=64, prefill_workers=4)
    assert roomy.decode_wait_ms < capped.decode_wait_ms / 10


@settings(max_examples=30, deadline=None)
@given(
    concurrency=st.integers(1, 200),
    workers=st.integers(1, 6),
    cap=st.sampled_from([4, 16, 256]),
    rule=st.sampled_from(["decode_step", "admission"]),
)
@example(concurrency=16, workers=6, cap=4, rule="admission")
def test_more_decode_workers_never_raise_tpot(
    concurrency: int, workers: int, cap: int, rule: FirstToken
) -> None:
    """At a fixed client count, another decode worker shares the batch (a cheaper step) and
    the slots: TPOT never goes up. (Not for the ``prefill`` first-token rule: there the first
    token leaves before the transfer and the decode admission, so TPOT also carries those
    waits, and 8 clients over 5 workers can wait longer than over 4.)"""
    fewer = run(concurrency, osl=32, decode_workers=workers, max_running=cap, first_token=rule)
    more = run(concurrency, osl=32, decode_workers=workers + 1, max_running=cap, first_token=rule)
    # Up to 1e-4 relative: under the admission rule a seventh decode unit can move where a run
    # is cut by a fraction of a step (16 clients over 6 vs 7 units: 5.045934 vs 5.045971 ms).
    assert more.tpot_ms <= fewer.tpot_ms * (1 + 1e-4)


@settings(max_examples=30, deadline=None)
@given(
    concurrency=st.integers(1, 300),
    prefill_workers=st.integers(1, 4),
    decode_workers=st.integers(1, 4),
    per_client=st.integers(1, 4),
)
def test_every_request_is_counted_once_and_the_run_is_deterministic(
    concurrency: int, prefill_workers: int, decode_workers: int, per_client: int
) -> None:
    args = {
        "prefill_workers": prefill_workers,
        "decode_workers": decode_workers,
        "max_running": 32,
        "num_requests": concurrency * per_client,
        "osl": 16,
    }
    result = run(concurrency, **args)  # type: ignore[arg-type]
    assert result.num_requests == concurrency * per_client
    assert result == run(concurrency, **args)  # type: ignore[arg-type]
    assert all(
        math.isfinite(v) and v >= 0
        for v in (result.ttft_ms, result.tpot_ms, result.prefill_queue_ms, result.decode_wait_ms)
    )
    assert 0 < result.prefill_utilisation <= 1 and 0 < result.decode_utilisation <= 1
    # a request's latency holds its TTFT and its decode
    assert result.e2e_ms >= result.ttft_ms + result.tpot_ms * (16 - 1) * (1 - 1e-9)


def test_cost_follows_scheduling_events_not_tokens() -> None:
    """1,024 clients x 10 requests x 1,024 tokens: the decode runs are cut only by arrivals
    and finishes, and each distinct forward is priced once."""
    latency = ConstantLatency(prefill_ms=50.0, decode_ms=20.0)
    result = simulate_disagg_serving(
        workload(1024, 1024),
        1024,
        PrefillPool(workers=2, latency=latency),
        DecodePool(workers=4, latency=latency, max_running=512),
        transfer(1024),
    )
    tokens = result.num_requests * 1024
    assert result.decode_runs < tokens / 200
    assert result.prefill_jobs <= result.num_requests
    assert len(latency.calls) == result.forward_evaluations
    assert all(n == 1 for n in latency.calls.values())


def test_coupled_ranks_step_together_and_price_the_busiest_share() -> None:
    """A worker of 8 coupled ranks is one engine with 8 budgets and 8 running caps whose step
    costs one rank's share; independent ranks are 8 engines."""
    latency = LinearLatency(base_ms=5.0, per_token_ms=0.02)
    spec = workload(1024, 32)
    common = {"transfer": transfer(1024), "concurrency": 64}
    coupled = simulate_disagg_serving(
        spec,
        prefill=PrefillPool(workers=1, latency=latency, ranks=8, coupled=True),
        decode=DecodePool(workers=1, latency=latency, max_running=8, ranks=8, coupled=True),
        **common,  # type: ignore[arg-type]
    )
    independent = simulate_disagg_serving(
        spec,
        prefill=PrefillPool(workers=1, latency=latency, ranks=8),
        decode=DecodePool(workers=1, latency=latency, max_running=8, ranks=8),
        **common,  # type: ignore[arg-type]
    )
    # every client has a slot: at most the wait for the next step boundary
    assert coupled.decode_wait_ms < coupled.tpot_ms
    assert independent.decode_wait_ms < independent.tpot_ms
    # the same share of clients per rank: one rank's step either way
    assert coupled.tpot_ms == pytest.approx(independent.tpot_ms, rel=0.05)


@given(st.integers(0, 500), st.lists(st.integers(0, 50), min_size=1, max_size=12))
def test_spread_gives_each_request_to_the_least_loaded_unit(count: int, loads: list[int]) -> None:
    expected = list(loads)
    given_one_by_one = [0] * len(loads)
    for _ in range(count):
        i = min(range(len(loads)), key=lambda j: (expected[j], j))
        expected[i] += 1
        given_one_by_one[i] += 1
    got = [0] * len(loads)
    for i, n in least_loaded_spread(count, loads):
        assert n > 0
        got[i] += n
    assert got == given_one_by_one


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: KvTransfer(bytes_per_request=-1, bandwidth_bytes_per_s=1), "bytes_per_request"),
        (lambda: KvTransfer(bytes_per_request=1, bandwidth_bytes_per_s=0), "bandwidth"),
        (lambda: KvTransfer(bytes_per_request=1, bandwidth_bytes_per_s=1, fixed_ms=-1), "fixed"),
        (lambda: PrefillPool(workers=0, latency=LATENCY), "prefill_workers"),
        (lambda: DecodePool(workers=1, latency=LATENCY, max_running=0), "max_running"),
        (lambda: run(4, first_token="never"), "first_token"),  # type: ignore[arg-type]
        (lambda: run(4, num_requests=3), "num_requests"),
    ],
)
def test_invalid_inputs_name_their_field(build: object, field: str) -> None:
    with pytest.raises(InvalidParameterError, match=field):
        build()  # type: ignore[operator]


@pytest.mark.parametrize("rule", ["decode_step", "admission", "prefill"])
def test_one_output_token_needs_no_decode_step_unless_the_decoder_computes_it(
    rule: FirstToken,
) -> None:
    result = run(8, osl=1, first_token=rule)
    assert result.tpot_ms == 0 and result.num_requests == 80
    assert (result.decode_runs > 0) == (rule == "decode_step")
    if rule == "prefill":  # the request still holds its KV until the decode side takes it
        assert result.e2e_ms > result.ttft_ms
    else:
        assert result.e2e_ms == pytest.approx(result.ttft_ms)


def poisson(
    rate: float,
    num_requests: int = 200,
    *,
    isl: int = 1024,
    osl: int = 64,
    seed: int = 0,
    first_token: FirstToken = "decode_step",
) -> DisaggServingResult:
    return simulate_disagg_poisson(
        workload(isl, osl),
        poisson_arrivals_ms(rate, num_requests, seed),
        PrefillPool(workers=1, latency=LATENCY),
        DecodePool(workers=1, latency=LATENCY, max_running=256),
        transfer(isl),
        first_token=first_token,
    )


@pytest.mark.parametrize("first_token", ["prefill", "admission", "decode_step"])
def test_sparse_poisson_arrivals_meet_an_empty_deployment(first_token: FirstToken) -> None:
    """Requests far apart find both pools idle: each sees what one closed-loop client sees."""
    sparse = poisson(0.01, 20, first_token=first_token)  # 100 s apart, each done in < 1 s
    alone = run(1, num_requests=20, first_token=first_token)
    assert sparse.ttft_ms == pytest.approx(alone.ttft_ms)
    assert sparse.tpot_ms == pytest.approx(alone.tpot_ms)
    assert sparse.prefill_queue_ms == 0 and sparse.decode_wait_ms == 0
    assert sparse.num_requests == 20


def test_an_open_loop_over_the_prefill_capacity_queues_without_bound() -> None:
    """A closed loop slows its clients down; an open loop keeps sending, so past the prefill
    pool's rate the queue (and TTFT) grows with the run's length, and the prefill pool binds."""
    prefill_ms = LATENCY._cost(1, 4096, 4096)  # one 4,096-token prompt alone
    over = 3.0 * 1e3 / prefill_ms  # three times what one-at-a-time prefill serves
    short, long = poisson(over, 100, isl=4096), poisson(over, 400, isl=4096)
    assert long.prefill_queue_ms > 2 * short.prefill_queue_ms > 0
    assert long.ttft_ms > short.ttft_ms
    assert long.binding_pool == "prefill"
    under = poisson(0.2 * 1e3 / prefill_ms, 400, isl=4096)
    assert under.ttft_ms < short.ttft_ms
    assert under.prefill_queue_ms < 0.5 * prefill_ms


def test_poisson_arrivals_together_travel_as_one_group() -> None:
    """Equal arrival times are one group: cost follows arrivals, and the run is repeatable."""
    spec, pools = (
        workload(),
        (
            PrefillPool(workers=1, latency=LATENCY),
            DecodePool(workers=1, latency=LATENCY, max_running=256),
        ),
    )
    together = simulate_disagg_poisson(spec, (0.0,) * 64 + (5000.0,) * 64, *pools, transfer())
    again = simulate_disagg_poisson(spec, (0.0,) * 64 + (5000.0,) * 64, *pools, transfer())
    assert together == again
    assert together.num_requests == 128
    assert together.prefill_jobs == 16  # 8 prompts of 1,024 tokens per 8,192-token job


@pytest.mark.parametrize(
    "arrivals", [(), (5.0, 1.0), (-1.0,), (math.nan,), (0.0, math.inf)], ids=str
)
def test_bad_arrivals_are_refused(arrivals: tuple[float, ...]) -> None:
    with pytest.raises(InvalidParameterError) as raised:
        simulate_disagg_poisson(
            workload(),
            arrivals,
            PrefillPool(workers=1, latency=LATENCY),
            DecodePool(workers=1, latency=LATENCY, max_running=8),
            transfer(),
        )
    assert raised.value.field in ("num_requests", "arrivals_ms")
