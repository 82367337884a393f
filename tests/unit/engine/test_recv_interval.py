"""The scheduler's receive interval (SGLang's ``--scheduler-recv-interval``): new requests are
seen at the next poll, which follows a prefill step, every ``N``-th decode step, or an idle
engine."""

from __future__ import annotations

import pytest

from app.core.engine import TimedArrivals, run_engine
from app.core.errors import InvalidParameterError
from app.core.scheduler import make_scheduler
from app.core.spec import WorkloadSpec
from app.core.workload.closed_loop import simulate_closed_loop

from .fakes import LinearLatency, one_ms_step, one_ms_ttfts, ttft_spans


def _ttfts_ms(
    times_ms: tuple[float, ...], recv_interval: int, *, input_length: int = 8
) -> list[float]:
    data = WorkloadSpec(
        input_length=input_length,
        output_length=100,
        max_batched_tokens=8,
        recv_interval=recv_interval,
    )
    return one_ms_ttfts(data, "sglang", times_ms)


def test_a_request_arriving_between_polls_waits_for_the_next_poll() -> None:
    """A is prefilled at 0-1 ms (a poll follows: the counter restarts), then decodes 1 ms a
    step. B arrives at 3.5 ms, during the third decode step: every iteration would receive it
    at 4 ms (TTFT 1.5 ms); polling every 10 decode steps receives it after the tenth, at 11 ms,
    and its prefill ends at 12 ms (TTFT 8.5 ms)."""
    assert _ttfts_ms((0.0, 3.5), 1) == [1.0, 1.5]
    assert _ttfts_ms((0.0, 3.5), 10) == [1.0, 8.5]
    # Polls every other decode step, at 3 ms and 5 ms: B at 3.5 ms is received at 5 ms, at
    # 2.5 ms at 3 ms.
    assert _ttfts_ms((0.0, 3.5), 2) == [1.0, 2.5]
    assert _ttfts_ms((0.0, 2.5), 2) == [1.0, 1.5]


def test_an_idle_engine_receives_at_once() -> None:
    """Its idle iterations reach any interval in microseconds: a request arriving after the
    last one finished is prefilled when it arrives."""
    assert _ttfts_ms((0.0, 150.0), 30) == _ttfts_ms((0.0, 150.0), 1) == [1.0, 1.0]


def test_a_prefill_step_is_followed_by_a_poll() -> None:
    """A's prompt takes three 8-token chunks (0-3 ms); B arrives at 0.5 ms and is received
    after the first chunk, as with no interval: prefill steps weigh past any interval."""
    assert _ttfts_ms((0.0, 0.5), 30, input_length=24) == _ttfts_ms((0.0, 0.5), 1, input_length=24)


def test_lock_step_clients_see_no_polling_delay() -> None:
    """A closed loop whose clients finish together leaves the engine idle when they
    re-submit: the interval changes nothing."""
    latency = LinearLatency(base_ms=5.0, per_token_ms=0.02)

    def ttft_ms(recv_interval: int) -> float:
        data = WorkloadSpec(
            input_length=512, output_length=64, max_batched_tokens=8192, recv_interval=recv_interval
        )
        return simulate_closed_loop(data, 8, latency, num_requests=80).ttft_ms

    assert ttft_ms(10) == ttft_ms(1)


def test_requests_arriving_while_others_decode_wait_for_the_poll() -> None:
    """Open arrivals (every 50 ms, one at 7.5 ms) land while an earlier request decodes (39
    steps of 1 ms): with a poll every 8 decode steps the mean TTFT grows."""
    data = {"input_length": 64, "output_length": 40, "max_batched_tokens": 64}

    def mean_ttft_ms(recv_interval: int) -> float:
        spec = WorkloadSpec(**data, recv_interval=recv_interval)  # type: ignore[arg-type]
        arrivals = TimedArrivals(
            times_ms=(0.0, 7.5, *(50.0 * k for k in range(1, 9))),
            max_in_flight=None,
            step_ms=one_ms_step,
        )
        _, records = run_engine(spec, 1, make_scheduler("sglang"), arrivals)
        return sum(ttft_spans(records)) / len(records.first)

    assert mean_ttft_ms(8) > mean_ttft_ms(1)


@pytest.mark.parametrize("bad", [0, -1, 1001, 2.5, True])
def test_an_interval_out_of_range_is_refused(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="recv_interval"):
        WorkloadSpec(
            input_length=8,
            output_length=8,
            max_batched_tokens=8,
            recv_interval=bad,  # type: ignore[arg-type]
        )


@pytest.mark.parametrize(
    ("rule", "interval", "output", "ttft_ms", "tpot_ms"),
    [
        ("immediate", 1, 101, 50.0, 10.0),
        ("immediate", 30, 101, 50.0, 10.0),  # the first token leaves at once
        ("interval", 1, 101, 50.0, 10.0),
        # The 30th token carries the first chunk: 29 decode steps later; of the 100 steps
        # after the first token, the client's TPOT spreads the 71 after its first chunk.
        ("interval", 30, 101, 50.0 + 29 * 10.0, 10.0 * 71 / 100),
        ("interval", 30, 11, 50.0 + 10 * 10.0, 0.0),  # the whole answer in one chunk
    ],
)
def test_the_first_chunk_under_a_stream_interval(
    rule: str, interval: int, output: int, ttft_ms: float, tpot_ms: float
) -> None:
    data = WorkloadSpec(
        input_length=8,
        output_length=output,
        max_batched_tokens=8,
        stream_interval=interval,
        stream_first_token=rule,  # type: ignore[arg-type]
    )
    assert data.client_view(50.0, 10.0) == pytest.approx((ttft_ms, tpot_ms))


def test_a_serving_result_is_the_clients_view() -> None:
    latency = LinearLatency(base_ms=5.0, per_token_ms=0.02)
    common = {"input_length": 512, "output_length": 64, "max_batched_tokens": 8192}
    base = simulate_closed_loop(WorkloadSpec(**common), 4, latency)  # type: ignore[arg-type]
    late = simulate_closed_loop(
        WorkloadSpec(**common, stream_interval=8, stream_first_token="interval"),  # type: ignore[arg-type]
        4,
        latency,
    )
    assert late.ttft_ms == pytest.approx(base.ttft_ms + 7 * base.tpot_ms)
    assert late.tpot_ms == pytest.approx(base.tpot_ms * 56 / 63)
    assert late.e2e_ms == pytest.approx(base.e2e_ms)  # the last token is where it was
    assert late.ttft_percentile_ms(0.5) == pytest.approx(
        base.ttft_percentile_ms(0.5) + 7 * base.tpot_ms
    )


def test_an_unknown_first_chunk_rule_is_refused() -> None:
    with pytest.raises(InvalidParameterError, match="stream_first_token"):
        WorkloadSpec(
            input_length=8,
            output_length=8,
            max_batched_tokens=8,
            stream_first_token="never",  # type: ignore[arg-type]
        )
