"""Replay published measurements through the latency model and report the error.

Each row of a measurement file becomes a :class:`ValidationCase` of some ``kind``; a predictor
per kind (``PREDICTORS``) turns a case into a predicted value. Today one kind exists:

- ``ttft_bs1``: first-token latency of one request at batch 1 = one prefill forward of ``isl``
  tokens (TensorRT-LLM v0.9 performance overview, ``data/published_points.csv``).

Serving-level kinds (TTFT/TPOT under concurrency) plug in by adding a loader and a predictor
that runs the engine; the report code is kind-agnostic.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.catalog.devices import get_device
from app.core.catalog.models import get_model
from app.core.catalog.quantization import Quantization
from app.core.parallel import ParallelLayout
from app.core.runner.runner import ModelRunner, RequestInfo

DATA_DIR = Path(__file__).resolve().parents[1] / "catalog" / "data"
PUBLISHED_POINTS = DATA_DIR / "published_points.csv"
PERCENT = 100.0
P90 = 0.9

# Acceptance targets (issue 3): median APE over all points, and the worst device median.
TARGET_MEDIAN_APE_PCT = 15.0
TARGET_DEVICE_MEDIAN_APE_PCT = 25.0

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
# Published precision -> (linear action, attention action). TensorRT-LLM 0.9 "FP8" = FP8
# GEMMs; its context attention ran in 16-bit.
PRECISIONS: Mapping[str, Quantization] = {
    "FP8": Quantization(linear="FP8"),  # type: ignore[arg-type]
    "FP16": Quantization(),
    "BF16": Quantization(),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationCase:
    kind: str
    model: str  # catalog id
    device: str  # catalog name
    tp: int
    precision: str
    isl: int
    measured: float
    unit: str
    source: str

    @property
    def label(self) -> str:
        return f"{self.model} {self.device} TP{self.tp} {self.precision} isl={self.isl}"


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


def _summary(group: str, results: Sequence[CaseResult]) -> ErrorSummary:
    apes = [r.ape_pct for r in results]
    return ErrorSummary(
        group=group,
        count=len(results),
        median_ape_pct=statistics.median(apes),
        p90_ape_pct=_percentile(apes, P90),
        max_ape_pct=max(apes),
        mean_signed_error_pct=statistics.fmean(r.error_pct for r in results),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationReport:
    results: tuple[CaseResult, ...]
    per_device: tuple[ErrorSummary, ...]
    overall: ErrorSummary

    @property
    def targets_met(self) -> bool:
        return self.overall.median_ape_pct <= TARGET_MEDIAN_APE_PCT and all(
            s.median_ape_pct <= TARGET_DEVICE_MEDIAN_APE_PCT for s in self.per_device
        )

    def to_csv(self) -> str:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(
            [
                "kind",
                "model",
                "device",
                "tp",
                "precision",
                "isl",
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
                    c.model,
                    c.device,
                    c.tp,
                    c.precision,
                    c.isl,
                    f"{c.measured:.4g}",
                    f"{r.predicted:.4g}",
                    c.unit,
                    f"{r.error_pct:+.1f}",
                ]
            )
        return buffer.getvalue()

    def format_table(self) -> str:
        lines = [f"{'device':24s} {'n':>3s} {'median APE':>11s} {'p90 APE':>8s} {'max APE':>8s}"]
        for s in (*self.per_device, self.overall):
            lines.append(
                f"{s.group:24s} {s.count:3d} {s.median_ape_pct:10.1f}% {s.p90_ape_pct:7.1f}% "
                f"{s.max_ape_pct:7.1f}%"
            )
        verdict = "met" if self.targets_met else "NOT met"
        lines.append(
            f"targets (median <= {TARGET_MEDIAN_APE_PCT:g}%, every device <= "
            f"{TARGET_DEVICE_MEDIAN_APE_PCT:g}%): {verdict}"
        )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        def summary(s: ErrorSummary) -> dict[str, Any]:
            return {
                "group": s.group,
                "count": s.count,
                "median_ape_pct": s.median_ape_pct,
                "p90_ape_pct": s.p90_ape_pct,
                "max_ape_pct": s.max_ape_pct,
                "mean_signed_error_pct": s.mean_signed_error_pct,
            }

        return {
            "per_device": [summary(s) for s in self.per_device],
            "overall": summary(self.overall),
            "targets_met": self.targets_met,
        }


# -- loaders -------------------------------------------------------------------------------------
def load_published_points(path: Path = PUBLISHED_POINTS) -> list[ValidationCase]:
    """The ``ttft_bs1`` rows of ``published_points.csv`` whose model and device we know."""
    cases: list[ValidationCase] = []
    with path.open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            if row["metric"] != "ttft_bs1":
                continue
            model = MODEL_ALIASES.get(row["model"])
            device = DEVICE_ALIASES.get(row["hardware"])
            if model is None or device is None:
                continue
            cases.append(
                ValidationCase(
                    kind="ttft_bs1",
                    model=model,
                    device=device,
                    tp=int(row["tp"]),
                    precision=row["precision"].upper(),
                    isl=int(row["isl"]),
                    measured=float(row["value"]),
                    unit=row["unit"],
                    source=row["source"],
                )
            )
    return cases


# -- predictors ----------------------------------------------------------------------------------
def runner_for(case: ValidationCase) -> ModelRunner:
    return ModelRunner(
        get_model(case.model),
        get_device(case.device),
        ParallelLayout(tp=case.tp),
        PRECISIONS[case.precision],
    )


def predict_ttft_bs1(case: ValidationCase) -> float:
    """One prefill forward of ``isl`` tokens for one request (ms)."""
    request = RequestInfo(is_decode=False, concurrency=1, query_len=case.isl, seq_len=case.isl)
    return runner_for(case).run_inference(request).latency_ms


Predictor = Callable[[ValidationCase], float]
PREDICTORS: dict[str, Predictor] = {"ttft_bs1": predict_ttft_bs1}


def run_validation(
    cases: Iterable[ValidationCase] | None = None,
    predictors: Mapping[str, Predictor] | None = None,
) -> ValidationReport:
    """Predict every case and summarise the absolute percentage error per device."""
    table = PREDICTORS if predictors is None else predictors
    chosen = load_published_points() if cases is None else list(cases)
    results = tuple(CaseResult(case=c, predicted=table[c.kind](c)) for c in chosen)
    devices: dict[str, list[CaseResult]] = {}
    for result in results:
        devices.setdefault(result.case.device, []).append(result)
    return ValidationReport(
        results=results,
        per_device=tuple(_summary(name, items) for name, items in devices.items()),
        overall=_summary("overall", results),
    )
