"""RFC answers the review found unpinned (issue 11): TPOT at O == 1, the burst's request
throughput, and how a one-chunk prompt differs between the time simulation and the closed form.

Sections cited: the RFC is /work/shared/spec/rfc_chunked_prefill_support_zh.txt (§3.1.5 "混部模式
TPOT 与吞吐估算"), the digest /work/shared/spec/DIGEST.md ("Terms", "Time simulation",
"Single chunk").
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.engine import CLOSED_FORM_WAVES, TIME_SIMULATION, simulate
from app.core.scheduler import make_scheduler
from app.core.workload import simulate_closed_loop, simulate_poisson

from .fakes import ConstantLatency, spec


class DyadicLatency(ConstantLatency):
    """Latencies that are sums of powers of two, so every sum in a replay is exact and the
    relations below hold with ``==``, not approximately."""

    def prefill_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        super().prefill_ms(concurrency, query_len, seq_len)
        return 0.25 + 0.5 * concurrency

    def decode_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        super().decode_ms(concurrency, query_len, seq_len)
        return 1.0 + 0.125 * concurrency


class WaveLatency(ConstantLatency):
    """The DIGEST's "Single chunk" example: prefill of 2 requests 10 ms, of 1 request 4 ms,
    every decode step 2 ms."""

    def prefill_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        super().prefill_ms(concurrency, query_len, seq_len)
        return {2: 10.0, 1: 4.0}[concurrency]

    def decode_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        super().decode_ms(concurrency, query_len, seq_len)
        return 2.0


# --------------------------------------------------------------------------------------------
# TPOT = 0 at output length 1


@pytest.mark.parametrize("effective", [8, 30])  # one chunk (forced) and three chunks
def test_tpot_is_zero_when_each_request_emits_one_token(effective: int) -> None:
    """RFC §3.1.5: ``tpot = 0 if R == 0`` (R = O - 1 decode tokens); DIGEST "Terms": TPOT is
    0 when O == 1. The first token comes with the last chunk, nothing decodes after it."""
    data = spec(effective, 10, 1)
    burst = simulate(data, 4, DyadicLatency(), force_simulation=True)
    assert burst.method == TIME_SIMULATION
    assert burst.tpot_ms == 0.0
    assert burst.makespan_ms > 0 and burst.ttft_ms > 0
    loop = simulate_closed_loop(data, 4, DyadicLatency(), num_requests=12)
    assert loop.tpot_ms == 0.0 and loop.e2e_ms == loop.ttft_ms
    poisson = simulate_poisson(data, 100.0, DyadicLatency(), num_requests=20, seed=1)
    assert poisson.tpot_ms == 0.0 and poisson.e2e_ms == poisson.ttft_ms


def test_closed_form_keeps_its_own_tpot_formula_at_output_length_one() -> None:
    """DIGEST "Single chunk": the compatibility path defines ``tpot = e2e / O`` with
    ``e2e = ttft + Ld * O``, so at O == 1 it is TTFT plus one decode step, not 0. The RFC's
    ``tpot = 0 if R == 0`` belongs to the time simulation (§3.1.5); force it for O == 1."""
    data = spec(8, 10, 1)
    waves = simulate(data, 4, DyadicLatency())
    assert waves.method == CLOSED_FORM_WAVES
    decode_ms = 1.0 + 0.125 * 4
    assert waves.tpot_ms == waves.makespan_ms == waves.ttft_ms + decode_ms


# --------------------------------------------------------------------------------------------
# request throughput on the burst path


def test_burst_request_throughput_is_requests_over_makespan_known_answer() -> None:
    """RFC §3.1.5: ``request_throughput = 1000 * N / makespan``, ``output_throughput =
    1000 * N * O / makespan``. The DIGEST example forced through the time simulation (see
    :func:`test_one_chunk_with_several_waves_known_answer`) ends at 32 ms: 5 requests ->
    156.25 req/s and 5 * 5 tokens -> 781.25 tokens/s."""
    result = simulate(spec(10, 20, 5), 5, WaveLatency(), force_simulation=True)
    assert result.makespan_ms == 32.0
    assert result.request_throughput == 156.25
    assert result.throughput_tokens_s == 781.25


@settings(max_examples=100, deadline=None)
@given(
    effective=st.integers(1, 64),
    budget=st.integers(1, 32),
    n=st.integers(1, 24),
    o=st.integers(1, 8),
    policy=st.sampled_from(["decode_first_with_slack", "vllm", "sglang"]),
    force=st.booleans(),
)
def test_burst_request_throughput_is_requests_over_makespan(
    effective: int, budget: int, n: int, o: int, policy: str, force: bool
) -> None:
    """RFC §3.1.5 (time simulation) and DIGEST "Single chunk" (``e2e`` is the closed form's
    makespan): request throughput is N per makespan, output throughput O times that."""
    result = simulate(
        spec(effective, budget, o),
        n,
        DyadicLatency(),
        make_scheduler(policy),
        force_simulation=force,
    )
    assert result.request_throughput == 1000.0 * n / result.makespan_ms
    assert result.throughput_tokens_s == 1000.0 * n * o / result.makespan_ms


# --------------------------------------------------------------------------------------------
# one chunk: time simulation vs closed-form waves


@settings(max_examples=150, deadline=None)
@given(
    effective=st.integers(1, 64),
    n=st.integers(1, 16),
    o=st.integers(1, 12),
    spare=st.integers(0, 64),
)
def test_one_wave_differs_from_the_closed_form_by_exactly_one_decode_step(
    effective: int, n: int, o: int, spare: int
) -> None:
    """A one-chunk prompt whose N requests fit one prefill wave (``B >= N * E``).

    Both methods prefill everyone in one forward of N requests, so TTFT is equal. They differ
    in what follows (DIGEST "Time simulation" vs "Single chunk"): the time simulation emits the
    first token with the prefill step and decodes the other ``O - 1`` tokens, while the closed
    form charges ``O`` decode steps after TTFT (``e2e = ttft + Ld * O``). So the closed form's
    makespan is exactly one decode step of the whole batch (``Ld``) longer, it counts one more
    step, and its TPOT is ``e2e / O`` where the simulation's is ``Ld`` (0 when O == 1).
    """
    budget = n * effective + spare
    data = spec(effective, budget, o)
    waves = simulate(data, n, DyadicLatency())
    forced = simulate(data, n, DyadicLatency(), force_simulation=True)
    assert (waves.method, forced.method) == (CLOSED_FORM_WAVES, TIME_SIMULATION)
    decode_ms = 1.0 + 0.125 * n  # Ld: one decode step of the N requests
    assert forced.ttft_ms == waves.ttft_ms == 0.25 + 0.5 * n
    assert waves.makespan_ms - forced.makespan_ms == decode_ms
    assert waves.steps == forced.steps + 1
    assert forced.tpot_ms == (decode_ms if o > 1 else 0.0)
    assert waves.tpot_ms == waves.makespan_ms / o


def test_one_chunk_with_several_waves_known_answer() -> None:
    """The DIGEST "Single chunk" example (E=10, O=5, C=5, B=20; Lp=10, Lr=4, Ld=2): the
    closed form gives TTFT 16.8, TPOT 5.36 (e2e 26.8). Forced through the time simulation
    (decode first, slack 1.15: a step admits floor((23 - decodes) / 10) prefills):

    - t=10: 2 requests prefill (first tokens at 10);
    - t=20: 2 prefill beside 2 decodes (max(10, 2)); first tokens at 20;
    - t=24: the last one prefills beside 4 decodes (max(4, 2)); first token at 24;
    - t=26, 28, 30, 32: decode-only steps; the groups finish at 28, 30 and 32.

    TTFT (2*10 + 2*20 + 24) / 5 = 16.8, the same as the closed form here; TPOT
    (2*18 + 2*10 + 8) / 5 / 4 = 3.2 and makespan 32: decoding overlaps the later waves, and the
    closed form's wave formula does not model the decode steps between waves.
    """
    data = spec(10, 20, 5)
    waves = simulate(data, 5, WaveLatency())
    assert (waves.ttft_ms, waves.tpot_ms, waves.makespan_ms) == pytest.approx((16.8, 5.36, 26.8))
    forced = simulate(data, 5, WaveLatency(), force_simulation=True)
    assert forced.ttft_ms == pytest.approx(16.8)
    assert forced.tpot_ms == pytest.approx(3.2)
    assert forced.makespan_ms == 32.0
    assert forced.steps == 7
