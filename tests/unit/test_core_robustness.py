"""The core never raises anything but its domain errors (``app/core/errors.py``).

Hypothesis feeds the public entry points of ``app.core`` hostile values -- wrong types, bools
for ints, NaN, infinities, negatives, zero, values past every bound, unknown names -- mixed with
small valid ones (so the simulation and the optimizer really run, in bounded time). Each call
either returns or raises a :class:`ChunkwiseError`; anything else (``TypeError``,
``ZeroDivisionError``, ``OverflowError``, ...) would reach the API as a 500.

The catalog parsers (``model_from_config``, ``device_from_dict``, ``get_model`` on paths) are
held to the same contract on malformed input.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.catalog import get_device, get_model
from app.core.catalog.devices import device_from_dict
from app.core.catalog.models import model_from_config
from app.core.catalog.quantization import parse_quantization
from app.core.chunking import effective_input_length, prefill_chunk_plan
from app.core.cost import ForwardShape
from app.core.engine import simulate
from app.core.errors import ChunkwiseError
from app.core.optimizer import Deployment, enumerate_layouts, optimize_agg
from app.core.parallel import ParallelLayout
from app.core.runner import ModelRunner
from app.core.scheduler import make_scheduler
from app.core.spec import WorkloadSpec
from tests.unit.engine.fakes import LinearLatency

CONFIGS = Path(__file__).resolve().parents[2] / "app/core/catalog/model_configs"
BOUNDED = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

#: Values a numeric parameter must reject (or accept only when in range). The core checks its
#: numeric arguments as ``object`` (``isinstance``), so strings and ``None`` belong here too;
#: a string parameter gets :data:`junk_name`. Containers of the wrong kind (a list where a
#: name belongs) are type errors the wire schemas reject first, and are not generated.
junk = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=4),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, -(2**63), 2**63, 10**30, float("nan"), float("inf"), 1.5]),
)
junk_name = st.one_of(st.none(), st.text(max_size=12), st.sampled_from(["", " ", "FIFO", "x"]))


def small_int(lo: int, hi: int) -> st.SearchStrategy[Any]:
    """Mostly a valid small int, sometimes junk."""
    return st.one_of(st.integers(min_value=lo, max_value=hi), junk)


def rate() -> st.SearchStrategy[Any]:
    return st.one_of(st.floats(min_value=-0.5, max_value=1.5), junk)


def only_domain_errors(call: Callable[[], object]) -> None:
    with contextlib.suppress(ChunkwiseError):
        call()


@BOUNDED
@given(length=small_int(1, 10**7), hit=rate(), budget=small_int(1, 10**6))
def test_chunk_plan(length: Any, hit: Any, budget: Any) -> None:
    def call() -> None:
        effective = effective_input_length(length, hit)
        if isinstance(budget, int) and budget > 0 and effective > 64 * budget:
            return  # a valid but long plan: keep the example cheap
        prefill_chunk_plan(effective, budget)

    only_domain_errors(call)


@BOUNDED
@given(
    input_length=small_int(1, 20_000),
    output_length=small_int(1, 256),
    budget=small_int(256, 8192),
    hit=rate(),
    ttft=st.one_of(st.none(), st.floats(min_value=-1, max_value=1e6), junk),
    tpot=st.one_of(st.none(), st.floats(min_value=-1, max_value=1e6), junk),
    mtp=small_int(0, 3),
    rates=st.one_of(st.lists(rate(), max_size=4).map(tuple), junk),
    devices=small_int(1, 16),
)
def test_optimizer_data(
    input_length: Any,
    output_length: Any,
    budget: Any,
    hit: Any,
    ttft: Any,
    tpot: Any,
    mtp: Any,
    rates: Any,
    devices: Any,
) -> None:
    only_domain_errors(
        lambda: WorkloadSpec(
            input_length=input_length,
            output_length=output_length,
            max_batched_tokens=budget,
            prefix_cache_hit_rate=hit,
            ttft_limit_ms=ttft,
            tpot_limit_ms=tpot,
            num_mtp_tokens=mtp,
            mtp_acceptance_rates=rates,
            num_devices=devices,
        )
    )


schedulers = st.fixed_dictionaries(
    {"name": st.one_of(st.sampled_from(["decode_first_with_slack", "vllm", "sglang"]), junk_name)},
    optional={
        "slack_ratio": st.one_of(st.floats(min_value=0, max_value=5), junk),
        "prefill_order": st.one_of(st.sampled_from(["fifo", "continue_first"]), junk_name),
        "max_num_seqs": small_int(1, 64),
        "mixed_latency": st.one_of(st.sampled_from(["max", "sum"]), junk_name),
    },
)


@BOUNDED
@given(options=schedulers)
def test_make_scheduler(options: dict[str, Any]) -> None:
    options = dict(options)
    name = options.pop("name")
    only_domain_errors(lambda: make_scheduler(name, **options))


@BOUNDED
@given(
    effective=st.integers(min_value=1, max_value=4096),
    budget=st.integers(min_value=64, max_value=4096),
    concurrency=small_int(1, 64),
    output_length=small_int(1, 128),
    step_budget=small_int(1, 4096),
    options=schedulers,
    mtp=small_int(0, 2),
    force=st.booleans(),
)
def test_simulate(
    effective: int,
    budget: int,
    concurrency: Any,
    output_length: Any,
    step_budget: Any,
    options: dict[str, Any],
    mtp: Any,
    force: bool,
) -> None:
    def call() -> None:
        options_ = dict(options)
        scheduler = make_scheduler(options_.pop("name"), **options_)
        # The spec takes the place of (chunk plan, lengths, budget): the plan is its own.
        rates = (0.5,) * mtp if type(mtp) is int and 0 < mtp <= 16 else ()
        data = WorkloadSpec(
            input_length=effective,
            output_length=output_length,
            max_batched_tokens=step_budget,
            num_mtp_tokens=mtp,
            mtp_acceptance_rates=rates,
        )
        simulate(data, concurrency, LinearLatency(), scheduler, force_simulation=force)

    only_domain_errors(call)


@BOUNDED
@given(
    tp=small_int(1, 16),
    dp=small_int(1, 16),
    ep=small_int(1, 16),
    pp=small_int(1, 4),
    devices=small_int(1, 64),
    tp_sizes=st.one_of(st.none(), st.lists(small_int(1, 16), max_size=4)),
    ep_sizes=st.one_of(st.none(), st.lists(small_int(1, 16), max_size=4)),
)
def test_layouts(
    tp: Any, dp: Any, ep: Any, pp: Any, devices: Any, tp_sizes: Any, ep_sizes: Any
) -> None:
    only_domain_errors(lambda: ParallelLayout(tp=tp, dp=dp, ep=ep, pp=pp))
    only_domain_errors(lambda: enumerate_layouts(devices, tp_sizes, ep_sizes))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    input_length=small_int(1, 8192),
    output_length=small_int(1, 64),
    budget=small_int(512, 4096),
    tpot=st.one_of(st.none(), st.floats(min_value=0.1, max_value=100)),
    max_batch_size=small_int(1, 64),
    workload=st.one_of(st.sampled_from(["burst", "closed_loop"]), junk_name),
    window=st.one_of(st.sampled_from(["benchmark", "steady_state"]), junk_name),
    requests_per_client=small_int(1, 3),
)
def test_optimize_agg(
    input_length: Any,
    output_length: Any,
    budget: Any,
    tpot: Any,
    max_batch_size: Any,
    workload: Any,
    window: Any,
    requests_per_client: Any,
) -> None:
    def call() -> None:
        data = WorkloadSpec(
            input_length=input_length,
            output_length=output_length,
            max_batched_tokens=budget,
            tpot_limit_ms=tpot,
            num_devices=2,
        )
        optimize_agg(
            data,
            enumerate_layouts(2),
            lambda layout: LinearLatency(memory_gb_per_token=1e-4, memory_gb=30.0),
            Deployment(model="fake", device="FAKE", quantization="bf16"),
            max_batch_size=max_batch_size,
            workload=workload,
            window=window,
            requests_per_client=requests_per_client,
        )

    only_domain_errors(call)


@BOUNDED
@given(name=st.one_of(st.text(max_size=30), st.sampled_from(["Qwen/Qwen3-32B", "qwen3-0.6b"])))
def test_catalog_lookups(name: str) -> None:
    # get_model also reads local paths (CLI), "~user" ones included.
    only_domain_errors(lambda: get_model(name))
    only_domain_errors(lambda: get_device(name))


def test_get_model_with_an_unknown_home_directory() -> None:
    only_domain_errors(lambda: get_model("~nosuchuser-chunkwise/config.json"))


@BOUNDED
@given(
    linear=st.one_of(st.sampled_from(["FP8", "W8A8_DYNAMIC", "MXFP4"]), junk_name),
    attention=st.one_of(st.sampled_from(["FP8", "INT8"]), junk_name),
)
def test_quantization(linear: Any, attention: Any) -> None:
    only_domain_errors(lambda: parse_quantization(linear, attention))


RUNNER = ModelRunner(get_model("Qwen/Qwen3-0.6B"), get_device("TEST_DEVICE"), ParallelLayout(tp=2))


@BOUNDED
@given(
    is_decode=st.one_of(st.booleans(), junk),
    concurrency=small_int(1, 4096),
    query_len=small_int(1, 65_536),
    seq_len=small_int(1, 1_048_576),
    mtp=small_int(0, 3),
    reserved=st.one_of(st.floats(min_value=0, max_value=100), junk),
)
def test_runner(
    is_decode: Any, concurrency: Any, query_len: Any, seq_len: Any, mtp: Any, reserved: Any
) -> None:
    def call() -> None:
        shape = ForwardShape(
            is_decode=is_decode, concurrency=concurrency, query_len=query_len, seq_len=seq_len
        )
        RUNNER.run_inference(shape, mtp_draft_tokens=mtp)
        RUNNER.memory(shape)
        ModelRunner(RUNNER.model, RUNNER.device, reserved_memory_gb=reserved, num_mtp_tokens=mtp)

    only_domain_errors(call)


MISTRAL = json.loads((CONFIGS / "mistral-7b-v0.1.json").read_text())


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    report_multiple_bugs=False,
)
@given(
    overrides=st.dictionaries(
        st.sampled_from(["hidden_size", "sliding_window", "num_attention_heads", "head_dim"]),
        junk,
        max_size=2,
    )
)
def test_model_from_config(overrides: dict[str, Any]) -> None:
    only_domain_errors(lambda: model_from_config({**MISTRAL, "num_hidden_layers": 4, **overrides}))


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    report_multiple_bugs=False,
)
@given(
    overrides=st.dictionaries(
        st.sampled_from(["hbm_capacity_gb", "peak_bf16_tflops", "interconnect"]), junk, max_size=2
    )
)
def test_device_from_dict(overrides: dict[str, Any]) -> None:
    only_domain_errors(lambda: device_from_dict({"name": "d", "base": "TEST_DEVICE", **overrides}))
