"""Predictions of a case: one forward of its shape (``ttft_bs1``, ``msmodeling_forward``), or a
closed-loop serving simulation under TensorRT-LLM's engine settings (``serving_ttft``,
``serving_tpot``).

:class:`ServingReplay` is the validator's one memo: per deployment, the serving model and its
:class:`~app.core.optimizer.MemoLatency` (the forward shapes shared by the cases of that
deployment); per measured row, the (TTFT, TPOT) pair of its one simulation (a row gives a TTFT
case and a TPOT case); for one :func:`~app.core.validation.run_validation` call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from app.core.catalog.devices import get_device
from app.core.catalog.models import get_model
from app.core.catalog.quantization import Quantization, parse_quantization
from app.core.cost import ForwardShape
from app.core.errors import InfeasibleError
from app.core.optimizer.common import MemoLatency
from app.core.parallel import ParallelLayout
from app.core.runner.runner import ModelRunner
from app.core.runner.serving import RunnerServingModel
from app.core.spec import WorkloadSpec
from app.core.validation.cases import (
    SERVING_TPOT_KIND,
    SERVING_TTFT_KIND,
    TARGET_KIND,
    ValidationCase,
)
from app.core.workload import simulate_serving

Predictor = Callable[[ValidationCase], float]

#: TensorRT-LLM's default ``max_num_tokens``: the token budget of one engine step.
TRTLLM_MAX_NUM_TOKENS = 8192
#: TensorRT-LLM gives the KV cache this fraction of the memory left after the weights and the
#: activations (``kv_cache_free_gpu_memory_fraction``, default 0.9) ...
TRTLLM_KV_FREE_MEMORY_FRACTION = 0.9
#: ... after the runtime's own memory (CUDA context, NCCL and cuBLAS workspaces, captured
#: CUDA graphs) is gone.
TRTLLM_RUNTIME_MEMORY_GB = 3.0
#: Host time of one TensorRT-LLM (PyTorch backend) executor iteration that the GPU waits for:
#: scheduling, input preparation, sampling and response handling in Python. Fitted once on
#: the serving TPOT rows (a decode-step gap of 1-2 ms over every model, layout and
#: concurrency once collectives were costed as NVSwitch one-/two-shot kernels), jointly with
#: the NVIDIA graph-kernel cost (3 µs): 0.5 / 0.75 / 1 / 1.25 ms -> TPOT median APE
#: 9.1 / 8.8 / 9.6 / 10.6 %, mean signed error -3.8 / -1.8 / +0.2 / +2.2 %; 0.75 ms taken.
#: Engine policy, not device: the batch-1 ``ttft_bs1`` points (TensorRT-LLM 0.9 C++ runtime)
#: do not carry it.
TRTLLM_STEP_OVERHEAD_US = 750.0
# Published precision -> (linear action, attention action). TensorRT-LLM 0.9 "FP8" = FP8
# GEMMs; its context attention ran in 16-bit.
PRECISIONS: Mapping[str, Quantization] = {
    "FP8": parse_quantization("FP8"),
    "NVFP4": parse_quantization("NVFP4"),
    "FP8+KV8": parse_quantization("FP8", "FP8"),
    "NVFP4+KV8": parse_quantization("NVFP4", "FP8"),
    "FP16": parse_quantization(),
    "BF16": parse_quantization(),
    "W8A8": parse_quantization("W8A8_DYNAMIC"),
}


# -- predictors ----------------------------------------------------------------------------------
def runner_for(case: ValidationCase) -> ModelRunner:
    return ModelRunner(
        get_model(case.model),
        get_device(case.device),
        ParallelLayout(tp=case.tp, dp=case.dp, ep=case.ep),
        PRECISIONS[case.precision],
    )


def predict_forward_ms(case: ValidationCase) -> float:
    """One forward of the case's shape (ms): ``ttft_bs1`` is a batch-1 prefill of ``isl``."""
    shape = ForwardShape(
        is_decode=case.is_decode,
        concurrency=case.concurrency,
        query_len=case.query_len,
        seq_len=case.context_len + case.query_len,
    )
    return runner_for(case).run_inference(shape).latency_ms


def trtllm_serving_model(
    model: str, device: str, tp: int, dp: int, ep: int, precision: str
) -> RunnerServingModel:
    """The serving model of a deployment as TensorRT-LLM runs it: the device carries the
    engine's per-iteration host cost on top of its own, the runtime keeps its memory."""
    base = get_device(device)
    engine_device = dataclasses.replace(
        base, forward_overhead_us=base.forward_overhead_us + TRTLLM_STEP_OVERHEAD_US
    )
    runner = ModelRunner(
        get_model(model),
        engine_device,
        ParallelLayout(tp=tp, dp=dp, ep=ep),
        PRECISIONS[precision],
        reserved_memory_gb=TRTLLM_RUNTIME_MEMORY_GB,
    )
    return RunnerServingModel(runner)


def trtllm_kv_capacity_requests(serving: RunnerServingModel, context_len: int) -> int:
    """Requests of ``context_len`` tokens whose KV blocks fit TensorRT-LLM's KV pool: the
    fraction ``TRTLLM_KV_FREE_MEMORY_FRACTION`` of what is left after the weights, the
    runtime memory and the activations of a full-budget step."""
    return serving.kv_capacity_requests(
        context_len, TRTLLM_MAX_NUM_TOKENS, kv_memory_fraction=TRTLLM_KV_FREE_MEMORY_FRACTION
    )


_Deployment = tuple[str, str, int, int, int, str]


class ServingReplay:
    """Serving predictions of one validation run, memoised (see the module docstring)."""

    __slots__ = ("_models", "_results")

    def __init__(self) -> None:
        self._models: dict[_Deployment, tuple[RunnerServingModel, MemoLatency]] = {}
        self._results: dict[tuple[_Deployment, int, int, int], tuple[float, float]] = {}

    def _model(self, deployment: _Deployment) -> tuple[RunnerServingModel, MemoLatency]:
        found = self._models.get(deployment)
        if found is None:
            serving = trtllm_serving_model(*deployment)
            found = self._models[deployment] = (serving, MemoLatency(serving))
        return found

    def predict(self, case: ValidationCase) -> tuple[float, float]:
        """Mean TTFT and TPOT (ms) of a closed loop of ``concurrency`` clients, benchmark
        window (every request counted, as the measurements were taken), TensorRT-LLM's token
        budget, per-iteration host cost and KV pool (:func:`trtllm_kv_capacity_requests`),
        the default scheduler (decode first, a mixed step costs the longer of its prefill
        and decode)."""
        deployment = (case.model, case.device, case.tp, case.dp, case.ep, case.precision)
        key = (deployment, case.concurrency, case.query_len, case.output_len)
        found = self._results.get(key)
        if found is None:
            found = self._results[key] = self._simulate(deployment, case)
        return found

    def _simulate(self, deployment: _Deployment, case: ValidationCase) -> tuple[float, float]:
        serving, memo = self._model(deployment)
        input_length, output_length = case.query_len, case.output_len
        data = WorkloadSpec(
            input_length=input_length,
            output_length=output_length,
            max_batched_tokens=TRTLLM_MAX_NUM_TOKENS,
        )
        capacity = trtllm_kv_capacity_requests(serving, input_length + output_length)
        if capacity < 1:
            model, device, tp, dp = deployment[:4]
            raise InfeasibleError(f"{model} on {tp * dp} x {device}: no room for one request's KV")
        result = simulate_serving(data, case.concurrency, memo, dp=case.dp, max_num_seqs=capacity)
        return result.ttft_ms, result.tpot_ms

    def ttft_ms(self, case: ValidationCase) -> float:
        return self.predict(case)[0]

    def tpot_ms(self, case: ValidationCase) -> float:
        return self.predict(case)[1]


def predictors() -> dict[str, Predictor]:
    """The predictor of every kind, over a fresh :class:`ServingReplay` (one run's memo)."""
    serving = ServingReplay()
    return {
        TARGET_KIND: predict_forward_ms,
        "msmodeling_forward": predict_forward_ms,
        SERVING_TTFT_KIND: serving.ttft_ms,
        SERVING_TPOT_KIND: serving.tpot_ms,
    }
