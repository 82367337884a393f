"""TensorRT-LLM's batch wait (``batch_wait_timeout_iters``, ``batch_wait_max_tokens_ratio``):
while decodes run, new requests are held for that many iterations, or until their prompts and
the decodes reach the ratio of the token budget (``PyExecutor._waiting_requests``)."""

from __future__ import annotations

import pytest

from app.core.errors import InvalidParameterError
from app.core.profiles import TRTLLM
from app.core.spec import WorkloadSpec
from app.core.workload.closed_loop import simulate_closed_loop

from .fakes import LinearLatency, one_ms_ttfts


def _ttfts_ms(
    times_ms: tuple[float, ...],
    iters: int,
    ratio: float,
    *,
    input_length: int = 8,
    budget: int = 64,
) -> list[float]:
    data = WorkloadSpec(
        input_length=input_length,
        output_length=100,
        max_batched_tokens=budget,
        batch_wait_iters=iters,
        batch_wait_max_tokens_ratio=ratio,
    )
    return one_ms_ttfts(data, "decode_first_with_slack", times_ms)


def test_a_request_arriving_during_decodes_is_held_for_the_timeout() -> None:
    """A is prefilled at 0-1 ms and decodes 1 ms a step. B arrives at 3.5 ms and is seen at
    4 ms: with no wait it is prefilled in the 4-5 ms step (TTFT 1.5 ms); with a 20-iteration
    wait the iterations 4-5 ... 23-24 ms hold it and it is prefilled at 24-25 ms (TTFT
    21.5 ms). The token threshold (0.9 x 64 = 57.6) is far above 8 + 1 tokens."""
    assert _ttfts_ms((0.0, 3.5), 0, 0.0) == [1.0, 1.5]
    assert _ttfts_ms((0.0, 3.5), 20, 0.9) == [1.0, 21.5]
    assert _ttfts_ms((0.0, 3.5), 3, 0.9) == [1.0, 4.5]


def test_either_limit_at_zero_stops_every_wait() -> None:
    """``count >= timeout_iters or tokens >= ratio x max_num_tokens``: a 0 on either side is
    always reached, so the request is scheduled at once."""
    assert _ttfts_ms((0.0, 3.5), 20, 0.0) == [1.0, 1.5]
    assert _ttfts_ms((0.0, 3.5), 0, 0.9) == [1.0, 1.5]


def test_enough_tokens_release_the_wait() -> None:
    """Prompts of 60 tokens reach 0.9 x 64 = 57.6 with the running decode: no wait; 48-token
    prompts (48 + 1 < 57.6) are held the full 5 iterations."""
    assert _ttfts_ms((0.0, 3.5), 5, 0.9, input_length=60) == [1.0, 1.5]
    assert _ttfts_ms((0.0, 3.5), 5, 0.9, input_length=48) == [1.0, 6.5]


def test_an_engine_without_decodes_does_not_wait() -> None:
    """ "If no generation requests, no need to wait": the first request of an idle engine, and
    one arriving after the others finished, are prefilled when they arrive."""
    assert _ttfts_ms((0.0, 150.0), 20, 0.9) == [1.0, 1.0]


def test_lock_step_clients_are_not_held() -> None:
    """Clients that finish together re-submit to an engine with no decodes running: the wait
    changes nothing (it acts once the clients drift apart)."""
    latency = LinearLatency(base_ms=5.0, per_token_ms=0.02)

    def ttft_ms(iters: int) -> float:
        data = WorkloadSpec(
            input_length=512,
            output_length=64,
            max_batched_tokens=8192,
            batch_wait_iters=iters,
            batch_wait_max_tokens_ratio=0.9,
        )
        return simulate_closed_loop(data, 8, latency, num_requests=80).ttft_ms

    assert ttft_ms(20) == ttft_ms(0)


def test_the_profile_option_is_checked_and_off_by_default() -> None:
    assert TRTLLM.batch_wait_iters == 0 and TRTLLM.batch_wait_max_tokens_ratio == 0.0
    assert "batch_wait_iters" not in TRTLLM.to_dict()
    waited = TRTLLM.with_overrides({"batch_wait_iters": 20, "batch_wait_max_tokens_ratio": 0.9})
    assert waited.to_dict()["batch_wait_iters"] == 20
    with pytest.raises(InvalidParameterError) as err:
        TRTLLM.with_overrides({"batch_wait_max_tokens_ratio": 1.5})
    assert err.value.field == "batch_wait_max_tokens_ratio"
    with pytest.raises(InvalidParameterError) as err:
        WorkloadSpec(
            input_length=8,
            output_length=8,
            max_batched_tokens=64,
            recv_interval=10,
            batch_wait_iters=20,
            batch_wait_max_tokens_ratio=0.9,
        )
    assert err.value.field == "batch_wait_iters"
