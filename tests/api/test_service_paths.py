"""One service path per job: ``services.forward`` / ``run_forward`` and ``services.validate``."""

from __future__ import annotations

import json

import pytest

from app.core.errors import UnknownModelError, UnknownNameError
from app.core.runner import build_runner, forward_request, forward_to_dict, parallel_layout
from app.core.validation import LOADERS, TARGET_KIND
from app.models.forward import ForwardRequest
from app.services.context import create_context
from app.services.cost_model import CachedServingModel, ForwardRecord
from app.services.forward import forward as forward_service
from app.services.forward import run_forward as run_forward_service
from app.services.validate import validate, validation_kinds
from app.settings import Settings

MTP_DECODE = ForwardRequest(
    model="deepseek-ai/DeepSeek-V3",
    device="NVIDIA_H200_SXM_141G",
    num_devices=8,
    num_queries=16,
    query_length=1,
    context_length=3000,
    decode=True,
    num_mtp_tokens=2,
)


def _direct(request: ForwardRequest) -> dict[str, object]:
    """The forward computed straight from the runner (what ``chunkwise forward`` did)."""
    runner = build_runner(
        str(request.model),
        str(request.device),
        parallel=parallel_layout(
            num_devices=request.num_devices, tp=request.tp_size, ep=request.ep_size
        ),
        num_mtp_tokens=request.num_mtp_tokens,
    )
    shape = forward_request(
        num_queries=request.num_queries,
        query_length=request.query_length,
        context_length=request.context_length,
        decode=request.decode,
        num_mtp_tokens=request.num_mtp_tokens,
    )
    return forward_to_dict(runner, runner.run_inference(shape))


@pytest.mark.parametrize(
    "request_",
    [
        MTP_DECODE,
        MTP_DECODE.model_copy(update={"decode": False, "query_length": 2048}),
        ForwardRequest(
            model="Qwen/Qwen3-8B", device="NVIDIA_H100_SXM_80G", num_queries=1, query_length=512
        ),
    ],
    ids=["mtp-decode", "mtp-prefill", "dense-prefill"],
)
def test_run_forward_is_the_runner_document(request_: ForwardRequest) -> None:
    run = run_forward_service(request_)
    assert json.dumps(run.to_dict()) == json.dumps(_direct(request_))
    expected_drafts = request_.num_mtp_tokens if request_.decode else 0
    assert run.to_dict()["request"]["mtp_draft_tokens"] == expected_drafts


def test_api_forward_body_is_run_forward_plus_input_and_cache() -> None:
    context = create_context(Settings(cache_backend="memory", log_level="warning"))
    try:
        cold = forward_service(context, MTP_DECODE)
        warm = forward_service(context, MTP_DECODE)
    finally:
        context.close()
    document = run_forward_service(MTP_DECODE).to_dict()
    for response in (cold, warm):
        body = response.model_dump(mode="json", exclude={"input", "cache"})
        assert body["latency_ms"] == document["latency_ms"]
        assert body["request"] == document["request"]
        assert body["identity"] == document["identity"]
    assert (cold.cache.misses, warm.cache.hits) == (1, 1)
    assert context.stats.forward_evaluations == 1


def test_run_forward_resolves_like_the_api() -> None:
    with pytest.raises(UnknownModelError):
        run_forward_service(MTP_DECODE.model_copy(update={"model": "no/such-model"}))


def test_validate_defaults_and_kinds() -> None:
    report = validate()
    assert {r.case.kind for r in report.results} == {TARGET_KIND}
    assert tuple(LOADERS) == validation_kinds()
    with pytest.raises(UnknownNameError):
        validate(["no_such_kind"])


def test_one_memo_layer_between_the_search_and_the_cache() -> None:
    """The search's MemoLatency passes through the cache-backed model (no second memo) and
    each shape is computed once: a repeat asks nothing more of the evaluator."""
    from app.cache import MemoryLatencyCache
    from app.core.cost import AnyShape, ForwardShape
    from app.core.optimizer import MemoLatency

    calls: list[AnyShape] = []

    class Fake:
        def identity(self) -> str:
            return "fake"

        def evaluate(self, shape: AnyShape) -> ForwardRecord:
            calls.append(shape)
            assert isinstance(shape, ForwardShape)
            return ForwardRecord(float(shape.concurrency), 5.0 - shape.concurrency)

        def kv_capacity_requests(self, context_len: int, max_batched_tokens: int) -> int:
            return 1

    model = CachedServingModel(Fake(), MemoryLatencyCache())
    memo = MemoLatency(model)
    shape = ForwardShape(is_decode=True, concurrency=3, query_len=1, seq_len=10)
    assert memo.decode_ms(3, 1, 10) == 3.0
    assert memo.memory_left_gb(shape) == 2.0
    assert memo.forward_latencies_ms([shape, shape]) == {shape: 3.0}
    assert calls == [shape]
    assert not memo.latency_ms and not memo.memory_left  # nothing held twice
    assert memo.evaluations == model.shapes_seen == 1
    assert (model.usage.misses, model.usage.computed, model.usage.hits) == (1, 1, 0)
