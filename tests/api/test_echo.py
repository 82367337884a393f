"""An answer's echo (``input``) states what ran, and re-sending it asks the same question: the
same answer, to the bit, under every engine profile and mode (through the real ASGI app)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.profiles import PROFILES
from app.main import create_app
from app.models.optimize import OptimizeRequest
from app.models.simulate import SimulateRequest
from app.services.context import ServiceContext, create_context
from app.services.scenario import (
    resolve_disagg_search,
    resolve_disagg_simulation,
    resolve_search,
    resolve_simulation,
)
from app.settings import Settings
from tests.api.test_calibrations import SIMULATE as CALIBRATED
from tests.api.test_calibrations import _rows as calibration_rows

ROOT = Path(__file__).resolve().parents[2]
H200 = "NVIDIA_H200_SXM_141G"
BASE: dict[str, Any] = {
    "model": "Qwen/Qwen3-8B",
    "device": H200,
    "input_length": 1024,
    "output_length": 64,
}
#: Everything an answer reports but its timing and its cache counters.
VOLATILE = ("stats",)


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    # No response cache: a re-sent echo is computed again, not read back.
    app = create_app(Settings(cache_backend="memory", log_level="warning", response_cache=False))
    with TestClient(app) as test_client:
        yield test_client


def _answer(client: TestClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    return {k: v for k, v in response.json().items() if k not in VOLATILE}


def _assert_echo_reproduces(client: TestClient, path: str, body: dict[str, Any]) -> None:
    first = _answer(client, path, body)
    again = _answer(client, path, first["input"])
    assert again == first  # the echo of the echo included


engines = st.sampled_from(list(PROFILES))
linear = st.sampled_from(["DISABLED", "FP8"])
schedulers: st.SearchStrategy[dict[str, Any] | None] = st.one_of(
    st.none(),
    st.builds(dict, name=st.sampled_from(["decode_first_with_slack", "vllm", "sglang"])),
)
engine_options: st.SearchStrategy[dict[str, Any] | None] = st.one_of(
    st.none(), st.builds(dict, max_num_seqs=st.integers(1, 64))
)
PROPERTY = settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _with(body: dict[str, Any], **optional: Any) -> dict[str, Any]:
    return {**body, **{k: v for k, v in optional.items() if v is not None}}


@PROPERTY
@given(
    engine=engines,
    linear=linear,
    scheduler=schedulers,
    options=engine_options,
    workload=st.sampled_from([None, "burst", "closed_loop", "poisson"]),
    concurrency=st.integers(1, 48),
    tp=st.sampled_from([1, 2]),
    ratio=st.sampled_from([None, 0.8]),
)
def test_a_simulate_echo_reproduces_its_answer(
    client: TestClient,
    engine: str,
    linear: str,
    scheduler: dict[str, Any] | None,
    options: dict[str, Any] | None,
    workload: str | None,
    concurrency: int,
    tp: int,
    ratio: float | None,
) -> None:
    body = _with(
        {**BASE, "engine": engine, "quantize_linear_action": linear, "tp_size": tp},
        scheduler=scheduler,
        engine_options=options,
        workload=workload,
    )
    if workload == "poisson":
        body |= {"request_rate": 4.0, "num_requests": 2 * concurrency}
    else:
        body |= {"concurrency": concurrency, "requests_per_client": 2}
    if ratio is not None and workload in {"closed_loop", "poisson"}:
        body |= {"length_range_ratio": ratio}  # a length range (those workloads run it)
    first = _answer(client, "/v1/simulate", body)
    assert first["input"]["length_range_ratio"] == body.get("length_range_ratio", 1.0)
    _assert_echo_reproduces(client, "/v1/simulate", body)


@PROPERTY
@given(engine=engines, linear=linear, options=engine_options, clients=st.integers(2, 32))
def test_a_disaggregated_simulate_echo_reproduces_its_answer(
    client: TestClient, engine: str, linear: str, options: dict[str, Any] | None, clients: int
) -> None:
    body = _with(
        {
            **BASE,
            "mode": "disagg",
            "engine": engine,
            "quantize_linear_action": linear,
            "concurrency": clients,
            "requests_per_client": 2,
            "prefill_workers": 1,
            "decode_workers": 1,
            "decode_tp_size": 2,
        },
        engine_options=options,
    )
    _assert_echo_reproduces(client, "/v1/simulate", body)


@PROPERTY
@given(
    engine=engines,
    linear=linear,
    scheduler=schedulers,
    mode=st.sampled_from(["agg", "disagg_prefill", "disagg_decode", "pd_ratio", "disagg"]),
    workload=st.sampled_from([None, "burst", "closed_loop"]),
    cap=st.sampled_from([None, 64]),
    ratio=st.sampled_from([None, 0.8]),
)
def test_an_optimize_echo_reproduces_its_answer(
    client: TestClient,
    engine: str,
    linear: str,
    scheduler: dict[str, Any] | None,
    mode: str,
    workload: str | None,
    cap: int | None,
    ratio: float | None,
) -> None:
    if mode != "agg":
        scheduler = None  # the other modes run no step scheduler (and refuse another one)
        workload = None if mode == "disagg" else "burst"
    body = _with(
        {
            **BASE,
            "engine": engine,
            "quantize_linear_action": linear,
            "mode": mode,
            "num_devices": 4,
            "tp_sizes": [1, 2],
            "requests_per_client": 2,
            "top_k": 3,
        },
        scheduler=scheduler,
        workload=workload,
        max_batch_size=cap,  # omitted: the echo gives the cap the search used
    )
    if mode == "disagg":
        body |= {"max_workers": 2}
    if ratio is not None and mode == "agg" and workload == "closed_loop":
        body |= {"length_range_ratio": ratio}
    if mode in {"disagg_prefill", "pd_ratio"}:
        body |= {"ttft_limit_ms": 5000.0}
    _assert_echo_reproduces(client, "/v1/optimize", body)


@pytest.mark.parametrize("engine", list(PROFILES))
def test_a_plan_echo_reproduces_its_answer(client: TestClient, engine: str) -> None:
    body = {
        **BASE,
        "engine": engine,
        "request_rate": 5.0,
        "ttft_limit_ms": 2000.0,
        "tpot_limit_ms": 50.0,
        "num_requests": 200,
    }
    first = _answer(client, "/v1/plan", body)
    assert first["input"]["scheduler"]["name"] == PROFILES[engine].scheduler  # what ran
    _assert_echo_reproduces(client, "/v1/plan", body)


def test_the_echo_names_the_engine_policy_that_ran(client: TestClient) -> None:
    # The case: the vllm profile runs its own policy with its running cap, and the
    # echo says so (it said decode_first_with_slack, and re-sent gave another TTFT).
    body = {
        "model": "Qwen/Qwen3-32B",
        "device": H200,
        "quantize_linear_action": "FP8",
        "input_length": 2048,
        "output_length": 128,
        "tp_size": 2,
        "concurrency": 560,
    }
    answer = _answer(client, "/v1/simulate", body)
    echo = answer["input"]
    assert echo["scheduler"] == {
        "name": "vllm",
        "slack_ratio": None,
        "prefill_order": None,
        "max_num_seqs": 1024,
        "mixed_latency": "max",
    }
    assert echo["quantize_attention_action"] == "DISABLED" and echo["max_batched_tokens"] == 8192
    assert _answer(client, "/v1/simulate", echo) == answer
    # TensorRT-LLM keeps an FP8 KV cache for an FP8 checkpoint: the echo gives it.
    trt = _answer(client, "/v1/simulate", {**body, "engine": "trtllm"})
    assert trt["input"]["quantize_attention_action"] == "FP8"


def test_a_disaggregated_echo_names_no_scheduler(client: TestClient) -> None:
    body = {
        **BASE,
        "mode": "disagg",
        "concurrency": 8,
        "prefill_workers": 1,
        "decode_workers": 1,
    }
    assert "scheduler" not in _answer(client, "/v1/simulate", body)["input"]
    # a generated client that sends the schema's default is not refused
    sent = client.post(
        "/v1/simulate", json={**body, "scheduler": {"name": "decode_first_with_slack"}}
    )
    assert sent.status_code == 200, sent.text


# -- the resolver: an echo resolves to the scenario it came from --------------------------------
@pytest.fixture(scope="module")
def context() -> Iterator[ServiceContext]:
    yield create_context(Settings(cache_backend="memory", log_level="warning"))


@PROPERTY
@given(
    engine=st.one_of(st.none(), engines),
    linear=linear,
    scheduler=schedulers,
    workload=st.sampled_from([None, "burst", "closed_loop"]),
    mode=st.sampled_from(["agg", "disagg_prefill", "pd_ratio"]),
)
def test_an_echo_resolves_to_its_own_scenario(
    context: ServiceContext,
    engine: str | None,
    linear: str,
    scheduler: dict[str, Any] | None,
    workload: str | None,
    mode: str,
) -> None:
    common = _with(
        {**BASE, "quantize_linear_action": linear},
        engine=engine,
        scheduler=scheduler,
        workload=workload,
    )
    simulate = resolve_simulation(
        context, SimulateRequest.model_validate({**common, "concurrency": 8, "tp_size": 2})
    )
    again = resolve_simulation(context, SimulateRequest.model_validate(simulate.echo.model_dump()))
    assert again.scenario == simulate.scenario and again.scenario.key == simulate.scenario.key
    assert again.echo == simulate.echo
    if mode != "agg":
        common = {k: v for k, v in common.items() if k != "scheduler"} | {"workload": "burst"}
    body = {**common, "mode": mode, "num_devices": 4, "ttft_limit_ms": 5000.0}
    search = resolve_search(context, OptimizeRequest.model_validate(body))
    again_search = resolve_search(context, OptimizeRequest.model_validate(search.echo.model_dump()))
    assert again_search.scenario.key == search.scenario.key
    assert (search.scenario.scheduler is None) == (mode != "agg")


def test_requests_that_ask_the_same_question_share_a_key(context: ServiceContext) -> None:
    body = {**BASE, "concurrency": 8}
    implicit = resolve_simulation(context, SimulateRequest.model_validate(body)).scenario
    spelled = resolve_simulation(
        context,
        SimulateRequest.model_validate(
            {**body, "engine": "vllm", "max_batched_tokens": 8192, "workload": "closed_loop"}
        ),
    ).scenario
    assert spelled.key == implicit.key
    other = resolve_simulation(
        context, SimulateRequest.model_validate({**body, "max_batched_tokens": 4096})
    ).scenario
    assert other.key != implicit.key


@pytest.mark.parametrize("engine", list(PROFILES))
def test_a_disaggregated_echo_resolves_to_its_own_scenario(
    context: ServiceContext, engine: str
) -> None:
    body = {**BASE, "engine": engine, "quantize_linear_action": "FP8", "mode": "disagg"}
    pools = {"concurrency": 8, "prefill_workers": 1, "decode_workers": 2, "decode_tp_size": 2}
    simulate = resolve_disagg_simulation(context, SimulateRequest.model_validate(body | pools))
    assert simulate.scenario.scheduler is None and simulate.scenario.layout is not None
    again = resolve_disagg_simulation(
        context, SimulateRequest.model_validate(simulate.echo.model_dump())
    )
    assert again.scenario.key == simulate.scenario.key and again.echo == simulate.echo
    search = resolve_disagg_search(OptimizeRequest.model_validate(body | {"num_devices": 4}))
    again_search = resolve_disagg_search(OptimizeRequest.model_validate(search.echo.model_dump()))
    assert again_search.scenario.key == search.scenario.key
    assert search.echo.max_batch_size == again_search.echo.max_batch_size


def test_a_calibrated_answer_echoes_and_keys_its_calibration(
    client: TestClient, context: ServiceContext
) -> None:
    created = client.post("/v1/calibrations", json={"points": calibration_rows()})
    assert created.status_code == 201, created.text
    profile = created.json()["profile"]
    body = {**CALIBRATED, "calibration": created.json()["id"]}
    _assert_echo_reproduces(client, "/v1/simulate", body)
    inline = resolve_simulation(
        context, SimulateRequest.model_validate({**CALIBRATED, "calibration": profile})
    ).scenario
    assert inline.deployment.calibration is not None
    stored = json.loads(json.dumps(inline.to_dict()))["deployment"]["calibration"]
    assert dict(stored["parameters"]) == profile["parameters"]  # the fitted values, as JSON
    plain = resolve_simulation(context, SimulateRequest.model_validate(CALIBRATED)).scenario
    assert inline.key != plain.key


#: The fields the dashboard's "Timeline" copies from an optimize answer's echo into the
#: simulate request of a row (app/web/js/main.js, SIM_FIELDS).
TIMELINE_FIELDS = (
    "model",
    "device",
    "quantize_linear_action",
    "quantize_attention_action",
    "reserved_memory_gb",
    "input_length",
    "prefix_cache_hit_rate",
    "max_batched_tokens",
    "output_length",
    "length_range_ratio",
    "num_mtp_tokens",
    "mtp_acceptance_rates",
    "scheduler",
    "force_simulation",
    "workload",
    "window",
    "requests_per_client",
    "engine",
    "engine_options",
    "calibration",
)


def test_the_main_js_timeline_fields_are_these() -> None:
    script = (ROOT / "app" / "web" / "js" / "main.js").read_text(encoding="utf-8")
    listed = script.split("const SIM_FIELDS = [", 1)[1].split("];", 1)[0]
    assert tuple(name.strip().strip('"') for name in listed.split(",") if name.strip()) == (
        TIMELINE_FIELDS
    )


@pytest.mark.parametrize("engine", list(PROFILES))
def test_an_optimize_row_simulates_to_its_own_numbers(client: TestClient, engine: str) -> None:
    # The dashboard's Timeline re-simulates a row from the echo: it contradicted its row
    # (trtllm: TTFT 4,459 ms in the row, 51,115 ms re-simulated) while the echo named a
    # scheduler and a KV cache that did not run.
    body = {**BASE, "engine": engine, "num_devices": 4, "tp_sizes": [1, 2], "top_k": 2}
    answer = _answer(client, "/v1/optimize", body)
    echo = answer["input"]
    assert answer["rows"], answer["reason"]
    for row in answer["rows"]:
        simulated = _answer(
            client,
            "/v1/simulate",
            {k: echo[k] for k in TIMELINE_FIELDS if echo.get(k) is not None}
            | {"tp_size": row["tp"], "dp_size": row["dp"], "ep_size": row["ep"]}
            | {"concurrency": row["concurrency"]},
        )
        # To the float: the optimizer combines a replica group's result the way the simulation
        # does, but its sums can run in another order (1 ulp of TPOT seen at TP1 DP4).
        assert simulated["ttft_ms"] == pytest.approx(row["ttft_ms"], rel=1e-12, abs=0.0)
        assert simulated["tpot_ms"] == pytest.approx(row["tpot_ms"], rel=1e-12, abs=0.0)
