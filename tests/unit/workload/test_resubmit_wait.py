"""A closed loop's re-submission waits for the steps the engine formed without it, and the front
end tokenizes every prompt (``resubmit_steps``, ``frontend_us_per_token``)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.errors import InvalidParameterError
from app.core.limits import MAX_RESUBMIT_STEPS
from app.core.profiles import (
    FRONTEND_US_PER_TOKEN,
    OVERLAP_RESUBMIT_STEPS,
    PROFILES,
    VLLM_TOKENIZER_BATCH_WAIT_MS,
)
from app.core.scheduler import make_scheduler
from app.core.spec import WorkloadSpec
from app.core.workload import simulate_closed_loop, simulate_poisson
from tests.unit.engine.fakes import ConstantLatency, LinearLatency, spec


def _lagged(steps: int, *args: int) -> WorkloadSpec:
    return dataclasses.replace(spec(*args), resubmit_steps=steps)


def test_known_answer_two_clients_one_prefill_per_step() -> None:
    # Budget of one prompt: the second client's prefill waits for the first's decodes (runs of
    # 1, 3, 1, 3, ... 1 ms steps, 16 in all). Client A's successor is sent at the end of run 1
    # (t = 4) while B's prefill is scheduled: it waits two steps of the run's mean (1 ms), and so
    # does B's at t = 8 (A's successor still ahead of its first token). TTFTs 1, 5, 5 + 2, 5 + 2.
    plain = simulate_closed_loop(spec(4, 4, 4), 2, ConstantLatency(), num_requests=4)
    lagged = simulate_closed_loop(_lagged(2, 4, 4, 4), 2, ConstantLatency(), num_requests=4)
    assert plain.ttft_ms == pytest.approx((1 + 5 + 5 + 5) / 4)
    assert lagged.ttft_ms == pytest.approx((1 + 5 + 7 + 7) / 4)
    # The wait is the client's, outside the engine: the run itself is the same.
    assert lagged.steps == plain.steps and lagged.duration_ms == plain.duration_ms
    assert lagged.tpot_ms == plain.tpot_ms


def test_an_idle_engine_takes_the_request_at_once() -> None:
    # One client: every successor finds the engine idle, whatever the scheduling lead.
    plain = simulate_closed_loop(spec(8, 8, 4), 1, ConstantLatency(), num_requests=5)
    lagged = simulate_closed_loop(_lagged(2, 8, 8, 4), 1, ConstantLatency(), num_requests=5)
    assert lagged.ttft_ms == plain.ttft_ms


def test_lock_step_waves_that_leave_the_engine_idle_do_not_wait() -> None:
    # Four clients prefilled together finish together: nothing runs when they re-submit.
    plain = simulate_closed_loop(spec(8, 64, 4), 4, ConstantLatency(), num_requests=12)
    lagged = simulate_closed_loop(_lagged(2, 8, 64, 4), 4, ConstantLatency(), num_requests=12)
    assert plain.ttft_ms == pytest.approx(1.0)
    assert lagged.ttft_ms == plain.ttft_ms


def test_timed_arrivals_do_not_take_the_closed_loop_wait() -> None:
    plain = simulate_poisson(spec(8, 8, 4), 200.0, LinearLatency(), num_requests=40)
    lagged = simulate_poisson(_lagged(2, 8, 8, 4), 200.0, LinearLatency(), num_requests=40)
    assert lagged.ttft_ms == plain.ttft_ms


@settings(max_examples=40, deadline=None)
@given(
    clients=st.integers(2, 12),
    steps=st.integers(1, MAX_RESUBMIT_STEPS),
    prompt=st.sampled_from((4, 16, 64)),
    budget=st.sampled_from((4, 16, 64, 256)),
    output=st.integers(2, 12),
    scheduler=st.sampled_from(("decode_first_with_slack", "vllm", "sglang")),
)
def test_the_wait_is_at_most_the_steps_mean_duration(
    clients: int, steps: int, prompt: int, budget: int, output: int, scheduler: str
) -> None:
    """Each request waits 0 or ``steps`` mean steps, so the mean TTFT grows by at most that
    much, never falls, and nothing else moves."""
    policy = make_scheduler(scheduler)
    budget = max(budget, prompt) if scheduler == "sglang" else budget
    base = spec(prompt, budget, output)
    requests = 3 * clients
    plain = simulate_closed_loop(base, clients, LinearLatency(), policy, num_requests=requests)
    lagged = simulate_closed_loop(
        dataclasses.replace(base, resubmit_steps=steps),
        clients,
        LinearLatency(),
        policy,
        num_requests=requests,
    )
    mean_step_ms = plain.duration_ms / plain.steps
    assert plain.ttft_ms <= lagged.ttft_ms <= plain.ttft_ms + steps * mean_step_ms + 1e-9
    assert (lagged.tpot_ms, lagged.steps, lagged.duration_ms) == (
        plain.tpot_ms,
        plain.steps,
        plain.duration_ms,
    )


def test_engine_profiles_state_their_front_end() -> None:
    for name in ("vllm", "sglang", "trtllm"):
        profile = PROFILES[name]
        assert profile.resubmit_steps == OVERLAP_RESUBMIT_STEPS == 2
        # The prompt's tokenization: 2 us per token, 16.4 ms for an 8,192-token prompt; vLLM's
        # API server first holds the prompt for its micro-batching tokenizer's 2 ms window.
        window_ms = VLLM_TOKENIZER_BATCH_WAIT_MS if name == "vllm" else 0.0
        assert profile.request_frontend_ms == window_ms
        assert profile.frontend_ms(8192) == pytest.approx(window_ms + FRONTEND_US_PER_TOKEN * 8.192)
    assert PROFILES["vllm"].frontend_ms(8192) == pytest.approx(2.0 + 16.384)
    assert PROFILES["sglang"].frontend_ms(8192) == pytest.approx(16.384)
    # ... and it reaches the client's TTFT through the workload the profile builds.
    assert PROFILES["vllm"].spec_terms(1024)["ttft_overhead_ms"] == pytest.approx(2.0 + 2.048)
    # The RFC's own workload (msmodeling) keeps neither.
    assert PROFILES["msmodeling"].frontend_ms(8192) == 0.0
    assert PROFILES["msmodeling"].resubmit_steps == 0


def test_resubmit_steps_out_of_range_is_refused() -> None:
    with pytest.raises(InvalidParameterError, match="resubmit_steps"):
        dataclasses.replace(spec(8, 8, 4), resubmit_steps=MAX_RESUBMIT_STEPS + 1)
    with pytest.raises(InvalidParameterError, match="resubmit_steps"):
        dataclasses.replace(spec(8, 8, 4), resubmit_steps=-1)
