"""A workload's length range (``length_range_ratio``, vLLM ``--random-range-ratio``): its
classes, its validation, and the engine loop running its outputs as length classes."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core import limits
from app.core.errors import InvalidParameterError
from app.core.scheduler import make_scheduler
from app.core.scheduler.factory import SCHEDULERS
from app.core.spec import WorkloadSpec, length_classes
from app.core.workload import simulate_closed_loop
from app.core.workload.closed_loop import plan_closed_loop

from .fakes import ConstantLatency


def _spec(ratio: float, input_length: int = 1024, output_length: int = 1024) -> WorkloadSpec:
    return WorkloadSpec(
        input_length=input_length,
        output_length=output_length,
        max_batched_tokens=8192,
        length_range_ratio=ratio,
    )


@given(st.integers(1, 200_000), st.floats(0.01, 0.99))
def test_the_classes_are_the_quantiles_of_vllms_range(length: int, ratio: float) -> None:
    # benchmark_serving's random dataset: np.random.randint(int(L * r), L + 1).
    low = max(1, int(length * ratio))
    classes = length_classes(length, ratio)
    assert len(classes) == limits.LENGTH_CLASSES
    assert list(classes) == sorted(classes)
    assert low <= classes[0] and classes[-1] <= length
    # Each class sits at its midpoint quantile: their mean is the range's, to a token.
    assert abs(sum(classes) / len(classes) - (low + length) / 2) <= 1.0


def test_fixed_lengths_are_one_class_and_the_default() -> None:
    assert length_classes(1024, 1.0) == (1024,)
    ranged, fixed = _spec(0.8), _spec(1.0)
    assert fixed == WorkloadSpec(input_length=1024, output_length=1024, max_batched_tokens=8192)
    assert fixed.output_classes == (1024,)
    assert (fixed.mean_input_length, fixed.mean_output_length) == (1024, 1024)
    # 0.8: lengths in [819, 1024], means 921.5; the classes: 831, 857, ..., 1012.
    assert ranged.output_classes == (831, 857, 883, 909, 934, 960, 986, 1012)
    assert (ranged.mean_input_length, ranged.mean_output_length) == (922, 922)
    assert ranged.effective_input_length == 922  # every prompt prefills the range's mean
    assert ranged.decode_seq_len == 922 + 922 // 2 + 1


@pytest.mark.parametrize("bad", [0, 0.0, -0.5, 1.0001, 2, math.nan, math.inf, True, "0.8", None])
def test_a_ratio_outside_0_1_is_refused(bad: Any) -> None:
    with pytest.raises(InvalidParameterError, match="length_range_ratio"):
        _spec(bad)


def test_one_token_outputs_stay_one_token() -> None:
    data = _spec(0.5, output_length=1)
    assert data.output_classes == (1,) * limits.LENGTH_CLASSES
    result = simulate_closed_loop(data, 3, ConstantLatency())
    assert result.tpot_ms == 0.0


cases = st.fixed_dictionaries(
    {
        "input": st.integers(1, 3000),
        "output": st.integers(1, 300),
        "ratio": st.sampled_from((0.1, 0.5, 0.8, 0.95)),
        "clients": st.integers(1, 40),
        "per_client": st.integers(1, 6),
        "scheduler": st.sampled_from(sorted(SCHEDULERS)),
    }
)


@settings(max_examples=150, deadline=None)
@given(cases)
def test_every_request_decodes_its_own_class_once(s: dict[str, Any]) -> None:
    data = WorkloadSpec(
        input_length=s["input"],
        output_length=s["output"],
        max_batched_tokens=1024,
        length_range_ratio=s["ratio"],
    )
    clients = s["clients"]
    sent = clients * s["per_client"]
    plan = plan_closed_loop(data, clients, make_scheduler(s["scheduler"]), num_requests=sent)
    finish = plan.records.all_finish()
    assert sum(record[0] for record in finish) == sent  # every request finishes once
    # The requests take the classes in turn, in the order they reach decode.
    k = len(data.output_classes)
    want: dict[int, int] = {}
    for i, length in enumerate(data.output_classes):
        want[length] = want.get(length, 0) + sent // k + (1 if i < sent % k else 0)
    got: dict[int, int] = {}
    for count, _, _, tokens in finish:
        got[tokens + 1] = got.get(tokens + 1, 0) + count
    assert got == {length: n for length, n in want.items() if n}
    # Output tokens emitted by the runs = those the finished requests' classes hold.
    emitted = plan.engine.run_total(lambda run: run.first_tokens + run.d_step * run.repeat)
    assert emitted == sum(count * (tokens + 1) for count, _, _, tokens in finish)


def test_each_request_is_timed_over_its_own_output() -> None:
    """One client, steps of 1 ms: every request decodes one token a step, so its TPOT is 1 ms
    whatever its class (its decode time over its own tokens, not the nominal length's)."""
    data = _spec(0.5, input_length=100, output_length=200)
    result = simulate_closed_loop(data, 1, ConstantLatency(), num_requests=16)
    assert result.tpot_ms == pytest.approx(1.0)
    [(tpot_ms, requests)] = result.tpot_distribution_ms
    assert tpot_ms == pytest.approx(1.0) and requests == 16
    # Fixed lengths would have decoded 199 tokens a request; the classes decode their mean.
    steps_per_request = 1 + (data.mean_output_length - 1)
    assert result.steps == pytest.approx(16 * steps_per_request, abs=16)


def test_a_range_desynchronises_a_closed_loop() -> None:
    """Fixed lengths keep the clients' requests in one group through every round; a range
    splits each wave by output length, so the finishes spread over several steps."""
    fixed = plan_closed_loop(_spec(1.0), 8, make_scheduler("vllm"))
    ranged = plan_closed_loop(_spec(0.8), 8, make_scheduler("vllm"))
    assert {r[2] for r in fixed.records.all_finish()} < {r[2] for r in ranged.records.all_finish()}
    finishing = [run.finished for run in ranged.engine.runs if run.finished]
    assert max(finishing) < 8 and len(finishing) > len(
        [run for run in fixed.engine.runs if run.finished]
    )
