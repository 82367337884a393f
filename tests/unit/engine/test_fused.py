"""``mixed_latency="fused"``: a mixed step is one forward (a ``MixedShape``) the model costs.

The per-request reference (``fakes.reference_simulation``) covers fused steps in
``test_workload.test_engine_policies_match_per_request_reference``; these tests pin the plan's
shapes, the replay wiring, the timeline and the rejection of models that cannot cost it.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.cost import ForwardShape, MixedShape
from app.core.engine import SimulationPlan, plan_serving, simulate
from app.core.errors import UnsupportedError
from app.core.optimizer import Deployment, optimize_agg
from app.core.parallel import ParallelLayout
from app.core.scheduler import MixedLatency, make_scheduler
from app.core.spec import WorkloadSpec
from app.core.workload import plan_closed_loop, simulate_serving

from .fakes import ConstantLatency, LinearLatency


class CombinedAs(LinearLatency):
    """A model whose fused forward costs exactly ``max`` or ``sum`` of its two parts."""

    def __init__(self, rule: str) -> None:
        super().__init__(base_ms=1.0, per_token_ms=0.01, per_context_ms=0.001)
        self.rule = rule

    def mixed_ms(self, shape: MixedShape) -> float:
        self.calls[shape] += 1
        p, d = shape.prefill, shape.decode
        parts = (
            self._cost(p.concurrency, p.query_len, p.seq_len),
            self._cost(d.concurrency, d.query_len, d.seq_len),
        )
        return max(parts) if self.rule == "max" else sum(parts)


class NoMixedForward(ConstantLatency):
    """A serving model (latency and memory) without ``mixed_ms``."""

    def memory_left_gb(
        self, is_decode: bool, concurrency: int, query_len: int, seq_len: int
    ) -> float:
        return 1e9


def test_a_mixed_step_is_one_mixed_shape() -> None:
    data = WorkloadSpec(input_length=4096, output_length=64, max_batched_tokens=1024)
    fused = plan_serving(data, 16, make_scheduler("vllm", mixed_latency="fused"))
    overlapped = plan_serving(data, 16, make_scheduler("vllm"))
    assert isinstance(fused, SimulationPlan) and isinstance(overlapped, SimulationPlan)
    assert fused.runs == overlapped.runs  # the rule changes costs, never decisions
    mixed = [s for s in fused.shapes if isinstance(s, MixedShape)]
    assert mixed and all(s.prefill.concurrency and s.decode.concurrency for s in mixed)
    mixed_runs = [run for run in fused.runs if run.p_step and run.d_step]
    pure = [s for s in fused.shapes if isinstance(s, ForwardShape)]
    # Decode batches that only ever run fused are never asked for on their own.
    alone = {run.d_step for run in fused.runs if run.d_step and not run.p_step}
    assert {s.concurrency for s in pure if s.is_decode} == alone
    assert {s.decode.concurrency for s in mixed} == {run.d_step for run in mixed_runs}
    assert not any(isinstance(s, MixedShape) for s in overlapped.shapes)


def test_each_fused_shape_is_evaluated_once() -> None:
    latency = LinearLatency()
    scheduler = make_scheduler("sglang_mixed_chunk", mixed_latency="fused")
    data = WorkloadSpec(input_length=4096, output_length=128, max_batched_tokens=1024)
    plan = plan_closed_loop(data, 32, scheduler)
    result = simulate_serving(data, 32, latency, scheduler)
    assert set(latency.calls) == set(plan.shapes)
    assert max(latency.calls.values()) == 1
    assert result.forward_evaluations == len(plan.shapes)
    assert any(isinstance(s, MixedShape) for s in latency.calls)


scenario = st.fixed_dictionaries(
    {
        "policy": st.sampled_from(["vllm", "sglang_mixed_chunk", "sglang"]),
        "rule": st.sampled_from(["max", "sum"]),
        "effective": st.integers(2, 60),
        "budget": st.integers(1, 24),
        "clients": st.integers(1, 10),
        "output": st.integers(1, 10),
        "closed_loop": st.booleans(),
        "cap": st.one_of(st.none(), st.integers(1, 8)),
    }
)


@settings(max_examples=200, deadline=None)
@given(scenario)
def test_fused_matches_max_and_sum_when_the_forward_costs_that(s: dict[str, Any]) -> None:
    """Replay wiring: a model whose fused forward is max (sum) of the parts gives exactly the
    ``max`` (``sum``) results, burst and closed loop, with the timeline recorded or not."""
    rule: MixedLatency = "max" if s["rule"] == "max" else "sum"
    data = WorkloadSpec(
        input_length=s["effective"], output_length=s["output"], max_batched_tokens=s["budget"]
    )

    def run(mixed: MixedLatency, record: bool) -> tuple[float, float, float, int]:
        scheduler = make_scheduler(s["policy"], mixed_latency=mixed, max_num_seqs=s["cap"])
        latency = CombinedAs(rule)
        if s["closed_loop"]:
            got = simulate_serving(
                data, s["clients"], latency, scheduler, num_requests=3 * s["clients"]
            )
            return got.ttft_ms, got.tpot_ms, got.duration_ms, got.steps
        burst = simulate(
            data, s["clients"], latency, scheduler, force_simulation=True, record_steps=record
        )
        return burst.ttft_ms, burst.tpot_ms, burst.makespan_ms, burst.steps

    for record in (False, True):
        assert run("fused", record) == pytest.approx(run(rule, record), rel=1e-12, abs=1e-12)


def test_fused_steps_in_the_timeline() -> None:
    latency = LinearLatency(base_ms=1.0, per_token_ms=0.01)
    scheduler = make_scheduler("vllm", mixed_latency="fused")
    data = WorkloadSpec(input_length=4096, output_length=16, max_batched_tokens=1024)
    result = simulate(data, 8, latency, scheduler, record_steps=True)
    assert result.timeline is not None
    fused = [step for step in result.timeline if step.fused]
    assert fused
    for step in result.timeline:
        assert step.fused == (step.p_step > 0 and step.d_step > 0)
        if step.fused:
            assert step.prefill_ms == step.decode_ms == step.step_ms
            assert step.prefill_shape is not None and step.decode_shape is not None
            assert step.step_ms == latency.mixed_ms(
                MixedShape(prefill=step.prefill_shape, decode=step.decode_shape)
            )


def test_a_model_without_mixed_forwards_is_rejected_for_fused() -> None:
    burst = WorkloadSpec(input_length=4096, output_length=16, max_batched_tokens=1024)
    with pytest.raises(UnsupportedError, match="analytic runner"):
        simulate(burst, 8, ConstantLatency(), make_scheduler("vllm", mixed_latency="fused"))
    # No mixed step, nothing to fuse: SGLang's default policy never mixes.
    sglang = make_scheduler("sglang", mixed_latency="fused")
    assert simulate(burst, 8, ConstantLatency(), sglang).steps > 0
    # Through the optimizer's memo too (a closed-loop search over a fake without mixed_ms).
    data = WorkloadSpec(
        input_length=4096, output_length=16, max_batched_tokens=1024, tpot_limit_ms=1e6
    )
    with pytest.raises(UnsupportedError, match="NoMixedForward"):
        optimize_agg(
            data,
            [ParallelLayout()],
            lambda layout: NoMixedForward(),
            Deployment(model="fake", device="FAKE"),
            scheduler=make_scheduler("vllm", mixed_latency="fused"),
            workload="closed_loop",
            max_batch_size=8,
        )


def test_the_optimizer_searches_with_fused_steps() -> None:
    data = WorkloadSpec(
        input_length=4096, output_length=64, max_batched_tokens=1024, tpot_limit_ms=1e6
    )

    def best(mixed: MixedLatency) -> float:
        found = optimize_agg(
            data,
            [ParallelLayout()],
            lambda layout: LinearLatency(base_ms=2.0, per_token_ms=0.01),
            Deployment(model="fake", device="FAKE"),
            scheduler=make_scheduler("vllm", mixed_latency=mixed),
            max_batch_size=64,
        )
        assert found.best is not None
        return found.best.throughput_tokens_s

    # One forward pays the fixed cost once: between the overlapped and the serial step.
    assert best("max") >= best("fused") >= best("sum")
