"""The /v1 endpoints through the real ASGI app (lifespan running, in-process cache)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.helpers import long_context_qwen3_32b

MODEL = "Qwen/Qwen3-32B"
DEVICE = "ATLAS_800_A2_376T_64G"

# The RFC's semantics (burst, decode-first); the default engine profile: test_engine_profiles.
OPTIMIZE: dict[str, Any] = {
    "engine": "msmodeling",
    "model": MODEL,
    "device": DEVICE,
    "num_devices": 8,
    "input_length": 3500,
    "output_length": 1500,
    "max_batched_tokens": 8192,
    "tpot_limit_ms": 50,
    "tp_sizes": [1, 2, 4, 8],
}
SIMULATE: dict[str, Any] = {
    "engine": "msmodeling",
    "model": MODEL,
    "device": DEVICE,
    "input_length": 3500,
    "output_length": 200,
    "max_batched_tokens": 2048,
    "concurrency": 16,
    "tp_size": 4,
}
FORWARD: dict[str, Any] = {
    "model": MODEL,
    "device": DEVICE,
    "num_queries": 1,
    "query_length": 2048,
    "tp_size": 4,
}


def problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    return body


def test_chunk_plan_matches_the_rfc_example(client: TestClient) -> None:
    body = client.post(
        "/v1/chunk-plan", json={"input_length": 10000, "max_batched_tokens": 4096}
    ).json()
    assert body["prefill_num_chunks"] == 3
    assert [(c["query_len"], c["seq_len"]) for c in body["chunks"]] == [
        (4096, 4096),
        (4096, 8192),
        (1808, 10000),
    ]


def test_chunk_plan_applies_the_prefix_cache(client: TestClient) -> None:
    body = client.post(
        "/v1/chunk-plan",
        json={"input_length": 10000, "max_batched_tokens": 4096, "prefix_cache_hit_rate": 0.5},
    ).json()
    assert body["cached_prefix_tokens"] == 5000
    assert body["effective_input_length"] == 5000
    assert body["prefill_num_chunks"] == 2


def test_chunk_plan_refuses_a_huge_plan(client: TestClient) -> None:
    body = problem(
        client.post("/v1/chunk-plan", json={"input_length": 1_000_000, "max_batched_tokens": 1}),
        422,
    )
    assert body["errors"][0]["loc"] == ["body", "max_batched_tokens"]


def test_optimize_returns_ranked_rows_probes_and_stats(client: TestClient) -> None:
    body = client.post("/v1/optimize", json=OPTIMIZE).json()
    assert body["input"]["tp_sizes"] == [1, 2, 4, 8]
    best = body["best"]
    assert best == body["rows"][0]
    for field in (
        "effective_input_length",
        "max_batched_tokens",
        "prefill_num_chunks",
        "ttft_ms",
        "tpot_ms",
        "throughput_tokens_s",
        "throughput_per_device",
        "concurrency",
        "parallel",
        "batch_size",
        "memory_gb",
        "memory_left_gb",
        "method",
    ):
        assert field in best
    assert best["tpot_ms"] <= 50
    throughputs = [row["throughput_tokens_s"] for row in body["rows"]]
    assert throughputs == sorted(throughputs, reverse=True)
    assert body["probes"] and any(p["feasible"] for p in body["probes"])
    assert {p["parallel"] for p in body["probes"]} >= {row["parallel"] for row in body["rows"]}
    stats = body["stats"]
    assert stats["cache"]["backend"] == "memory"
    assert stats["forward_evaluations"] == stats["cache"]["misses"] > 0


def test_optimize_returns_the_pareto_front_of_its_probes(client: TestClient) -> None:
    """The front is drawn from the probes (SLA misses included), ordered by tokens/s per user,
    and holds the best row; the prefill search, without a decode step, has none."""
    body = client.post("/v1/optimize", json=OPTIMIZE).json()
    front = body["pareto"]
    probes = {(p["parallel"], p["batch_size"]): p for p in body["probes"]}
    assert len(front) >= 2
    for point in front:
        probe = probes[(point["parallel"], point["batch_size"])]
        assert point["tpot_ms"] == probe["tpot_ms"]
        assert point["user_tokens_s"] == pytest.approx(1000.0 / probe["tpot_ms"])
        assert point["throughput_per_device"] == probe["throughput_per_device"]
        assert point["feasible"] == probe["feasible"]
    users = [p["user_tokens_s"] for p in front]
    assert users == sorted(users)
    best = body["best"]
    assert any(
        p["parallel"] == best["parallel"] and p["batch_size"] == best["batch_size"] for p in front
    )
    prefill = client.post("/v1/optimize", json={**OPTIMIZE, "mode": "disagg_prefill"}).json()
    assert prefill["pareto"] == []
    without_probes = client.post("/v1/optimize", json={**OPTIMIZE, "include_probes": False})
    assert without_probes.json()["pareto"] == front


def test_identical_optimize_is_answered_from_the_response_cache(client: TestClient) -> None:
    first = client.post("/v1/optimize", json=OPTIMIZE).json()
    second = client.post("/v1/optimize", json=OPTIMIZE).json()
    assert not first["stats"]["cache"]["response_cache_hit"]
    assert second["stats"]["cache"]["response_cache_hit"]
    assert second["rows"] == first["rows"]


def test_a_changed_request_reuses_cached_forwards(client: TestClient) -> None:
    client.post("/v1/optimize", json=OPTIMIZE)
    again = client.post("/v1/optimize", json={**OPTIMIZE, "top_k": 2}).json()
    assert not again["stats"]["cache"]["response_cache_hit"]
    assert again["stats"]["forward_evaluations"] == 0
    assert again["stats"]["cache"]["hits"] > 0
    # No manifest in an in-process cache (tests/api/test_sweep_memory.py): the forwards are
    # read per probe batch; a shared cache's manifest reads them in one MGET
    # (tests/integration/test_two_workers.py).
    assert again["stats"]["cache"]["misses"] == 0
    assert len(again["rows"]) <= 2


@pytest.mark.parametrize("mode", ["disagg_prefill", "disagg_decode"])
def test_disaggregated_modes(client: TestClient, mode: str) -> None:
    body = client.post(
        "/v1/optimize", json={**OPTIMIZE, "mode": mode, "ttft_limit_ms": 3000}
    ).json()
    role = mode.removeprefix("disagg_")
    assert body["best"]["role"] == role
    assert body["best"]["throughput_kind"] == ("input" if role == "prefill" else "output")


def test_pd_ratio_mode(client: TestClient) -> None:
    body = client.post(
        "/v1/optimize",
        json={
            **OPTIMIZE,
            "mode": "pd_ratio",
            "num_devices": 16,
            "ttft_limit_ms": 3000,
            "prefill_devices_per_instance": 4,
            "decode_devices_per_instance": 8,
        },
    ).json()
    pd = body["pd_ratio"]
    assert pd["pd_ratio"] == pytest.approx(pd["d_qps"] / pd["p_qps"])
    assert pd["split"]["devices_used"] <= 16
    assert {row["role"] for row in body["rows"]} == {"prefill", "decode"}


def test_infeasible_everywhere_is_a_200_that_says_why(client: TestClient) -> None:
    body = client.post("/v1/optimize", json={**OPTIMIZE, "tpot_limit_ms": 0.001}).json()
    assert body["best"] is None
    assert "tpot_limit" in body["reason"]


def test_layouts_the_model_cannot_use_are_reported_not_fatal(client: TestClient) -> None:
    # Qwen3-32B has 64 heads: TP 128 cannot split them, the others still run.
    body = client.post(
        "/v1/optimize", json={**OPTIMIZE, "num_devices": 128, "tp_sizes": [8, 128]}
    ).json()
    assert any(i["parallel"] == "TP128 DP1" for i in body["infeasible"])
    assert body["best"]["tp"] == 8


def test_simulate_with_timeline(client: TestClient) -> None:
    body = client.post("/v1/simulate", json={**SIMULATE, "include_timeline": True}).json()
    assert body["method"] == "time_simulation"
    assert body["prefill_num_chunks"] == 2
    assert body["ttft_ms"] > 0 and body["tpot_ms"] > 0
    assert body["feasible"] is True
    timeline = body["timeline"]
    assert timeline[0]["start_ms"] == 0
    assert sum(step["finished"] for step in timeline) == 16
    assert body["stats"]["cache"]["round_trips"] == 1


def test_simulate_single_chunk_uses_closed_form_unless_forced(client: TestClient) -> None:
    request = {**SIMULATE, "max_batched_tokens": 8192}
    assert client.post("/v1/simulate", json=request).json()["method"] == "closed_form_waves"
    forced = client.post("/v1/simulate", json={**request, "force_simulation": True}).json()
    assert forced["method"] == "time_simulation"


def test_simulate_out_of_memory_is_infeasible_not_an_error(client: TestClient) -> None:
    body = client.post("/v1/simulate", json={**SIMULATE, "tp_size": 1, "concurrency": 4096})
    assert body.status_code == 200
    assert body.json()["feasible"] is False
    assert body.json()["reason"].startswith("memory")


def test_forward_is_cached(client: TestClient) -> None:
    first = client.post("/v1/forward", json=FORWARD).json()
    second = client.post("/v1/forward", json=FORWARD).json()
    assert first["latency_ms"] > 0
    assert first["breakdown"]["categories"]
    assert first["memory"]["weights_gb"] > 0
    assert first["cache"]["misses"] == 1
    assert second["cache"]["hits"] == 1
    assert second["latency_ms"] == first["latency_ms"]


def test_catalogs(client: TestClient) -> None:
    models = client.get("/v1/models").json()
    assert MODEL in {m["name"] for m in models["models"]}
    assert "W8A8_DYNAMIC" in models["quantize_linear_actions"]
    devices = client.get("/v1/devices").json()["devices"]
    a2 = next(d for d in devices if d["name"] == DEVICE)
    assert a2["hbm_capacity_gb"] > 0 and a2["numbers"]["interconnect"]


def test_custom_device_and_inline_model(client: TestClient) -> None:
    config = {
        "model_type": "llama",
        "hidden_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "intermediate_size": 4096,
        "vocab_size": 32000,
    }
    body = client.post(
        "/v1/forward",
        json={
            **FORWARD,
            "model": {"name": "tiny", "config": config},
            "device": {"name": "H100_96G", "base": "NVIDIA_H100_SXM_80G", "hbm_capacity_gb": 96},
        },
    )
    assert body.status_code == 200, body.text
    assert body.json()["memory"]["capacity_gb"] == 96


# -- validation: 422 problem+json, never 500 ------------------------------------------------


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"max_batched_tokens": 0}, "max_batched_tokens"),
        ({"max_batched_tokens": -5}, "max_batched_tokens"),
        ({"max_batched_tokens": 4096.5}, "max_batched_tokens"),
        ({"max_batched_tokens": "4096"}, "max_batched_tokens"),
        ({"prefix_cache_hit_rate": 1.0}, "prefix_cache_hit_rate"),
        ({"prefix_cache_hit_rate": -0.1}, "prefix_cache_hit_rate"),
        ({"input_length": 0}, "input_length"),
        ({"output_length": 10_000_000}, "output_length"),
        ({"tp_sizes": list(range(1, 18))}, "tp_sizes"),
        ({"top_k": 1000}, "top_k"),
        ({"mode": "turbo"}, "mode"),
        ({"tpot_limit_ms": 0}, "tpot_limit_ms"),
        ({"no_such_field": 1}, "no_such_field"),
        ({"length_range_ratio": 0}, "length_range_ratio"),
        ({"length_range_ratio": 1.5}, "length_range_ratio"),
        ({"length_range_ratio": "0.8"}, "length_range_ratio"),
        ({"length_range_ratio": True}, "length_range_ratio"),
        # A burst (the msmodeling profile's workload) replays fixed lengths: refused, not ignored.
        ({"length_range_ratio": 0.8}, "length_range_ratio"),
    ],
)
def test_payload_validation(client: TestClient, patch: dict[str, Any], field: str) -> None:
    body = problem(client.post("/v1/optimize", json={**OPTIMIZE, **patch}), 422)
    assert field in {str(part) for e in body["errors"] for part in e["loc"]}


def test_unknown_model_and_device_list_the_valid_names(client: TestClient) -> None:
    body = problem(client.post("/v1/optimize", json={**OPTIMIZE, "model": "gpt-9"}), 422)
    assert MODEL in body["valid"]
    body = problem(client.post("/v1/simulate", json={**SIMULATE, "device": "TPU9"}), 422)
    assert DEVICE in body["valid"]


def test_model_paths_are_not_read_over_http(client: TestClient) -> None:
    body = problem(
        client.post("/v1/forward", json={**FORWARD, "model": "/work/shared/model_configs"}), 422
    )
    assert body["type"].endswith("unknown-model")


def test_tp_sizes_must_divide_the_devices(client: TestClient) -> None:
    body = problem(client.post("/v1/optimize", json={**OPTIMIZE, "tp_sizes": [3]}), 422)
    assert body["errors"][0]["loc"] == ["body", "tp_sizes"]


def test_bad_inline_config_and_custom_device(client: TestClient) -> None:
    problem(client.post("/v1/forward", json={**FORWARD, "model": {"config": {}}}), 422)
    problem(client.post("/v1/forward", json={**FORWARD, "device": {"name": "x", "volts": 3}}), 422)
    problem(client.post("/v1/forward", json={**FORWARD, "quantize_linear_action": "W3"}), 422)


def test_forward_layout_follows_msmodeling_sizes(client: TestClient) -> None:
    body = client.post(
        "/v1/forward", json={**FORWARD, "tp_size": None, "num_devices": 8, "pp_size": 1}
    ).json()
    assert body["parallel"] == {"tp": 8, "dp": 1, "ep": 1, "pp": 1, "label": "TP8 DP1"}
    body = client.post("/v1/forward", json={**FORWARD, "num_devices": 8, "tp_size": 2}).json()
    assert body["parallel"]["dp"] == 4
    problem(client.post("/v1/forward", json={**FORWARD, "num_devices": 6, "tp_size": 4}), 422)


def test_forward_decode_with_mtp_verifies_one_plus_n_tokens(client: TestClient) -> None:
    body = client.post(
        "/v1/forward",
        json={
            **FORWARD,
            "model": "deepseek-ai/DeepSeek-V3",
            "num_devices": 16,
            "tp_size": 8,
            "ep_size": 16,
            "decode": True,
            "query_length": 1,
            "context_length": 4000,
            "num_mtp_tokens": 1,
        },
    ).json()
    assert body["request"]["query_len"] == 2
    assert body["request"]["mtp_draft_tokens"] == 1


def test_api_forward_matches_the_cli_document(
    client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from app.cli import main

    api = client.post("/v1/forward", json=FORWARD).json()
    flags = ["--tp-size", "4", "--num-queries", "1", "--query-length", "2048"]
    code = main(["forward", MODEL, "--device", DEVICE, *flags, "--format", "json"])
    assert code == 0
    cli = json.loads(capsys.readouterr().out)
    assert {k: v for k, v in api.items() if k not in ("input", "cache")} == cli


def test_simulation_size_is_bounded(client: TestClient) -> None:
    too_many_chunks = {**SIMULATE, "input_length": 1_048_576, "max_batched_tokens": 512}
    too_many_chunks["model"] = long_context_qwen3_32b(factor=33.0)
    body = problem(client.post("/v1/simulate", json=too_many_chunks), 422)
    assert body["type"].endswith("search-limit") and "raise max_batched_tokens" in body["detail"]
    product = {**SIMULATE, "input_length": 65536, "max_batched_tokens": 64, "concurrency": 2048}
    product["model"] = long_context_qwen3_32b()
    body = problem(client.post("/v1/simulate", json=product), 422)
    assert "lower concurrency to <= 1024" in body["detail"]
    # Over replicas the bound is per replica, and the advice names the total.
    over_two = {**product, "concurrency": 4096, "dp_size": 2}
    body = problem(client.post("/v1/simulate", json=over_two), 422)
    assert "concurrency per replica = 1024 x 2048" in body["detail"]
    assert "lower concurrency to <= 2048" in body["detail"]
    timeline = {**SIMULATE, "concurrency": 40_000, "include_timeline": True}
    assert "timeline" in problem(client.post("/v1/simulate", json=timeline), 422)["detail"]


def test_optimize_search_cap_shrinks_by_default_and_refuses_when_explicit(
    client: TestClient,
) -> None:
    long_prompt = {**OPTIMIZE, "input_length": 262_144, "max_batched_tokens": 512}  # 512 chunks
    long_prompt["model"] = long_context_qwen3_32b()
    assert client.post("/v1/optimize", json=long_prompt).status_code == 200
    explicit = {**long_prompt, "max_batch_size": 4096}
    body = problem(client.post("/v1/optimize", json=explicit), 422)
    assert "lower max_batch_size to <= 2048" in body["detail"]


def test_a_computation_past_its_deadline_is_504() -> None:
    from app.main import create_app
    from app.settings import Settings

    app = create_app(Settings(request_deadline_s=1e-6, response_cache=False, log_level="error"))
    with TestClient(app) as slow:
        response = slow.post("/v1/optimize", json=OPTIMIZE)
    body = problem(response, 504)
    assert body["type"].endswith("deadline")
    assert response.headers["retry-after"] == "1"


def test_the_deadline_interrupts_the_engine_loop() -> None:
    """A simulation of 6,000 clients x 10 requests answers 504 soon after a 0.05 s deadline:
    the engine loop checks the deadline every few hundred iterations, not only when forwards
    are costed. Since closed-loop cycles are kept once the whole run takes only ~0.3 s here
    (it took ~1.4 s when this test was written against a 0.2 s deadline, which a quiet machine
    then sometimes beat: a 200), so the deadline is a sixth of the run."""
    import time

    from app.main import create_app
    from app.settings import Settings

    heavy = {
        "model": "Qwen/Qwen3-8B",
        "device": "NVIDIA_H100_SXM_80G",
        "input_length": 2048,
        "output_length": 512,
        "max_batched_tokens": 1024,
        "concurrency": 6000,
        "scheduler": {"name": "vllm", "mixed_latency": "fused"},
    }
    settings = Settings(request_deadline_s=0.05, response_cache=False, log_level="error")
    with TestClient(create_app(settings)) as slow:
        started = time.monotonic()
        response = slow.post("/v1/simulate", json=heavy)
        elapsed = time.monotonic() - started
    assert problem(response, 504)["type"].endswith("deadline")
    assert elapsed < 0.05 + 0.8, elapsed


@pytest.mark.parametrize(
    "scheduler",
    [
        {"name": "vllm"},
        {"name": "sglang", "max_num_seqs": 8},
        {"name": "sglang_mixed_chunk", "mixed_latency": "sum"},
        {"name": "decode_first_with_slack", "slack_ratio": 1.0, "prefill_order": "fifo"},
    ],
)
def test_simulate_with_each_scheduler(client: TestClient, scheduler: dict[str, Any]) -> None:
    body = client.post("/v1/simulate", json={**SIMULATE, "scheduler": scheduler}).json()
    assert body["ttft_ms"] > 0
    assert body["input"]["scheduler"]["name"] == scheduler["name"]


def test_scheduler_options_of_another_policy_are_422(client: TestClient) -> None:
    bad = {**SIMULATE, "scheduler": {"name": "vllm", "slack_ratio": 1.2}}
    body = problem(client.post("/v1/simulate", json=bad), 422)
    assert body["errors"][0]["loc"] == ["body", "slack_ratio"]
    problem(client.post("/v1/simulate", json={**SIMULATE, "scheduler": {"name": "tgi"}}), 422)


def test_closed_loop_simulate(client: TestClient) -> None:
    body = client.post(
        "/v1/simulate",
        json={**SIMULATE, "workload": "closed_loop", "dp_size": 2, "requests_per_client": 3},
    ).json()
    assert body["workload"] == "closed_loop"
    # 16 clients in total: 8 on each of the two replicas, 3 requests each.
    assert body["concurrency"] == 16 and body["batch_size"] == 8
    assert body["replica_split"] == [
        {"replicas": 2, "concurrency": 8, "num_requests": 24, "request_rate": None}
    ]
    assert body["num_requests"] == 16 * 3
    assert body["ttft_ms"] > 0 and body["e2e_ms"] > body["ttft_ms"]
    assert body["total_throughput"] > body["output_throughput"] > 0
    mix = body["mean_prefill_tokens_per_step"], body["mean_decode_tokens_per_step"]
    assert mix[0] > 0 and mix[1] > 0


@pytest.mark.parametrize("workload", ["burst", "closed_loop"])
def test_simulate_concurrency_is_the_total_over_the_replicas(
    client: TestClient, workload: str
) -> None:
    def run(concurrency: int, dp_size: int) -> dict[str, Any]:
        body = {**SIMULATE, "workload": workload, "requests_per_client": 2}
        response = client.post(
            "/v1/simulate", json={**body, "concurrency": concurrency, "dp_size": dp_size}
        )
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    one = run(8, 1)
    two = run(16, 2)  # 8 on each replica: the same engine twice
    assert two["concurrency"] == 16 and two["batch_size"] == 8
    assert two["ttft_ms"] == pytest.approx(one["ttft_ms"])
    assert two["tpot_ms"] == pytest.approx(one["tpot_ms"])
    assert two["output_throughput"] == pytest.approx(2 * one["output_throughput"])
    assert two["request_throughput"] == pytest.approx(2 * one["request_throughput"])

    # 10 over 4 replicas: two serve 3, two serve 2; latencies are request-weighted means.
    three, pair, split = run(3, 1), run(2, 1), run(10, 4)
    assert split["batch_size"] == 3
    assert [(s["replicas"], s["concurrency"]) for s in split["replica_split"]] == [(2, 3), (2, 2)]
    assert split["ttft_ms"] == pytest.approx((6 * three["ttft_ms"] + 4 * pair["ttft_ms"]) / 10)
    assert split["tpot_ms"] == pytest.approx((6 * three["tpot_ms"] + 4 * pair["tpot_ms"]) / 10)
    assert split["output_throughput"] == pytest.approx(
        2 * three["output_throughput"] + 2 * pair["output_throughput"]
    )
    assert split["makespan_ms"] == pytest.approx(max(three["makespan_ms"], pair["makespan_ms"]))


def test_simulate_refuses_fewer_clients_than_replicas(client: TestClient) -> None:
    for workload in ("burst", "closed_loop"):
        bad = {**SIMULATE, "workload": workload, "concurrency": 3, "dp_size": 4}
        body = problem(client.post("/v1/simulate", json=bad), 422)
        assert body["type"].endswith("invalid-parameter")
        assert body["errors"][0]["loc"] == ["body", "concurrency"]
        assert "concurrency=3" in body["detail"] and "dp_size=4" in body["detail"]
    assert client.post("/v1/simulate", json={**bad, "concurrency": 4}).status_code == 200


def test_num_devices_sets_the_replicas_or_must_match_them(client: TestClient) -> None:
    def post(**fields: Any) -> Any:
        return client.post("/v1/simulate", json={**SIMULATE, "concurrency": 16, **fields})

    explicit = post(tp_size=4, dp_size=2).json()
    derived = post(tp_size=4, num_devices=8).json()
    assert derived["input"]["dp_size"] == 2 and derived["input"]["num_devices"] == 8
    for key in ("ttft_ms", "tpot_ms", "output_throughput", "replica_split"):
        assert derived[key] == explicit[key]
    assert explicit["input"]["num_devices"] == 8  # echoed when omitted
    assert post(tp_size=4, dp_size=2, num_devices=8).status_code == 200

    body = problem(post(tp_size=4, dp_size=4, num_devices=8), 422)
    assert body["errors"][0]["loc"] == ["body", "num_devices"]
    assert "tp_size x dp_size = 4 x 4 = 16" in body["detail"]
    body = problem(post(tp_size=4, num_devices=6), 422)
    assert "a multiple of tp_size=4" in body["detail"]


def test_a_timeline_shows_the_busiest_replica(client: TestClient) -> None:
    body = client.post(
        "/v1/simulate",
        json={**SIMULATE, "concurrency": 10, "dp_size": 4, "include_timeline": True},
    ).json()
    assert sum(step["finished"] for step in body["timeline"]) == body["batch_size"] == 3


@pytest.mark.parametrize("engine", ["msmodeling", "vllm", "sglang"])
@pytest.mark.parametrize("workload", ["burst", "closed_loop"])
def test_an_optimizer_row_simulates_to_the_same_numbers(
    client: TestClient, workload: str, engine: str
) -> None:
    search = {
        **OPTIMIZE,
        "tp_sizes": [4],
        "workload": workload,
        "requests_per_client": 2,
        "engine": engine,
    }
    row = client.post("/v1/optimize", json=search).json()["best"]
    assert row["dp"] == 2 and row["concurrency"] == 2 * row["batch_size"]
    keep = (
        "model",
        "device",
        "input_length",
        "output_length",
        "max_batched_tokens",
        "workload",
        "engine",
    )
    sim = client.post(
        "/v1/simulate",
        json={
            **{key: search[key] for key in keep},
            "requests_per_client": 2,
            "tp_size": row["tp"],
            "dp_size": row["dp"],
            "concurrency": row["concurrency"],
        },
    ).json()
    assert sim["concurrency"] == row["concurrency"] and sim["batch_size"] == row["batch_size"]
    assert sim["ttft_ms"] == pytest.approx(row["ttft_ms"])
    assert sim["tpot_ms"] == pytest.approx(row["tpot_ms"])
    assert sim["output_throughput"] == pytest.approx(row["throughput_tokens_s"])


def test_closed_loop_optimize_agg_only(client: TestClient) -> None:
    body = client.post(
        "/v1/optimize", json={**OPTIMIZE, "workload": "closed_loop", "window": "steady_state"}
    ).json()
    assert body["best"]["tpot_ms"] <= 50
    assert body["input"]["workload"] == "closed_loop"
    wrong = {**OPTIMIZE, "workload": "closed_loop", "mode": "disagg_decode"}
    body = problem(client.post("/v1/optimize", json=wrong), 422)
    assert body["errors"][0]["loc"] == ["body", "workload"]


def test_closed_loop_size_is_bounded(client: TestClient) -> None:
    big = {**SIMULATE, "workload": "closed_loop", "concurrency": 10_000, "requests_per_client": 10}
    body = problem(client.post("/v1/simulate", json=big), 422)
    assert "lower concurrency to <= 6553" in body["detail"]
    explicit = {**OPTIMIZE, "workload": "closed_loop", "max_batch_size": 20_000}
    assert "max_batch_size" in problem(client.post("/v1/optimize", json=explicit), 422)["detail"]


def test_catalog_items_by_name(client: TestClient) -> None:
    assert client.get("/v1/models/qwen3-32b-instruct").json()["name"] == MODEL
    assert client.get(f"/v1/devices/{DEVICE.lower()}").json()["name"] == DEVICE
    body = problem(client.get("/v1/models/%2Fwork%2Fshared%2Fmodel_configs"), 404)
    assert MODEL in body["valid"]
    assert DEVICE in problem(client.get("/v1/devices/TPU9"), 404)["valid"]


def test_work_done_before_a_deadline_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from app.cache import MemoryLatencyCache
    from app.core.cost import AnyShape, ForwardShape
    from app.core.errors import DeadlineExceededError
    from app.services.cost_model import CachedServingModel, ForwardRecord

    class Fake:
        def identity(self) -> str:
            return "fake"

        def evaluate(self, shape: AnyShape) -> ForwardRecord:
            assert isinstance(shape, ForwardShape)
            return ForwardRecord(float(shape.concurrency), 1.0)

        def kv_capacity_requests(self, context_len: int, max_batched_tokens: int) -> int:
            return 1

    cache = MemoryLatencyCache()
    written: list[int] = []
    model = CachedServingModel(
        Fake(),
        cache,
        deadline=time.monotonic() + 60,
        on_deadline=lambda: written.append(len(model.take_pending())),
    )
    first = ForwardShape(is_decode=True, concurrency=1, query_len=1, seq_len=10)
    assert model.decode_ms(1, 1, 10) == 1.0
    monkeypatch.setattr(time, "monotonic", lambda: 1e12)
    with pytest.raises(DeadlineExceededError):
        model.decode_ms(2, 1, 10)
    assert written == [1]  # the record computed before the deadline was handed over
    assert first in model._local


@pytest.mark.parametrize(
    ("device", "budget"),
    [("NVIDIA_H100_SXM_80G", 8192), ("NVIDIA_A100_SXM_80G", 2048), (DEVICE, 2048)],
)
def test_an_omitted_budget_is_the_engine_default_for_the_device(
    client: TestClient, device: str, budget: int
) -> None:
    """vLLM's device rule; msmodeling's own default is a fixed 8192 on every device."""
    for engine, expected in (("vllm", budget), ("msmodeling", 8192)):
        body = {k: v for k, v in SIMULATE.items() if k != "max_batched_tokens"}
        response = client.post("/v1/simulate", json={**body, "device": device, "engine": engine})
        assert response.status_code == 200, response.text
        document = response.json()
        assert document["input"]["max_batched_tokens"] == expected
        assert document["max_batched_tokens"] == expected
        assert document["prefill_num_chunks"] == -(-3500 // expected)
        search = {k: v for k, v in OPTIMIZE.items() if k != "max_batched_tokens"}
        found = client.post(
            "/v1/optimize", json={**search, "device": device, "engine": engine}
        ).json()
        assert found["input"]["max_batched_tokens"] == expected
        assert {row["max_batched_tokens"] for row in found["rows"]} <= {expected}


POISSON: dict[str, Any] = {
    **{key: value for key, value in SIMULATE.items() if key != "concurrency"},
    "workload": "poisson",
    "request_rate": 2.0,
    "num_requests": 200,
}


def test_poisson_simulate(client: TestClient) -> None:
    response = client.post("/v1/simulate", json=POISSON)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["workload"] == "poisson" and body["method"] == "poisson_simulation"
    assert body["window"] == "benchmark"
    assert (body["request_rate"], body["seed"], body["max_concurrency"]) == (2.0, 0, None)
    assert body["input"]["seed"] == 0  # the default, echoed
    assert body["num_requests"] == body["measured_requests"] == 200
    assert body["concurrency"] is None and body["batch_size"] is None
    assert body["ttft_ms"] > 0 and body["e2e_ms"] > body["ttft_ms"]
    assert body["request_throughput"] == pytest.approx(2.0, rel=0.25)
    assert body["total_throughput"] > body["output_throughput"] > 0
    assert body["mean_prefill_tokens_per_step"] > 0 and body["mean_decode_tokens_per_step"] > 0
    assert body["max_running"] >= 1 and body["feasible"]
    # The same seed gives the same answer; another seed other arrival times.
    assert client.post("/v1/simulate", json=POISSON).json()["ttft_ms"] == body["ttft_ms"]
    other = client.post("/v1/simulate", json={**POISSON, "seed": 1}).json()
    assert other["ttft_ms"] != body["ttft_ms"]


def test_poisson_over_replicas_with_a_client_cap(client: TestClient) -> None:
    body = client.post(
        "/v1/simulate",
        json={**POISSON, "dp_size": 2, "request_rate": 50.0, "max_concurrency": 9},
    ).json()
    assert body["concurrency"] == 9 and body["batch_size"] == 5
    assert body["replica_split"] == [
        {"replicas": 1, "concurrency": 5, "num_requests": 100, "request_rate": 25.0},
        {"replicas": 1, "concurrency": 4, "num_requests": 100, "request_rate": 25.0},
    ]
    assert body["mean_running_batch"] <= 5
    uncapped = client.post(
        "/v1/simulate", json={**POISSON, "dp_size": 2, "request_rate": 50.0}
    ).json()
    assert uncapped["mean_running_batch"] > body["mean_running_batch"]


def test_poisson_timeline_shows_the_idle_engine(client: TestClient) -> None:
    # One request every 20 s on average, each done in a few seconds: the engine idles.
    sparse = {**POISSON, "request_rate": 0.05, "num_requests": 20, "include_timeline": True}
    steps = client.post("/v1/simulate", json=sparse).json()["timeline"]
    assert sum(step["finished"] for step in steps) == 20
    ends = [step["start_ms"] + step["step_ms"] * step["repeat"] for step in steps]
    gaps = [b["start_ms"] - end for end, b in zip(ends, steps[1:], strict=False)]
    assert min(gaps) > -1e-6  # steps never overlap
    assert max(gaps) > 1000.0


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"request_rate": 0}, "request_rate", "greater than 0"),
        ({"request_rate": -1.5}, "request_rate", "greater than 0"),
        ({"request_rate": None}, "request_rate", "given for workload 'poisson'"),
        ({"num_requests": 0}, "num_requests", "greater than or equal to 1"),
        ({"num_requests": 10_001}, "num_requests", "less than or equal to 10000"),
        ({"seed": -1}, "seed", "greater than or equal to 0"),
        ({"concurrency": 8}, "concurrency", "max_concurrency"),
        ({"window": "steady_state"}, "window", "benchmark"),
        ({"requests_per_client": 3}, "requests_per_client", "omitted"),
        ({"dp_size": 4, "num_requests": 3}, "num_requests", "dp_size=4"),
        ({"dp_size": 4, "max_concurrency": 2}, "max_concurrency", "dp_size=4"),
    ],
)
def test_poisson_bad_input_is_422(
    client: TestClient, change: dict[str, Any], field: str, words: str
) -> None:
    body = problem(client.post("/v1/simulate", json={**POISSON, **change}), 422)
    assert body["errors"][0]["loc"][-1] == field
    assert words in body["detail"]


def test_poisson_options_belong_to_poisson(client: TestClient) -> None:
    for extra in ({"request_rate": 2.0}, {"seed": 3}, {"num_requests": 10}, {"max_concurrency": 4}):
        body = problem(client.post("/v1/simulate", json={**SIMULATE, **extra}), 422)
        field = next(iter(extra))
        assert body["errors"][0]["loc"] == ["body", field]
        assert "omitted for workload 'burst'" in body["detail"]
    missing = {key: value for key, value in SIMULATE.items() if key != "concurrency"}
    body = problem(client.post("/v1/simulate", json=missing), 422)
    assert body["errors"][0]["loc"] == ["body", "concurrency"]


def test_the_schema_defaults_are_accepted_for_every_workload(client: TestClient) -> None:
    """A generated client sends every field with its declared default (``seed: 0``,
    ``requests_per_client: 10``, ``request_rate: null``): that is never an error."""
    defaults = {"seed": 0, "request_rate": None, "num_requests": None, "max_concurrency": None}
    burst = client.post("/v1/simulate", json={**SIMULATE, **defaults})
    assert burst.status_code == 200, burst.text
    assert burst.json() == {**burst.json(), "workload": "burst"}
    poisson = client.post("/v1/simulate", json={**POISSON, "requests_per_client": 10})
    assert poisson.status_code == 200, poisson.text
    body = problem(client.post("/v1/simulate", json={**POISSON, "requests_per_client": 3}), 422)
    assert body["errors"][0]["loc"] == ["body", "requests_per_client"]


def test_unknown_workload_names_the_valid_ones(client: TestClient) -> None:
    body = problem(client.post("/v1/simulate", json={**SIMULATE, "workload": "open_loop"}), 422)
    assert body["errors"][0]["loc"] == ["body", "workload"]
    assert all(name in body["detail"] for name in ("'burst'", "'closed_loop'", "'poisson'"))


def test_optimize_refuses_poisson(client: TestClient) -> None:
    body = problem(client.post("/v1/optimize", json={**OPTIMIZE, "workload": "poisson"}), 422)
    assert body["errors"][0]["loc"] == ["body", "workload"]
    assert "not a request rate" in body["detail"]


def test_poisson_size_is_bounded(client: TestClient) -> None:
    many = {**POISSON, "input_length": 65536, "max_batched_tokens": 512, "num_requests": 2000}
    many["model"] = long_context_qwen3_32b()
    body = problem(client.post("/v1/simulate", json=many), 422)
    assert body["type"].endswith("search-limit")
    assert "lower num_requests to <= 1024" in body["detail"]


@pytest.mark.parametrize("workload", ["closed_loop", "poisson"])
def test_a_request_that_cannot_fit_is_an_infeasible_200(client: TestClient, workload: str) -> None:
    # Qwen3-32B's 16-bit weights alone fill a 64 GB device (TP1): no KV block fits.
    body = {**(POISSON if workload == "poisson" else SIMULATE), "workload": workload}
    body = {**body, "tp_size": 1, "quantize_linear_action": "DISABLED"}
    response = client.post("/v1/simulate", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    assert not result["feasible"]
    assert result["reason"].startswith("memory: 65.5 GB of 16-bit weights per device against")
    assert any("W8A8_DYNAMIC" in s for s in result["suggestions"])
    assert (result["method"], result["max_running"], result["ttft_ms"]) == ("none", 0, 0.0)
    assert result["workload"] == workload and result["memory_left_gb"] < 0
