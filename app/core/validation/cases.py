"""The measured cases the validator replays: one :class:`ValidationCase` per measurement,
loaded from the catalog's data files (published points, msmodeling baselines, serving runs)."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.limits import DEFAULT_LENGTH_RANGE_RATIO
from app.core.parallel import ParallelLayout
from app.core.validation.recipe_layouts import recipe_layout
from app.core.validation.recipes import row_settings

DATA_DIR = Path(__file__).resolve().parents[1] / "catalog" / "data"
PUBLISHED_POINTS = DATA_DIR / "published_points.csv"
MSMODELING_CASES = DATA_DIR / "msmodeling_forward_cases.csv"
SERVING_CASES = DATA_DIR / "measured_agg_serving_cases.csv"
SERVING_SOURCE = "ai-dynamo/aiconfigurator silicon samples (measured_agg_serving_cases.csv)"
MS_PER_S = 1e3
TARGET_KIND = "ttft_bs1"
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
#: Hardware names of the serving measurement files -> catalog devices.
SERVING_DEVICE_ALIASES: Mapping[str, str] = {
    "H100 SXM 80GB": "NVIDIA_H100_SXM_80G",
    "H200 SXM 141GB": "NVIDIA_H200_SXM_141G",
    "B200 180GB": "NVIDIA_B200_SXM_180G",
    "B300 SXM 288GB": "NVIDIA_B300_SXM_288G",
    "GB200 (NVL72)": "NVIDIA_GB200_186G",
    "GB300 (NVL72)": "NVIDIA_GB300_288G",
}
#: Quantization columns -> the checkpoint's format; the KV-cache dtype is the engine
#: profile's rule (``kv_cache_dtype``: TensorRT-LLM keeps an FP8 KV cache for FP8/FP4
#: checkpoints, vLLM and SGLang the 16-bit one). Checked against the 16-bit-KV reading on the
#: TensorRT-LLM 1.0.0rc3 (H100) sweep: its TPOT would prefer 16-bit KV, but its KV memory
#: cannot hold it (Qwen3-32B TP1 at 64 clients x 4352 tokens needs 73 GB of 16-bit KV next to
#: 35 GB of weights on an 80 GiB H100, and the measured TTFT, 1.6 s, shows no queueing).
#: ``int4_wo``: INT4 weight-only GEMMs with 16-bit activations (Kimi-K2.5's native
#: checkpoint).
SERVING_PRECISIONS: Mapping[str, str] = {
    "fp8": "FP8",
    "fp8_block": "FP8",
    "nvfp4": "NVFP4",
    "int4_wo": "W4A16",
}
#: "unrecorded" precision: the model's native 16-bit weights (the data's README). Both
#: readings were replayed (``load_agg_serving_cases(unrecorded_precision="FP8")``): 16-bit
#: fits the Llama-3.1-8B rows (TPOT group median APE 3.7 % vs 21.5 % read as FP8 GEMMs with
#: a 16-bit KV cache and 31.1 % as FP8 with an FP8 KV cache; TTFT 42.2 % vs 55.2 / 56.4 %).
UNRECORDED_PRECISION = "BF16"


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
    #: Engine options over the engine's profile (a serving row's recipe settings,
    #: :mod:`app.core.validation.recipes`), sorted (name, value) pairs.
    engine_options: tuple[tuple[str, str | float], ...] = ()
    #: The benchmark client's length range (``--random-range-ratio``; 1: fixed lengths,
    #: :attr:`~app.core.spec.WorkloadSpec.length_range_ratio`).
    length_range_ratio: float = DEFAULT_LENGTH_RANGE_RATIO

    @property
    def label(self) -> str:
        step = "decode" if self.is_decode else "prefill"
        layout = ParallelLayout(tp=self.tp, dp=self.dp, ep=self.ep).label
        return (
            f"{self.name + ': ' if self.name else ''}{self.model} {self.device} {layout} "
            f"{self.precision} {step} c={self.concurrency} q={self.query_len} "
            f"ctx={self.context_len}"
        )


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


def layout_duplicates(rows: Sequence[Mapping[str, str]]) -> set[int]:
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
    TPOT case per row, grouped by (device, engine, model), each under the engine settings and
    client length range its benchmark recipe states (:func:`~app.core.validation.recipes.
    row_settings`, as ``validate --cases`` replays the same rows), on the server its recipe
    ran where the row records its ``tp x ep`` (:func:`~app.core.validation.recipe_layouts.
    recipe_layout`).

    Every row is replayed by default. ``drop_layout_duplicates`` leaves out rows whose
    measurement repeats a smaller deployment's (see :func:`layout_duplicates`), for the
    figures with the recording artefacts removed."""
    cases: list[ValidationCase] = []
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    skip = layout_duplicates(rows) if drop_layout_duplicates else set()
    for index, row in enumerate(rows):
        if index in skip:
            continue
        device = SERVING_DEVICE_ALIASES.get(row["hardware"])
        if device is None:
            continue
        precision = SERVING_PRECISIONS.get(row["gemm_quant"], unrecorded_precision)
        model = row["model"]
        settings = row_settings(row)
        tp, dp, ep = int(row["tp"]) * int(row["pp"]), int(row["attn_dp"]), int(row["moe_ep"] or 1)
        ran = recipe_layout(row)  # the server its recipe ran, where the row records another
        if ran is not None and ran.layout is not None:
            tp, dp, ep = ran.layout
        common: dict[str, Any] = {
            "model": model,
            "device": device,
            "tp": tp,
            "dp": dp,
            "ep": max(1, ep),
            "precision": precision,
            "concurrency": int(row["concurrency"]),
            "query_len": int(row["isl"]),
            "output_len": int(row["osl"]),
            "unit": "ms",
            "source": SERVING_SOURCE,
            "name": row["case_id"],
            "engine": row["engine"],
            "group": f"{device} | {row['engine']} | {model}",
            "engine_options": settings.options,
            "length_range_ratio": settings.length_range_ratio,
        }
        cases.append(
            ValidationCase(kind=SERVING_TTFT_KIND, measured=float(row["ttft_ms"]), **common)
        )
        cases.append(
            ValidationCase(kind=SERVING_TPOT_KIND, measured=float(row["tpot_ms"]), **common)
        )
    return cases
