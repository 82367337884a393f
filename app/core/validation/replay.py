"""Replay published measurements through the latency model and report the error.

Each row of a measurement file becomes a :class:`ValidationCase` of some ``kind``; every kind
has a loader (``LOADERS``) and a predictor (``PREDICTORS``) that turns a case into a predicted
value in the case's unit. Kinds today:

- ``ttft_bs1`` (the acceptance target): first-token latency of one request at batch 1 = one
  prefill forward of ``query_len`` tokens (TensorRT-LLM v0.9 performance overview,
  ``data/published_points.csv``).
- ``msmodeling_forward`` (reported, not a target): msmodeling's per-forward fidelity
  baselines on Ascend for the models the catalog has (``data/msmodeling_forward_cases.csv``).

Serving-level kinds (TTFT/TPOT under concurrency, ``data/measured_agg_serving_cases.csv``)
plug in by registering a loader and a predictor that runs the engine; the report is
kind-agnostic (errors grouped per kind and device).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.catalog.devices import get_device
from app.core.catalog.models import get_model
from app.core.catalog.quantization import Quantization, parse_quantization
from app.core.cost import ForwardShape
from app.core.errors import InfeasibleError, UnknownNameError
from app.core.optimizer.common import MemoLatency
from app.core.parallel import ParallelLayout
from app.core.runner.runner import ModelRunner
from app.core.runner.serving import RunnerServingModel
from app.core.spec import WorkloadSpec
from app.core.workload import simulate_serving

DATA_DIR = Path(__file__).resolve().parents[1] / "catalog" / "data"
PUBLISHED_POINTS = DATA_DIR / "published_points.csv"
MSMODELING_CASES = DATA_DIR / "msmodeling_forward_cases.csv"
SERVING_CASES = DATA_DIR / "measured_agg_serving_cases.csv"
SERVING_SOURCE = "ai-dynamo/aiconfigurator silicon samples (measured_agg_serving_cases.csv)"
MS_PER_S = 1e3
TARGET_KIND = "ttft_bs1"
PERCENT = 100.0
P90 = 0.9

# Acceptance targets (issue 3): median APE over all points, and the worst device median.
TARGET_MEDIAN_APE_PCT = 15.0
TARGET_DEVICE_MEDIAN_APE_PCT = 25.0
SERVING_TTFT_KIND = "serving_ttft"
SERVING_TPOT_KIND = "serving_tpot"


@dataclass(frozen=True, slots=True)
class Target:
    """Median APE limits: over all cases of a kind, and per summary group (if any)."""

    overall_median_pct: float
    group_median_pct: float | None


TARGETS: Mapping[str, Target] = {
    TARGET_KIND: Target(TARGET_MEDIAN_APE_PCT, TARGET_DEVICE_MEDIAN_APE_PCT),
    # Serving under load (issue 5): TPOT <= 10 % overall and <= 25 % per (device, engine,
    # model) group; TTFT <= 20 % overall.
    SERVING_TPOT_KIND: Target(10.0, 25.0),
    SERVING_TTFT_KIND: Target(20.0, None),
}

# Names used by the measurement files -> catalog names.
MODEL_ALIASES: Mapping[str, str] = {
    "GPT-J 6B": "EleutherAI/gpt-j-6b",
    "Mistral 7B": "mistralai/Mistral-7B-v0.1",
    "Mixtral 8x7B": "mistralai/Mixtral-8x7B-v0.1",
    "Llama-2-7B (LLaMA 7B)": "meta-llama/Llama-2-7b-hf",
    "Llama-2-70B (LLaMA 70B)": "meta-llama/Llama-2-70b-hf",
    "Falcon 180B": "tiiuae/falcon-180B",
}
DEVICE_ALIASES: Mapping[str, str] = {
    "H200 SXM 141GB": "NVIDIA_H200_SXM_141G",
    "H100 SXM 80GB": "NVIDIA_H100_SXM_80G",
    "L40S 48GB": "NVIDIA_L40S_48G",
    "A100 SXM4 80GB": "NVIDIA_A100_SXM_80G",
}
SERVING_DEVICE_ALIASES: Mapping[str, str] = {
    "H100 SXM 80GB": "NVIDIA_H100_SXM_80G",
    "H200 SXM 141GB": "NVIDIA_H200_SXM_141G",
    "B200 180GB": "NVIDIA_B200_SXM_180G",
}
#: TensorRT-LLM serving with FP8/NVFP4 GEMMs keeps an FP8 KV cache (its quantized recipes
#: quantize the KV cache together with the weights). Checked against the 16-bit-KV reading
#: per engine sweep: the TensorRT-LLM 1.0.0rc3 (H100) sweep's TPOT would prefer 16-bit KV
#: (its decode gap grows with concurrency x context), but its KV memory cannot hold it:
#: Qwen3-32B TP1 at 64 clients x 4352 tokens needs 73 GB of 16-bit KV next to 35 GB of
#: weights on an 80 GiB H100, and the measured TTFT (1.6 s) shows no queueing for KV. So the
#: cache is FP8 everywhere, and that sweep's slower decode attention stays a residual.
SERVING_PRECISIONS: Mapping[str, str] = {
    "fp8": "FP8+KV8",
    "fp8_block": "FP8+KV8",
    "nvfp4": "NVFP4+KV8",
}
#: "unrecorded" precision: the model's native 16-bit weights (the data's README). Both
#: readings were replayed (``load_agg_serving_cases(unrecorded_precision="FP8")``): 16-bit
#: fits the Llama-3.1-8B rows (TPOT group median APE 3.7 % vs 21.5 % read as FP8 GEMMs with
#: a 16-bit KV cache and 31.1 % as FP8 with an FP8 KV cache; TTFT 42.2 % vs 55.2 / 56.4 %).
UNRECORDED_PRECISION = "BF16"
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


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationCase:
    """One measured point: a deployment, a batch shape and the measured value."""

    kind: str
    model: str  # catalog id
    device: str  # catalog name
    tp: int
    dp: int = 1
    ep: int = 1
    precision: str
    is_decode: bool = False
    concurrency: int = 1
    query_len: int
    context_len: int = 0
    measured: float
    unit: str
    source: str
    name: str = ""
    output_len: int = 0
    engine: str = ""
    group: str = ""  # summary group; the device when empty

    @property
    def label(self) -> str:
        step = "decode" if self.is_decode else "prefill"
        layout = ParallelLayout(tp=self.tp, dp=self.dp, ep=self.ep).label
        return (
            f"{self.name + ': ' if self.name else ''}{self.model} {self.device} {layout} "
            f"{self.precision} {step} c={self.concurrency} q={self.query_len} "
            f"ctx={self.context_len}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseResult:
    case: ValidationCase
    predicted: float

    @property
    def error_pct(self) -> float:
        """Signed error, percent of the measurement (positive = model too slow)."""
        return (self.predicted - self.case.measured) / self.case.measured * PERCENT

    @property
    def ape_pct(self) -> float:
        return abs(self.error_pct)


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorSummary:
    kind: str
    group: str
    count: int
    median_ape_pct: float
    p90_ape_pct: float
    max_ape_pct: float
    mean_signed_error_pct: float


def _percentile(values: Sequence[float], fraction: float) -> float:
    """Linear-interpolated percentile (numpy's default), stdlib only."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    position = (len(ordered) - 1) * fraction
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _summary(kind: str, group: str, results: Sequence[CaseResult]) -> ErrorSummary:
    apes = [r.ape_pct for r in results]
    return ErrorSummary(
        kind=kind,
        group=group,
        count=len(results),
        median_ape_pct=statistics.median(apes),
        p90_ape_pct=_percentile(apes, P90),
        max_ape_pct=max(apes),
        mean_signed_error_pct=statistics.fmean(r.error_pct for r in results),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationReport:
    """Errors per (kind, device) and per kind; the targets apply to ``TARGET_KIND``."""

    results: tuple[CaseResult, ...]
    groups: tuple[ErrorSummary, ...]
    kinds: tuple[ErrorSummary, ...]

    @property
    def per_device(self) -> tuple[ErrorSummary, ...]:
        """Per-device errors of the target kind."""
        return tuple(s for s in self.groups if s.kind == TARGET_KIND)

    @property
    def overall(self) -> ErrorSummary:
        """All points of the target kind."""
        for summary in self.kinds:
            if summary.kind == TARGET_KIND:
                return summary
        raise LookupError(f"no {TARGET_KIND} cases in this report")

    def kind_targets_met(self, kind: str) -> bool | None:
        """Whether ``kind`` meets its target (``None``: no target or no cases of it)."""
        target = TARGETS.get(kind)
        overall = next((k for k in self.kinds if k.kind == kind), None)
        if target is None or overall is None:
            return None
        groups_ok = target.group_median_pct is None or all(
            s.median_ape_pct <= target.group_median_pct for s in self.groups if s.kind == kind
        )
        return overall.median_ape_pct <= target.overall_median_pct and groups_ok

    @property
    def targets_met(self) -> bool:
        """Every kind in the report that has a target meets it."""
        verdicts = [self.kind_targets_met(k.kind) for k in self.kinds]
        return all(v for v in verdicts if v is not None)

    def to_csv(self) -> str:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(
            [
                "kind",
                "name",
                "model",
                "device",
                "tp",
                "dp",
                "ep",
                "precision",
                "is_decode",
                "concurrency",
                "query_len",
                "context_len",
                "output_len",
                "engine",
                "measured",
                "predicted",
                "unit",
                "error_pct",
            ]
        )
        for r in self.results:
            c = r.case
            writer.writerow(
                [
                    c.kind,
                    c.name,
                    c.model,
                    c.device,
                    c.tp,
                    c.dp,
                    c.ep,
                    c.precision,
                    str(c.is_decode).lower(),
                    c.concurrency,
                    c.query_len,
                    c.context_len,
                    c.output_len,
                    c.engine,
                    f"{c.measured:.4g}",
                    f"{r.predicted:.4g}",
                    c.unit,
                    f"{r.error_pct:+.1f}",
                ]
            )
        return buffer.getvalue()

    def format_table(self) -> str:
        width = max([28, *(len(s.group) for s in self.groups)])
        header = (
            f"{'kind':19s} {'group':{width}s} {'n':>3s} {'median APE':>11s} {'p90 APE':>8s} "
            f"{'max APE':>8s} {'bias':>7s}"
        )
        lines = [header]
        for kind in self.kinds:
            rows = [s for s in self.groups if s.kind == kind.kind]
            for s in (*rows, kind):
                lines.append(
                    f"{s.kind:19s} {s.group:{width}s} {s.count:3d} {s.median_ape_pct:10.1f}% "
                    f"{s.p90_ape_pct:7.1f}% {s.max_ape_pct:7.1f}% {s.mean_signed_error_pct:+6.1f}%"
                )
        for kind in self.kinds:
            target = TARGETS.get(kind.kind)
            verdict = self.kind_targets_met(kind.kind)
            if target is None or verdict is None:
                continue
            groups = (
                f", every group <= {target.group_median_pct:g}%"
                if target.group_median_pct is not None
                else ""
            )
            lines.append(
                f"{kind.kind} targets (median <= {target.overall_median_pct:g}%{groups}): "
                f"{'met' if verdict else 'NOT met'}"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        def summary(s: ErrorSummary) -> dict[str, Any]:
            return {
                "kind": s.kind,
                "group": s.group,
                "count": s.count,
                "median_ape_pct": s.median_ape_pct,
                "p90_ape_pct": s.p90_ape_pct,
                "max_ape_pct": s.max_ape_pct,
                "mean_signed_error_pct": s.mean_signed_error_pct,
            }

        verdicts = {k.kind: self.kind_targets_met(k.kind) for k in self.kinds}
        has_target = any(v is not None for v in verdicts.values())
        return {
            "groups": [summary(s) for s in self.groups],
            "kinds": [summary(s) for s in self.kinds],
            "targets": {kind: v for kind, v in verdicts.items() if v is not None},
            "targets_met": self.targets_met if has_target else None,
        }


# -- loaders -------------------------------------------------------------------------------------
def load_published_points(path: Path = PUBLISHED_POINTS) -> list[ValidationCase]:
    """The ``ttft_bs1`` rows of ``published_points.csv`` whose model and device we know."""
    cases: list[ValidationCase] = []
    with path.open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            if row["metric"] != TARGET_KIND:
                continue
            model = MODEL_ALIASES.get(row["model"])
            device = DEVICE_ALIASES.get(row["hardware"])
            if model is None or device is None:
                continue
            isl = int(row["isl"])
            cases.append(
                ValidationCase(
                    kind=TARGET_KIND,
                    model=model,
                    device=device,
                    tp=int(row["tp"]),
                    precision=row["precision"].upper(),
                    query_len=isl,
                    measured=float(row["value"]),
                    unit=row["unit"],
                    source=row["source"],
                )
            )
    return cases


def load_msmodeling_cases(path: Path = MSMODELING_CASES) -> list[ValidationCase]:
    """msmodeling's per-forward fidelity baselines (seconds in the file, ms here)."""
    cases: list[ValidationCase] = []
    with path.open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            cases.append(
                ValidationCase(
                    kind="msmodeling_forward",
                    name=row["case"],
                    model=row["model"],
                    device=row["device"],
                    tp=int(row["tp"]),
                    dp=int(row["dp"]),
                    ep=int(row["ep"]),
                    precision=row["precision"].upper(),
                    is_decode=row["is_decode"].strip().lower() == "true",
                    concurrency=int(row["num_queries"]),
                    query_len=int(row["query_len"]),
                    context_len=int(row["context_len"]),
                    measured=float(row["baseline_s"]) * MS_PER_S,
                    unit="ms",
                    source=row["source"],
                )
            )
    return cases


_MEASUREMENT_KEY = (
    "model",
    "hardware",
    "engine",
    "isl",
    "osl",
    "concurrency",
    "ttft_ms",
    "tpot_ms",
)


def _layout_duplicates(rows: Sequence[Mapping[str, str]]) -> set[int]:
    """Rows that repeat another row's measurement (same model, hardware, engine, lengths,
    concurrency and both measured means to the digit) under a layout with more devices: one
    run cannot have been measured on two deployments, so all but the smallest are recording
    artefacts (in the sample: 20 DeepSeek-R1 rows recorded on 64 GPUs that repeat 8-GPU
    rows)."""
    smallest: dict[tuple[str, ...], int] = {}
    for row in rows:
        key = tuple(row[field] for field in _MEASUREMENT_KEY)
        devices = int(row["num_devices"] or 0)
        smallest[key] = min(devices, smallest.get(key, devices))
    return {
        index
        for index, row in enumerate(rows)
        if int(row["num_devices"] or 0) > smallest[tuple(row[f] for f in _MEASUREMENT_KEY)]
    }


def load_agg_serving_cases(
    path: Path = SERVING_CASES,
    *,
    unrecorded_precision: str = UNRECORDED_PRECISION,
    drop_layout_duplicates: bool = False,
) -> list[ValidationCase]:
    """Aggregated serving under a closed loop (AIConfigurator silicon samples): a TTFT and a
    TPOT case per row, grouped by (device, engine, model).

    Every row is replayed by default. ``drop_layout_duplicates`` leaves out rows whose
    measurement repeats a smaller deployment's (see :func:`_layout_duplicates`), for the
    figures with the recording artefacts removed."""
    cases: list[ValidationCase] = []
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    skip = _layout_duplicates(rows) if drop_layout_duplicates else set()
    for index, row in enumerate(rows):
        if index in skip:
            continue
        device = SERVING_DEVICE_ALIASES.get(row["hardware"])
        if device is None:
            continue
        precision = SERVING_PRECISIONS.get(row["gemm_quant"], unrecorded_precision)
        model = row["model"]
        common: dict[str, Any] = {
            "model": model,
            "device": device,
            "tp": int(row["tp"]) * int(row["pp"]),
            "dp": int(row["attn_dp"]),
            "ep": max(1, int(row["moe_ep"] or 1)),
            "precision": precision,
            "concurrency": int(row["concurrency"]),
            "query_len": int(row["isl"]),
            "output_len": int(row["osl"]),
            "unit": "ms",
            "source": SERVING_SOURCE,
            "name": row["case_id"],
            "engine": row["engine"],
            "group": f"{device} | {row['engine']} | {model}",
        }
        cases.append(
            ValidationCase(kind=SERVING_TTFT_KIND, measured=float(row["ttft_ms"]), **common)
        )
        cases.append(
            ValidationCase(kind=SERVING_TPOT_KIND, measured=float(row["tpot_ms"]), **common)
        )
    return cases


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


@functools.lru_cache(maxsize=64)
def _serving_models(
    model: str, device: str, tp: int, dp: int, ep: int, precision: str
) -> tuple[RunnerServingModel, MemoLatency]:
    """One runner per deployment, its shapes memoised across the cases that share it; the
    device carries TensorRT-LLM's per-iteration host cost on top of its own."""
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
    serving = RunnerServingModel(runner)
    return serving, MemoLatency(serving)


@functools.lru_cache(maxsize=4096)
def predict_serving(
    model: str,
    device: str,
    tp: int,
    dp: int,
    ep: int,
    precision: str,
    concurrency: int,
    input_length: int,
    output_length: int,
) -> tuple[float, float]:
    """Mean TTFT and TPOT (ms) of a closed loop of ``concurrency`` clients, benchmark window
    (every request counted, as the measurements were taken), TensorRT-LLM's token budget,
    per-iteration host cost and KV pool (:func:`trtllm_kv_capacity_requests`), the default
    scheduler (decode first, a mixed step costs the longer of its prefill and decode)."""
    serving, memo = _serving_models(model, device, tp, dp, ep, precision)
    data = WorkloadSpec(
        input_length=input_length,
        output_length=output_length,
        max_batched_tokens=TRTLLM_MAX_NUM_TOKENS,
    )
    capacity = trtllm_kv_capacity_requests(serving, input_length + output_length)
    if capacity < 1:
        raise InfeasibleError(f"{model} on {tp * dp} x {device}: no room for one request's KV")
    result = simulate_serving(data, concurrency, memo, dp=dp, max_num_seqs=capacity)
    return result.ttft_ms, result.tpot_ms


def trtllm_kv_capacity_requests(serving: RunnerServingModel, context_len: int) -> int:
    """Requests of ``context_len`` tokens whose KV blocks fit TensorRT-LLM's KV pool: the
    fraction ``TRTLLM_KV_FREE_MEMORY_FRACTION`` of what is left after the weights, the
    runtime memory and the activations of a full-budget step."""
    return serving.kv_capacity_requests(
        context_len, TRTLLM_MAX_NUM_TOKENS, kv_memory_fraction=TRTLLM_KV_FREE_MEMORY_FRACTION
    )


def _serving_key(case: ValidationCase) -> tuple[str, str, int, int, int, str, int, int, int]:
    return (
        case.model,
        case.device,
        case.tp,
        case.dp,
        case.ep,
        case.precision,
        case.concurrency,
        case.query_len,
        case.output_len,
    )


def predict_serving_ttft(case: ValidationCase) -> float:
    return predict_serving(*_serving_key(case))[0]


def predict_serving_tpot(case: ValidationCase) -> float:
    return predict_serving(*_serving_key(case))[1]


Loader = Callable[[], list[ValidationCase]]
Predictor = Callable[[ValidationCase], float]
LOADERS: dict[str, Loader] = {
    TARGET_KIND: load_published_points,
    "msmodeling_forward": load_msmodeling_cases,
    SERVING_TTFT_KIND: lambda: [c for c in load_agg_serving_cases() if c.kind == SERVING_TTFT_KIND],
    SERVING_TPOT_KIND: lambda: [c for c in load_agg_serving_cases() if c.kind == SERVING_TPOT_KIND],
}
PREDICTORS: dict[str, Predictor] = {
    TARGET_KIND: predict_forward_ms,
    "msmodeling_forward": predict_forward_ms,
    SERVING_TTFT_KIND: predict_serving_ttft,
    SERVING_TPOT_KIND: predict_serving_tpot,
}


def load_cases(
    kinds: Sequence[str], *, drop_layout_duplicates: bool = False
) -> list[ValidationCase]:
    """Every case of ``kinds``; ``drop_layout_duplicates`` leaves out the serving rows that
    repeat a smaller deployment's measurement (:func:`_layout_duplicates`)."""
    unknown = sorted(set(kinds) - set(LOADERS))
    if unknown:
        raise UnknownNameError(", ".join(unknown), LOADERS)
    serving = [k for k in kinds if k in (SERVING_TTFT_KIND, SERVING_TPOT_KIND)]
    chosen = [case for kind in kinds if kind not in serving for case in LOADERS[kind]()]
    if serving:
        rows = load_agg_serving_cases(drop_layout_duplicates=drop_layout_duplicates)
        chosen += [case for kind in serving for case in rows if case.kind == kind]
    return chosen


def run_validation(
    cases: Iterable[ValidationCase] | None = None,
    predictors: Mapping[str, Predictor] | None = None,
    kinds: Sequence[str] = (TARGET_KIND,),
    *,
    drop_layout_duplicates: bool = False,
) -> ValidationReport:
    """Predict every case (default: all cases of ``kinds``) and summarise the absolute
    percentage error per kind and device."""
    table = PREDICTORS if predictors is None else predictors
    if cases is None:
        chosen = load_cases(kinds, drop_layout_duplicates=drop_layout_duplicates)
    else:
        chosen = list(cases)
    results = tuple(CaseResult(case=c, predicted=table[c.kind](c)) for c in chosen)
    groups: dict[tuple[str, str], list[CaseResult]] = {}
    by_kind: dict[str, list[CaseResult]] = {}
    for result in results:
        group = result.case.group or result.case.device
        groups.setdefault((result.case.kind, group), []).append(result)
        by_kind.setdefault(result.case.kind, []).append(result)
    return ValidationReport(
        results=results,
        groups=tuple(_summary(kind, device, items) for (kind, device), items in groups.items()),
        kinds=tuple(_summary(kind, "overall", items) for kind, items in by_kind.items()),
    )
