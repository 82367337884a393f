"""The Scenario: a frozen, hashable, JSON-serialisable resolved question with a stable key."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.core.catalog import get_device, get_model, parse_quantization
from app.core.errors import InvalidParameterError
from app.core.parallel import ParallelLayout
from app.core.profiles import get_profile
from app.core.scenario import (
    ResolvedDeployment,
    Scenario,
    SchedulerChoice,
    SearchSpace,
    ServingRun,
    canonical,
)
from app.core.scheduler import make_scheduler
from app.core.spec import WorkloadSpec

ROOT = Path(__file__).resolve().parents[2]


def scenario(**changes: object) -> Scenario:
    profile = get_profile("vllm")
    deployment = ResolvedDeployment(
        model=get_model("Qwen/Qwen3-32B"),
        device=get_device("NVIDIA_H200_SXM_141G"),
        quantization=parse_quantization("FP8", None),
        reserved_memory_gb=None,
        num_mtp_tokens=0,
        mtp_acceptance_rates=(),
        profile=profile,
    )
    base = Scenario(
        operation="simulate",
        deployment=deployment,
        spec=WorkloadSpec(input_length=2048, output_length=128, max_batched_tokens=8192),
        serving=ServingRun(workload="closed_loop", window="benchmark", concurrency=560),
        scheduler=SchedulerChoice.of(make_scheduler("vllm", max_num_seqs=1024)),
        layout=ParallelLayout(tp=2),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_a_scenario_is_frozen_hashable_and_plain_json() -> None:
    one = scenario()
    assert hash(one) == hash(scenario()) and one == scenario()
    assert {one, scenario()} == {one}
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.operation = "optimize"  # type: ignore[misc]
    text = json.dumps(one.to_dict(), allow_nan=False)
    assert json.loads(text) == one.to_dict()
    plain: Any = json.loads(text)
    assert plain["deployment"]["quantization"]["linear"] == "FP8"  # enums by value


def test_the_key_follows_every_value() -> None:
    one = scenario()
    assert one.key.startswith("scenario:") and len(one.key) == len("scenario:") + 64
    assert scenario().key == one.key
    others = [
        scenario(layout=ParallelLayout(tp=4)),
        scenario(serving=ServingRun(workload="burst", window="benchmark", concurrency=560)),
        scenario(scheduler=SchedulerChoice.of(make_scheduler("vllm", max_num_seqs=512))),
        scenario(spec=WorkloadSpec(input_length=2048, output_length=128, max_batched_tokens=2048)),
    ]
    assert len({one.key, *(o.key for o in others)}) == 1 + len(others)


def test_the_key_is_stable_across_processes() -> None:
    # Sets are written sorted and keys sorted: another interpreter (another hash seed)
    # computes the same key.
    code = "from tests.unit.test_scenario import scenario; print(scenario().key)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "123"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == scenario().key


def test_a_scheduler_choice_rebuilds_the_policy() -> None:
    for policy in (
        make_scheduler("vllm", max_num_seqs=64, mixed_latency="sum"),
        make_scheduler("decode_first_with_slack", slack_ratio=1.5, prefill_order="fifo"),
        make_scheduler("sglang"),
    ):
        choice = SchedulerChoice.of(policy)
        assert choice.build().describe() == policy.describe()
        assert SchedulerChoice.of(choice.build()) == choice


def test_a_scenario_has_a_layout_or_a_search_space() -> None:
    with pytest.raises(InvalidParameterError):
        scenario(layout=None)
    space = SearchSpace(mode="agg", num_devices=8, tp_sizes=None, ep_sizes=None, max_batch_size=64)
    with pytest.raises(InvalidParameterError):
        scenario(search=space)
    assert scenario(operation="optimize", layout=None, search=space).search == space


def test_canonical_refuses_what_json_cannot_hold() -> None:
    assert canonical(frozenset({"b", "a"})) == ["a", "b"]
    with pytest.raises(TypeError):
        canonical(object())
