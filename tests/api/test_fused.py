"""``mixed_latency: fused`` through the real ASGI app, the CLI and the latency cache."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.cache import MemoryLatencyCache, identity_digest, shape_key
from app.cli import main
from app.core.catalog import get_device, get_model, parse_quantization
from app.core.cost import ForwardShape, MixedShape
from app.core.parallel import ParallelLayout
from app.services.context import create_context
from app.services.cost_model import ModelFactory
from app.services.resolve import ResolvedDeployment
from app.settings import Settings

MODEL = "Qwen/Qwen3-32B"
SIMULATE: dict[str, Any] = {
    "model": MODEL,
    "device": "NVIDIA_H100_SXM_80G",
    "input_length": 4096,
    "output_length": 256,
    "max_batched_tokens": 2048,
    "concurrency": 32,
    "tp_size": 8,
}


def simulate(client: TestClient, mixed: str | None, **extra: Any) -> dict[str, Any]:
    scheduler: dict[str, Any] = {"name": "vllm"}
    if mixed is not None:
        scheduler["mixed_latency"] = mixed
    response = client.post("/v1/simulate", json={**SIMULATE, **extra, "scheduler": scheduler})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


@pytest.mark.parametrize("workload", ["burst", "closed_loop"])
def test_fused_sits_between_max_and_sum_and_is_echoed(client: TestClient, workload: str) -> None:
    extra = {"workload": workload, "requests_per_client": 2} if workload == "closed_loop" else {}
    by_rule = {rule: simulate(client, rule, **extra) for rule in ("max", "sum", "fused")}
    assert simulate(client, None, **extra)["scheduler"]["mixed_latency"] == "max"  # default
    for rule, body in by_rule.items():
        assert body["scheduler"]["mixed_latency"] == rule
        assert body["input"]["scheduler"]["mixed_latency"] == rule
    ttft = {rule: body["ttft_ms"] for rule, body in by_rule.items()}
    makespan = {rule: body["makespan_ms"] for rule, body in by_rule.items()}
    steps = {body["steps"] for body in by_rule.values()}
    assert len(steps) == 1  # same decisions, other costs
    assert ttft["max"] < ttft["fused"] < ttft["sum"]
    assert makespan["max"] < makespan["fused"] < makespan["sum"]


def test_fused_steps_in_the_timeline(client: TestClient) -> None:
    body = simulate(client, "fused", include_timeline=True, concurrency=8)
    timeline = body["timeline"]
    assert any(step["fused"] for step in timeline)
    for step in timeline:
        assert step["fused"] == (step["p_step"] > 0 and step["d_step"] > 0)
        if step["fused"]:
            assert step["prefill_ms"] == step["decode_ms"] == step["step_ms"]
    assert not any(
        step["fused"] for step in simulate(client, "max", include_timeline=True)["timeline"]
    )


def test_fused_forwards_are_cached_and_reused(client: TestClient) -> None:
    cold = simulate(client, "fused")["stats"]
    assert cold["forward_evaluations"] == cold["cache"]["misses"] == cold["shapes"] > 0
    warm = simulate(client, "fused")["stats"]
    assert warm["forward_evaluations"] == 0
    assert warm["cache"]["hits"] == cold["shapes"] and warm["cache"]["round_trips"] == 1


def test_optimize_with_fused_steps(client: TestClient) -> None:
    body = {
        "model": MODEL,
        "device": "NVIDIA_H100_SXM_80G",
        "num_devices": 8,
        "input_length": 4096,
        "output_length": 512,
        "max_batched_tokens": 2048,
        "tpot_limit_ms": 50,
        "tp_sizes": [8],
        "scheduler": {"name": "sglang_mixed_chunk", "mixed_latency": "fused"},
    }
    first = client.post("/v1/optimize", json=body).json()
    assert first["best"] is not None and first["best"]["tpot_ms"] <= 50
    assert first["stats"]["forward_evaluations"] == first["stats"]["cache"]["misses"] > 0
    again = client.post("/v1/optimize", json={**body, "top_k": 1}).json()
    assert again["stats"]["forward_evaluations"] == 0
    assert again["best"] == first["best"]


def test_mixed_keys_never_collide_with_forward_keys() -> None:
    digest = identity_digest("fake")
    prefill = ForwardShape(is_decode=False, concurrency=1, query_len=2048, seq_len=2048)
    decode = ForwardShape(is_decode=True, concurrency=64, query_len=1, seq_len=2049)
    mixed = MixedShape(prefill=prefill, decode=decode)
    key = shape_key(digest, mixed)
    assert key == f"chunkwise:v1:lat:{digest}:m:1:2048:2048:64:1:2049"
    assert len({key, shape_key(digest, prefill), shape_key(digest, decode)}) == 3
    # Another phase letter and six numbers: no prefill/decode key can spell it.
    assert all(":m:" not in shape_key(digest, s) for s in (prefill, decode))


def test_the_cache_keeps_prefill_decode_and_fused_records_apart() -> None:
    """One deployment, the three shapes of one mixed step: three keys, three evaluations."""
    context = create_context(Settings(cache_backend="memory", log_level="warning"))
    try:
        deployment = ResolvedDeployment(
            model=get_model(MODEL),
            device=get_device("NVIDIA_H100_SXM_80G"),
            quantization=parse_quantization(None, None),
            reserved_memory_gb=None,
            num_mtp_tokens=0,
            mtp_acceptance_rates=(),
        )
        model = ModelFactory(context, deployment)(ParallelLayout(tp=8))
        prefill = ForwardShape(is_decode=False, concurrency=1, query_len=2048, seq_len=2048)
        decode = ForwardShape(is_decode=True, concurrency=64, query_len=1, seq_len=2049)
        mixed = MixedShape(prefill=prefill, decode=decode)
        found = model.forward_latencies_ms([prefill, decode, mixed])
        assert model.usage.computed == 3 and len(set(model.keys_seen)) == 3
        assert max(found[prefill], found[decode]) < found[mixed] < found[prefill] + found[decode]
        model.flush()
        assert isinstance(context.cache, MemoryLatencyCache) and len(context.cache) == 3
        assert model.mixed_ms(mixed) == found[mixed]
    finally:
        context.close()


def test_cli_mixed_latency_fused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APP_CACHE_BACKEND", "memory")
    argv = [
        "simulate",
        MODEL,
        "--device",
        "NVIDIA_H100_SXM_80G",
        "--input-length",
        "4096",
        "--output-length",
        "64",
        "--max-batched-tokens",
        "2048",
        "--concurrency",
        "8",
        "--tp-size",
        "8",
        "--scheduler",
        "vllm",
        "--mixed-latency",
        "fused",
        "--format",
        "json",
    ]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["scheduler"]["mixed_latency"] == "fused"
