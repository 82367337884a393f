"""Predictions of a case: one forward of its shape (``ttft_bs1``, ``msmodeling_forward``), or a
closed-loop serving simulation under the row's engine profile (``serving_ttft``,
``serving_tpot``; :mod:`app.core.profiles`).

:class:`ServingReplay` is the validator's one memo: per deployment, the serving model and its
:class:`~app.core.optimizer.MemoLatency` (the forward shapes shared by the cases of that
deployment); per measured row, the (TTFT, TPOT) pair of its one simulation (a row gives a TTFT
case and a TPOT case); for one :func:`~app.core.validation.run_validation` call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from app.core.calibration.parameters import apply_to_device, apply_to_profile
from app.core.catalog.devices import get_device
from app.core.catalog.hardware import Device
from app.core.catalog.models import get_model
from app.core.catalog.quantization import Quantization, parse_quantization
from app.core.cost import ForwardShape
from app.core.errors import InfeasibleError
from app.core.limits import DEFAULT_LENGTH_RANGE_RATIO
from app.core.optimizer.common import MemoLatency
from app.core.parallel import ParallelLayout
from app.core.profiles import EngineProfile, device_profile, get_profile
from app.core.runner.runner import ModelRunner
from app.core.runner.serving import (
    ForwardMemo,
    RunnerServingModel,
    engine_quantization,
    engine_runner,
)
from app.core.spec import WorkloadSpec
from app.core.validation.cases import (
    SERVING_TPOT_KIND,
    SERVING_TTFT_KIND,
    TARGET_KIND,
    ValidationCase,
)
from app.core.workload import (
    DEFAULT_POISSON_SEED,
    ServingResult,
    ranks_are_coupled,
    simulate_poisson_serving,
    simulate_serving,
)
from app.core.workload.closed_loop import PlanMemo

Predictor = Callable[[ValidationCase], float]

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
    "W4A16": parse_quantization("W4A16"),
    "MXFP4": parse_quantization("MXFP4"),
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


def engine_family(engine: str) -> str:
    """The engine column's first word (``"vllm 0.15.1"`` -> ``"vllm"``)."""
    return (engine.split() or [""])[0].lower()


def case_profile(case: ValidationCase) -> EngineProfile:
    """The engine profile a measured row ran under (its engine column's family; the
    published TensorRT-LLM sweeps carry ``trtllm``) as it runs on the row's device, with the
    row's engine options."""
    device = get_device(case.device)
    profile = device_profile(
        engine_family(case.engine), vendor=device.vendor, device_name=device.name
    )
    return profile.with_overrides(dict(case.engine_options)) if case.engine_options else profile


def engine_serving_model(
    profile: EngineProfile,
    model: str,
    device: str,
    tp: int,
    dp: int,
    ep: int,
    precision: str,
    calibration: Mapping[str, float] | None = None,
    forwards: ForwardMemo | None = None,
    num_mtp_tokens: int = 0,
    mtp_acceptance_rates: tuple[float, ...] = (),
    *,
    moe_over_dp: bool = False,
) -> RunnerServingModel:
    """The serving model of a deployment as ``profile``'s engine runs it (its reserve, KV
    pool, KV-cache dtype, CUDA-graph limit and iteration host time): what the service builds
    for a request naming that engine; ``calibration``: fitted parameters replacing the
    device's efficiencies (:func:`~app.core.calibration.parameters.apply_to_device`);
    ``forwards``: a memo of device times shared with other serving models (see
    :data:`~app.core.runner.serving.ForwardMemo`); ``num_mtp_tokens`` drafts verified per
    decode step, emitting ``1 + sum(mtp_acceptance_rates)`` tokens; ``moe_over_dp``: the
    experts tensor-parallel over all ``tp x dp`` ranks (:class:`ParallelLayout`)."""
    runner = engine_runner(
        profile,
        get_model(model),
        apply_to_device(get_device(device), calibration or {}),
        ParallelLayout(tp=tp, dp=dp, ep=ep, moe_over_dp=moe_over_dp),
        engine_quantization(profile, PRECISIONS[precision]),
        num_mtp_tokens=num_mtp_tokens,
    )
    return RunnerServingModel(
        runner,
        num_mtp_tokens,
        mtp_acceptance_rates,
        profile=profile,
        forwards=forwards,
    )


#: (engine, engine options, model, device, tp, dp, ep, precision)
_Deployment = tuple[str, tuple[tuple[str, str | float], ...], str, str, int, int, int, str]
#: A request rate no benchmark reaches: every request is sent at t = 0 (``--request-rate inf``,
#: the benchmark clients' default), at most ``max_concurrency`` in flight.
ALL_AT_ONCE_RATE = 1.0e6


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchmarkRun:
    """One published benchmark run: a deployment (catalog model and device, layout, the
    validator's precision, the engine column), its lengths and its load."""

    engine: str
    model: str
    device: str
    tp: int
    dp: int
    ep: int
    precision: str
    input_length: int
    output_length: int
    num_requests: int
    max_concurrency: int | None  # None: no cap on requests in flight
    request_rate: float  # requests/s; ALL_AT_ONCE_RATE: every request sent at t = 0
    max_batched_tokens: int | None = None  # None: the engine profile's
    max_num_seqs: int | None = None  # None: the engine profile's
    npu_graph_mode: str | None = None  # vLLM-Ascend's cudagraph_mode; None: the profile's
    async_scheduling: bool | None = None  # None: the engine profile's overlap_scheduling
    #: MTP: drafted tokens verified per step and the acceptance of each drafted position.
    num_mtp_tokens: int = 0
    mtp_acceptance_rates: tuple[float, ...] = ()


class ServingReplay:
    """Serving predictions of one validation run, memoised (see the module docstring), under
    the fitted parameters of a calibration when given (the device's efficiencies and the
    engine profile's host and front-end times)."""

    __slots__ = ("_benchmarks", "_calibration", "_forwards", "_models", "_plans", "_results")

    def __init__(
        self,
        calibration: Mapping[str, float] | None = None,
        plans: PlanMemo | None = None,
        forwards: ForwardMemo | None = None,
    ) -> None:
        self._calibration = dict(calibration or {})
        # The plans need no latency: replays under other parameters can share them; so can
        # the device times of forwards (keyed by the runner, which holds the efficiencies).
        self._plans: PlanMemo = {} if plans is None else plans
        self._forwards = forwards
        self._models: dict[_Deployment, tuple[RunnerServingModel, MemoLatency]] = {}
        self._results: dict[tuple[_Deployment, int, int, int, float], tuple[float, float]] = {}
        self._benchmarks: dict[BenchmarkRun, tuple[WorkloadSpec, ServingResult]] = {}

    def _model(
        self,
        deployment: _Deployment,
        profile: EngineProfile | None = None,
        mtp: tuple[int, tuple[float, ...]] = (0, ()),
    ) -> tuple[RunnerServingModel, MemoLatency]:
        """``deployment``'s serving model under ``profile`` (default: the profile its first
        field names; a profile with overrides, or ``mtp`` drafts and their acceptance, are
        keyed by a first field that says them)."""
        found = self._models.get(deployment)
        if found is None:
            engine, options, model, device, tp, dp, ep, precision = deployment
            serving = engine_serving_model(
                profile or self._profile(engine, options),
                model,
                device,
                tp,
                dp,
                ep,
                precision,
                calibration=self._calibration,
                forwards=self._forwards,
                num_mtp_tokens=mtp[0],
                mtp_acceptance_rates=mtp[1],
            )
            found = self._models[deployment] = (serving, MemoLatency(serving))
        return found

    def predict(self, case: ValidationCase) -> tuple[float, float]:
        """Mean TTFT and TPOT (ms) of a closed loop of ``concurrency`` clients, benchmark
        window (every request counted, as the measurements were taken), under the row's
        engine profile: its policy, token budget, running cap, KV pool and host times."""
        # the profile as its engine runs on the row's device (an NPU build's graph mode)
        profile = apply_to_profile(case_profile(case), self._calibration)
        deployment = (
            profile.name,
            case.engine_options,
            case.model,
            case.device,
            case.tp,
            case.dp,
            case.ep,
            case.precision,
        )
        lengths = (case.query_len, case.output_len, case.length_range_ratio)
        key = (deployment, case.concurrency, *lengths)
        found = self._results.get(key)
        if found is None:
            found = self._results[key] = self._simulate(deployment, profile, case)
        return found

    def _profile(
        self, engine: str, options: tuple[tuple[str, str | float], ...] = ()
    ) -> EngineProfile:
        profile = get_profile(engine)
        if options:
            profile = profile.with_overrides(dict(options))
        return apply_to_profile(profile, self._calibration)

    def _simulate(
        self, deployment: _Deployment, profile: EngineProfile, case: ValidationCase
    ) -> tuple[float, float]:
        serving, memo = self._model(deployment, profile)
        device = serving.runner.device
        data = _engine_workload(
            profile,
            device,
            case.query_len,
            case.output_len,
            length_range_ratio=case.length_range_ratio,
        )
        # The memo does not know the KV pool: the running cap is the engine's and the pool's.
        capacity = serving.kv_capacity_requests(
            data.mean_input_length + data.mean_output_length, data.max_batched_tokens
        )
        if capacity < 1:
            raise InfeasibleError(
                f"{case.model} on {case.tp * case.dp} x {case.device}: no room for one request's KV"
            )
        cap = profile.running_cap(device.hbm_capacity_gb, device.name)
        result = simulate_serving(
            data,
            case.concurrency,
            memo,
            profile.scheduler_for(device.hbm_capacity_gb, device.name),
            dp=case.dp,
            max_num_seqs=capacity if cap is None else min(cap, capacity),
            coupled=ranks_are_coupled(serving.runner.model.is_moe, serving.runner.parallel),
            plans=self._plans,
        )
        return data.reported_ttft_ms(result.ttft_ms), result.tpot_ms

    def predict_benchmark(
        self, run: BenchmarkRun, percentile: float | None = None, *, itl: bool = False
    ) -> tuple[float, float]:
        """Mean TTFT and TPOT (ms) of a benchmark client's run (``vllm bench serve``,
        ``ais_bench``), or their ``percentile`` over the run's requests (50: the medians the
        clients print): ``run.num_requests`` requests arriving at ``run.request_rate`` (all at
        once at ``ALL_AT_ONCE_RATE``), at most ``run.max_concurrency`` in flight, every request
        counted; under the engine profile of ``run.engine``, with the source's token budget and
        running cap when it printed them (what ``/v1/simulate`` runs for a poisson request).
        ``itl`` with a ``percentile``: the second value is that percentile of the gaps between
        tokens instead (the client's ITL with one token per streamed chunk)."""
        data, result = self.benchmark_result(run)
        if percentile is None:
            return data.reported_ttft_ms(result.ttft_ms), result.tpot_ms
        second = result.itl_percentile_ms if itl else result.tpot_percentile_ms
        return data.reported_ttft_ms(result.ttft_percentile_ms(percentile)), second(percentile)

    def benchmark_result(self, run: BenchmarkRun) -> tuple[WorkloadSpec, ServingResult]:
        """The workload and the simulated serving result of a benchmark run (memoised: a
        run's mean, percentile and throughput rows share one simulation)."""
        found = self._benchmarks.get(run)
        if found is None:
            found = self._benchmarks[run] = self._benchmark(run)
        return found

    def _benchmark(self, run: BenchmarkRun) -> tuple[WorkloadSpec, ServingResult]:
        base = device_profile(
            engine_family(run.engine), vendor=get_device(run.device).vendor, device_name=run.device
        )
        overrides = {
            "max_batched_tokens": run.max_batched_tokens,
            "max_num_seqs": run.max_num_seqs,
            "npu_graph_mode": run.npu_graph_mode,
            "overlap_scheduling": run.async_scheduling,
        }
        profile = apply_to_profile(base.with_overrides(overrides), self._calibration)
        mtp = (run.num_mtp_tokens, run.mtp_acceptance_rates)
        key = (
            f"{profile.name} max_num_seqs={run.max_num_seqs} budget={run.max_batched_tokens} "
            f"graph={profile.npu_graph_mode} async={profile.overlap_scheduling} mtp={mtp}"
        )
        deployment = (key, (), run.model, run.device, run.tp, run.dp, run.ep, run.precision)
        serving, memo = self._model(deployment, profile, mtp)
        device = serving.runner.device
        data = _engine_workload(profile, device, run.input_length, run.output_length, mtp)
        result = simulate_poisson_serving(
            data,
            run.request_rate,
            memo,
            profile.scheduler_for(device.hbm_capacity_gb, device.name),
            dp=run.dp,
            num_requests=run.num_requests,
            seed=DEFAULT_POISSON_SEED,
            max_concurrency=run.max_concurrency,
            max_num_seqs=profile.running_cap(device.hbm_capacity_gb, device.name),
            token_gaps=True,  # a run's ITL rows read them; one simulation serves all its rows
        )
        return data, result

    def ttft_ms(self, case: ValidationCase) -> float:
        return self.predict(case)[0]

    def tpot_ms(self, case: ValidationCase) -> float:
        return self.predict(case)[1]


def _engine_workload(
    profile: EngineProfile,
    device: Device,
    input_length: int,
    output_length: int,
    mtp: tuple[int, tuple[float, ...]] = (0, ()),
    length_range_ratio: float = DEFAULT_LENGTH_RANGE_RATIO,
) -> WorkloadSpec:
    """The lengths (and their range) under the engine's token budget on the device and its
    front-end time, with ``mtp`` drafts per step and their acceptance."""
    return WorkloadSpec(
        num_mtp_tokens=mtp[0],
        mtp_acceptance_rates=mtp[1],
        input_length=input_length,
        output_length=output_length,
        length_range_ratio=length_range_ratio,
        max_batched_tokens=profile.token_budget(device.hbm_capacity_gb, device.name, device.vendor),
        **profile.spec_terms(input_length),
    )


def predictors() -> dict[str, Predictor]:
    """The predictor of every kind, over a fresh :class:`ServingReplay` (one run's memo)."""
    serving = ServingReplay()
    return {
        TARGET_KIND: predict_forward_ms,
        "msmodeling_forward": predict_forward_ms,
        SERVING_TTFT_KIND: serving.ttft_ms,
        SERVING_TPOT_KIND: serving.tpot_ms,
    }
