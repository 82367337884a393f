"""Replay any file of measured serving runs (``chunkwise validate --cases FILE.csv``).

A file has exactly the columns of ``shared/validation/measured_agg_serving_cases.csv``
(:data:`CASE_COLUMNS`): a deployment (``model``, ``hardware``, ``engine``, ``gemm_quant``,
``moe_quant``, ``tp``, ``pp``, ``attn_dp``, ``moe_tp``, ``moe_ep``, ``num_devices``), a closed
loop (``isl``, ``osl``, ``concurrency``) and its measured means (``ttft_ms``, ``tpot_ms``).
Every row gets one outcome: the predicted TTFT and TPOT of its closed-loop simulation, or the
reason it cannot be predicted (an unknown model or device, an architecture or quantization the
latency model does not represent, a deployment whose weights or one request's KV do not fit).
No row is dropped silently.

How a row maps to a deployment, the way the product would map a user's:

- ``model``: the catalog resolves Hugging Face ids case-insensitively and strips repackaging
  suffixes (``nvidia/Llama-3.1-8B-Instruct-FP8``, ``Qwen/Qwen3-235B-A22B-FP8`` -> the base
  architecture); a model of another organisation (``nvidia/DeepSeek-R1-NVFP4``) resolves by
  its name after the slash.
- ``hardware``: ``SERVING_DEVICE_ALIASES`` (the names the measurement files use) or a
  catalog device name.
- ``gemm_quant`` / ``moe_quant``: :data:`QUANTIZATIONS`; a row whose two columns read as
  different formats is refused (per-layer quantization is not modelled); an FP4 label of a
  model whose checkpoint is natively FP4 in another format is that format (gpt-oss-120b's
  MXFP4, which the sample writes "nvfp4").
- layout: ``tp x pp`` tensor-parallel ranks, ``attn_dp`` attention data-parallel replicas,
  ``moe_ep`` expert-parallel ranks; a ``tp`` that does not divide the attention heads is read
  as the engine runs it (:func:`row_layout`: wide expert parallelism, or the reason not); a row
  whose public recipe ran another deployment than the one recorded (a ``tp`` that is a
  disaggregated deployment's GPU total, or a ``tp x ep`` product) replays as that deployment
  (:mod:`app.core.validation.recipe_layouts`).
- engine: the engine column's first word (the family: ``vllm``, ``sglang``, ``trtllm``) picks
  the engine profile the row is simulated under (:mod:`app.core.profiles`: policy, token
  budget, running cap, KV pool and dtype, CUDA-graph limit, host and front-end time), as
  ``engine`` does for a request; another family is refused with the valid names. The family
  also groups the errors.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import re
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.calibration.profile import CalibrationProfile
from app.core.catalog.devices import get_device
from app.core.catalog.models import get_model, model_names, resolve_model_name
from app.core.errors import (
    ChunkwiseError,
    InvalidParameterError,
    UnknownModelError,
    UnsupportedError,
)
from app.core.limits import DEFAULT_LENGTH_RANGE_RATIO
from app.core.validation.cases import (
    SERVING_DEVICE_ALIASES,
    SERVING_PRECISIONS,
    SERVING_SOURCE,
    SERVING_TTFT_KIND,
    UNRECORDED_PRECISION,
    ValidationCase,
    layout_duplicates,
)
from app.core.validation.csv_text import csv_lines, malformed_csv
from app.core.validation.disagg_recipes import DisaggSettings
from app.core.validation.group_out import (
    DeploymentResidual,
    IntervalCheck,
    format_checks,
    leave_deployment_out,
)
from app.core.validation.intervals import CaseSpreads, case_residual, case_spreads
from app.core.validation.predict import ServingReplay, engine_family
from app.core.validation.recipe_layouts import RecipeLayout, recipe_layout
from app.core.validation.recipes import DEFAULT_SETTINGS, RowSettings, row_settings
from app.core.validation.replicas import (
    METRICS,
    MODEL_ERROR_FACTOR,
    OVERALL,
    FloorComparison,
    PredictedConfiguration,
    configuration_columns,
    floor_comparisons,
    log_pct,
    predicted_configurations,
    replica_report,
)
from app.core.validation.report import P90, PERCENT, percentile

#: The columns of a measurement file, in the order of the shared sample.
CASE_COLUMNS: tuple[str, ...] = (
    "case_id",
    "model",
    "hardware",
    "engine",
    "gemm_quant",
    "moe_quant",
    "tp",
    "pp",
    "attn_dp",
    "moe_tp",
    "moe_ep",
    "num_devices",
    "isl",
    "osl",
    "concurrency",
    "ttft_ms",
    "tpot_ms",
)
#: Rows one file may hold (a replay simulates every one of them).
MAX_CASE_ROWS = 10_000
#: A prediction within this share of the measurement counts as close (the issue's +-25 %).
CLOSE_APE_PCT = 25.0

_UNSTATED = ("unrecorded", "")
#: Quantization columns -> the validator's precision (linear layers + KV cache): the serving
#: loader's ``SERVING_PRECISIONS`` (an FP8 or FP4 checkpoint keeps an FP8 KV cache), and
#: "unrecorded" (or an empty ``moe_quant`` of a dense model) as the native 16-bit weights.
QUANTIZATIONS: Mapping[str, str] = {
    **SERVING_PRECISIONS,
    **dict.fromkeys(_UNSTATED, UNRECORDED_PRECISION),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class RowOutcome:
    """One row: its measurements and either both predictions or the reason for none."""

    case_id: str
    hardware: str
    engine_family: str
    model: str
    measured_ttft_ms: float
    measured_tpot_ms: float
    ttft_ms_pred: float | None = None
    tpot_ms_pred: float | None = None
    error: str = ""
    #: 80 % prediction intervals (:mod:`app.core.calibration.interval`).
    ttft_ms_interval: tuple[float, float] | None = None
    tpot_ms_interval: tuple[float, float] | None = None
    #: With a calibration: whether it covers the row, and why not.
    calibration_note: str = ""
    #: How the engine settings of the row are known (:mod:`app.core.validation.recipes`):
    #: ``recipe``, ``ambiguous`` or ``default``, and the recipe's note and source.
    settings: str = "default"
    settings_note: str = ""
    #: A refused row's reason without its value, what the report counts refusals by (blank:
    #: the file's rows are not counted by reason).
    refusal: str = ""
    #: A row that measured a throughput (tokens or requests per second, NaN: none) and its
    #: prediction of the same quantity (the published-Ascend-results file's throughput rows).
    measured_throughput: float = math.nan
    throughput_pred: float | None = None
    #: The labelled assumptions a represented row stands on (``; ``-joined; blank: none), e.g.
    #: a card the source does not state (the published-Ascend-results file).
    assumed: str = ""

    @property
    def refused(self) -> bool:
        return self.ttft_ms_pred is None

    @property
    def inside(self) -> list[bool]:
        """For each interval, whether it holds the measurement."""
        out = []
        for interval, measured in (
            (self.ttft_ms_interval, self.measured_ttft_ms),
            (self.tpot_ms_interval, self.measured_tpot_ms),
        ):
            if interval is not None and measured > 0:
                out.append(interval[0] <= measured <= interval[1])
        return out

    @property
    def ttft_error_pct(self) -> float | None:
        return _error_pct(self.ttft_ms_pred, self.measured_ttft_ms)

    @property
    def tpot_error_pct(self) -> float | None:
        return _error_pct(self.tpot_ms_pred, self.measured_tpot_ms)

    @property
    def throughput_error_pct(self) -> float | None:
        return _error_pct(self.throughput_pred, self.measured_throughput)


def _error_pct(predicted: float | None, measured: float) -> float | None:
    if predicted is None or not measured > 0:
        return None
    return (predicted - measured) / measured * PERCENT


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupErrors:
    """Absolute % errors of the predicted rows of one group (``None`` without predictions)."""

    group: str
    rows: int
    refused: int
    ttft_median_ape_pct: float | None
    ttft_p90_ape_pct: float | None
    ttft_close_share: float | None
    tpot_median_ape_pct: float | None
    tpot_p90_ape_pct: float | None
    #: Share of measurements inside their 80 % interval (TTFT and TPOT together).
    interval_coverage: float | None = None
    #: Throughput rows' median absolute error (``None``: the group measured none).
    throughput_median_ape_pct: float | None = None


def _group_errors(group: str, outcomes: Sequence[RowOutcome]) -> GroupErrors:
    ttft = [abs(e) for o in outcomes if (e := o.ttft_error_pct) is not None]
    tpot = [abs(e) for o in outcomes if (e := o.tpot_error_pct) is not None]
    inside = [flag for o in outcomes for flag in o.inside]
    throughput = [abs(e) for o in outcomes if (e := o.throughput_error_pct) is not None]
    return GroupErrors(
        group=group,
        rows=len(outcomes),
        refused=sum(o.refused for o in outcomes),
        ttft_median_ape_pct=statistics.median(ttft) if ttft else None,
        ttft_p90_ape_pct=percentile(ttft, P90) if ttft else None,
        ttft_close_share=sum(e <= CLOSE_APE_PCT for e in ttft) / len(ttft) if ttft else None,
        tpot_median_ape_pct=statistics.median(tpot) if tpot else None,
        tpot_p90_ape_pct=percentile(tpot, P90) if tpot else None,
        interval_coverage=sum(inside) / len(inside) if inside else None,
        throughput_median_ape_pct=statistics.median(throughput) if throughput else None,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseFileReport:
    """Every row's outcome, the errors overall, per (hardware, engine family) and per
    (hardware, engine family, model)."""

    outcomes: tuple[RowOutcome, ...]
    overall: GroupErrors
    by_engine: tuple[GroupErrors, ...]
    by_model: tuple[GroupErrors, ...]
    #: The errors per engine family, beside the replica floor of that family
    #: (:mod:`app.core.validation.replicas`): the family's floor and the model's error on its
    #: replicated configurations against their centres, then the file's.
    by_family: tuple[GroupErrors, ...] = ()
    floors: tuple[FloorComparison, ...] = ()
    replicated: tuple[PredictedConfiguration, ...] = ()
    #: The uncalibrated 80 % intervals checked leave-deployment-out
    #: (:mod:`app.core.validation.group_out`): per engine family, then overall.
    interval_checks: tuple[IntervalCheck, ...] = ()

    @property
    def refusal_counts(self) -> tuple[tuple[str, int], ...]:
        """Refused rows per reason (rows that carry one), the most frequent first."""
        counts = Counter(o.refusal for o in self.outcomes if o.refused and o.refusal)
        return tuple(counts.most_common())

    @property
    def represented_share(self) -> float:
        """The share of the rows predicted (not refused)."""
        return sum(not o.refused for o in self.outcomes) / len(self.outcomes)

    @property
    def assumption_counts(self) -> tuple[tuple[str, int], ...]:
        """Represented rows per labelled assumption (a row may stand on several), the most
        frequent first."""
        represented = (o.assumed for o in self.outcomes if not o.refused and o.assumed)
        counts = Counter(a for assumed in represented for a in assumed.split(ASSUMPTION_SEP))
        return tuple(counts.most_common())

    @property
    def without_assumptions(self) -> GroupErrors:
        """The overall errors over the rows represented without an assumption."""
        return _group_errors(
            "overall, no assumed rows", [o for o in self.outcomes if not o.assumed]
        )

    def to_csv(self) -> str:
        """One line per input row: ``case_id,ttft_ms_pred,tpot_ms_pred,error`` and the rest."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(OUT_COLUMNS)
        for o in self.outcomes:
            writer.writerow(
                [
                    o.case_id,
                    _number(o.ttft_ms_pred),
                    _number(o.tpot_ms_pred),
                    o.error,
                    o.hardware,
                    o.engine_family,
                    o.model,
                    _number(o.measured_ttft_ms),
                    _number(o.measured_tpot_ms),
                    _signed(o.ttft_error_pct),
                    _signed(o.tpot_error_pct),
                    *_bounds(o.ttft_ms_interval),
                    *_bounds(o.tpot_ms_interval),
                    o.calibration_note,
                    o.settings,
                    o.settings_note,
                    _number(o.throughput_pred),
                    _number(o.measured_throughput),
                    _signed(o.throughput_error_pct),
                    o.assumed,
                ]
            )
        return buffer.getvalue()

    def format_table(self) -> str:
        assumed = self.assumption_counts
        # beside the overall errors, the same without the rows that stand on an assumption
        overall = (self.overall, self.without_assumptions) if assumed else (self.overall,)
        groups = (*self.by_engine, *self.by_model, *overall)
        width = max(len(g.group) for g in groups)
        # the throughput column only where a row measured one (the Ascend results file)
        throughput = self.overall.throughput_median_ape_pct is not None
        lines = [
            f"{'group':{width}s} {'rows':>5s} {'refused':>7s} {'TTFT med':>9s} {'TTFT p90':>9s} "
            f"{'<=25%':>6s} {'TPOT med':>9s} {'TPOT p90':>9s} {'in 80%':>6s}"
            + (f" {'thru med':>9s}" if throughput else "")
        ]
        for g in (*self.by_engine, *overall, *self.by_model):
            lines.append(
                f"{g.group:{width}s} {g.rows:5d} {g.refused:7d} {_pct(g.ttft_median_ape_pct):>9s} "
                f"{_pct(g.ttft_p90_ape_pct):>9s} {_share(g.ttft_close_share):>6s} "
                f"{_pct(g.tpot_median_ape_pct):>9s} {_pct(g.tpot_p90_ape_pct):>9s} "
                f"{_share(g.interval_coverage):>6s}"
                + (f" {_pct(g.throughput_median_ape_pct):>9s}" if throughput else "")
            )
        if self.refusal_counts:
            lines.append(
                f"represented {self.represented_share:.1%} of {len(self.outcomes)} rows; "
                "refused per reason:"
            )
            lines.extend(f"{count:5d}  {reason}" for reason, count in self.refusal_counts)
        if assumed:
            lines.append(
                f"represented under a labelled assumption (OUT column 'assumed'): "
                f"{sum(not o.refused and bool(o.assumed) for o in self.outcomes)} rows"
            )
            lines.extend(f"{count:5d}  {reason}" for reason, count in assumed)
        return "\n".join([*lines, *self._floor_lines(), *format_checks(self.interval_checks)])

    def _floor_lines(self) -> list[str]:
        """Per engine family: the model's median error over all its rows, the replica floor
        of its replicated configurations, the model's error against their centres, the ratio
        and the 1.5x verdict, and how many configurations are model error."""
        if not self.floors:
            return []
        errors = {g.group: g for g in (*self.by_family, self.overall)}
        lines = [
            "",
            f"replica floor (validate --replicas): {self.floors[-1].configurations} replicated "
            "configurations predicted; 'vs centre' = the model against each configuration's "
            f"geometric mean; over {MODEL_ERROR_FACTOR}x the floor is model error",
            f"{'engine family':14s} {'metric':6s} {'all rows':>8s} {'configs':>7s} "
            f"{'floor':>7s} {'vs centre':>9s} {'ratio':>7s} {'verdict':>7s} {'model-limited':>13s}",
        ]
        for f in self.floors:
            rows = errors.get(f.group)
            for metric in METRICS:
                median = None if rows is None else getattr(rows, f"{metric}_median_ape_pct")
                ratio = f.ratio(metric)
                limited = f"{getattr(f, f'{metric}_model_limited')} of {f.configurations}"
                lines.append(
                    f"{f.group:14s} {metric.upper():6s} {_pct(median):>8s} {f.configurations:7d} "
                    f"{_pct(getattr(f, f'{metric}_floor_pct')):>7s} "
                    f"{_pct(getattr(f, f'{metric}_model_pct')):>9s} "
                    f"{'-' if ratio is None else f'{ratio:.1f}x':>7s} {f.verdict(metric):>7s} "
                    f"{limited:>13s}"
                )
        return lines

    def to_dict(self) -> dict[str, Any]:
        def group(g: GroupErrors) -> dict[str, Any]:
            return {field: getattr(g, field) for field in GroupErrors.__dataclass_fields__}

        return {
            "overall": group(self.overall),
            "by_engine": [group(g) for g in self.by_engine],
            "by_model": [group(g) for g in self.by_model],
            "by_family": [group(g) for g in self.by_family],
            "floor": [
                {
                    **{field: getattr(f, field) for field in FloorComparison.__dataclass_fields__},
                    **{f"{m}_verdict": f.verdict(m) for m in METRICS},
                }
                for f in self.floors
            ],
            "replicated": [_replicated(p) for p in self.replicated],
            "intervals_leave_deployment_out": [
                {field: getattr(c, field) for field in IntervalCheck.__dataclass_fields__}
                for c in self.interval_checks
            ],
            "refused": [
                {"case_id": o.case_id, "error": o.error} for o in self.outcomes if o.refused
            ],
            "refusal_counts": dict(self.refusal_counts),
            "assumption_counts": dict(self.assumption_counts),
            "overall_without_assumptions": group(self.without_assumptions),
        }


def _replicated(p: PredictedConfiguration) -> dict[str, Any]:
    c = p.configuration
    out: dict[str, Any] = {
        "engine_family": c.family,
        "case_ids": [m.case_id for m in c.measurements],
        "rows": len(c.rows),
    }
    for metric in METRICS:
        out[f"{metric}_centre_ms"] = c.centre_ms(metric)
        out[f"{metric}_ms_pred"] = p.prediction(metric)
        out[f"{metric}_floor_pct"] = log_pct([p.floor_log(metric)])
        out[f"{metric}_vs_centre_pct"] = log_pct([p.error_log(metric)])
        out[f"{metric}_model_limited"] = p.model_limited(metric)
    return out


OUT_COLUMNS = (
    "case_id",
    "ttft_ms_pred",
    "tpot_ms_pred",
    "error",
    "hardware",
    "engine_family",
    "model",
    "ttft_ms",
    "tpot_ms",
    "ttft_error_pct",
    "tpot_error_pct",
    "ttft_ms_lo",
    "ttft_ms_hi",
    "tpot_ms_lo",
    "tpot_ms_hi",
    "calibration_note",
    "settings",
    "settings_note",
    "throughput_pred",
    "throughput",
    "throughput_error_pct",
    "assumed",
)
#: Between two assumptions of one row in the ``assumed`` column.
ASSUMPTION_SEP = "; "


def _bounds(interval: tuple[float, float] | None) -> tuple[str, str]:
    return ("", "") if interval is None else (_number(interval[0]), _number(interval[1]))


def _number(value: float | None) -> str:
    return "" if value is None or math.isnan(value) else f"{value:.6g}"


def _signed(value: float | None) -> str:
    return "" if value is None else f"{value:+.1f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


# -- reading ---------------------------------------------------------------------------------
def read_case_rows(
    text: str, columns: Sequence[str] = CASE_COLUMNS, optional: Sequence[str] = ()
) -> list[dict[str, str]]:
    """The rows of a measurement file with exactly ``columns`` (and any of ``optional``), after
    checking its header and size (domain errors that name the problem, a malformed CSV
    included)."""
    try:
        return _read_rows(csv.DictReader(csv_lines(text)), columns, optional)
    except csv.Error as exc:
        raise malformed_csv(exc) from None


def _read_rows(
    reader: csv.DictReader[str], columns: Sequence[str], optional: Sequence[str] = ()
) -> list[dict[str, str]]:
    header = tuple(reader.fieldnames or ())
    missing = [c for c in columns if c not in header]
    unknown = [c for c in header if c not in columns and c not in optional]
    if missing or unknown:
        problems = []
        if missing:
            problems.append(f"missing {', '.join(missing)}")
        if unknown:
            problems.append(f"unknown {', '.join(unknown)}")
        raise InvalidParameterError(
            "columns", "; ".join(problems), f"exactly the columns {', '.join(columns)}"
        )
    rows: list[dict[str, str]] = []
    for row in reader:
        if len(rows) == MAX_CASE_ROWS:
            raise InvalidParameterError("rows", f"more than {MAX_CASE_ROWS}", "a smaller file")
        rows.append({key: (value or "").strip() for key, value in row.items() if key})
    if not rows:
        raise InvalidParameterError("rows", 0, "at least one measurement row")
    return rows


# -- mapping ---------------------------------------------------------------------------------
#: A file's numbers are plain ASCII decimals: Python's ``int`` and ``float`` also read
#: ``1_000``, other scripts' digits (``١٠٠``), ``inf`` and ``nan``, none of which a measurement
#: file means.
_INTEGER = re.compile(r"[0-9]+")
#: The physical range of a measured mean latency (TTFT or TPOT), ms: no token is served in less
#: than a microsecond, and a benchmark whose mean exceeds a day measured no serving deployment.
#: Outside it a measurement is a 422 naming its column (a 1e-306 ms TTFT overflowed the fit's
#: log errors: a 500).
MIN_MEASURED_MS = 1e-3
MAX_MEASURED_MS = 86_400_000.0
_DECIMAL = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _positive_int(row: Mapping[str, str], column: str, default: int | None = None) -> int:
    text = row[column]
    if not text and default is not None:
        return default
    if not _INTEGER.fullmatch(text) or int(text) < 1:
        raise InvalidParameterError(column, text, "a positive integer (ASCII digits)")
    return int(text)


def _ranks(row: Mapping[str, str], column: str) -> int:
    """A parallel size where 0 or blank means "not split" (the sample writes ``moe_ep`` 0 for
    dense models), as the earlier serving loader read it."""
    text = row[column] or "1"
    if not _INTEGER.fullmatch(text):
        raise InvalidParameterError(column, text, "an integer >= 0 (ASCII digits)")
    return max(1, int(text))


def _measured(row: Mapping[str, str], column: str) -> float:
    text = row[column]
    value = float(text) if _DECIMAL.fullmatch(text) else math.nan
    if not MIN_MEASURED_MS <= value <= MAX_MEASURED_MS:  # NaN fails too
        raise InvalidParameterError(
            column,
            text,
            f"a latency in [{MIN_MEASURED_MS:g}, {MAX_MEASURED_MS:g}] ms (an ASCII decimal)",
        )
    return value


def _check_devices(row: Mapping[str, str]) -> None:
    """``num_devices`` (blank: derived) is the row's layout: ``tp x pp x attn_dp`` devices."""
    if not row["num_devices"]:
        return
    layout = _positive_int(row, "tp") * _ranks(row, "pp") * _ranks(row, "attn_dp")
    if _positive_int(row, "num_devices") != layout:
        raise InvalidParameterError(
            "num_devices",
            row["num_devices"],
            f"tp x pp x attn_dp = {layout} (the row's layout), or blank",
        )


def _device(hardware: str) -> str:
    alias = SERVING_DEVICE_ALIASES.get(hardware)
    return alias if alias is not None else get_device(hardware).name


def _model(name: str) -> str:
    hf_id = resolve_model_name(name)
    if hf_id is None:
        raise UnknownModelError(name, model_names())
    get_model(hf_id)  # an architecture the runner cannot represent is refused here
    return hf_id


def _precision(gemm: str, moe: str) -> str:
    for column, value in (("gemm_quant", gemm), ("moe_quant", moe)):
        if value not in QUANTIZATIONS:
            known = ", ".join(repr(k) for k in QUANTIZATIONS if k)
            raise InvalidParameterError(
                column,
                value,
                f"one of {known} (other formats, e.g. INT4 weight-only experts beside 16-bit "
                "attention, need per-layer quantization, which is not modelled)",
            )
    chosen = {QUANTIZATIONS[v] for v in (gemm, moe) if v not in _UNSTATED}
    if len(chosen) > 1:
        raise InvalidParameterError(
            "moe_quant", moe, f"the format of gemm_quant={gemm!r} (per-layer quantization)"
        )
    return chosen.pop() if chosen else UNRECORDED_PRECISION


#: FP4 checkpoint formats: a row's FP4 label of a model whose checkpoint is natively FP4 in
#: another format (gpt-oss-120b's MXFP4, written "nvfp4" by the sample) is that native format.
_FP4 = frozenset({"NVFP4", "MXFP4"})


def _native_precision(model: str, precision: str) -> str:
    native = (get_model(model).native_quantization or "").upper()
    return native if precision in _FP4 and native in _FP4 else precision


#: The column readers other measurement files share (the disaggregated replay).
int_column = _positive_int
parallel_size = _ranks
measured_value = _measured


def row_deployment(row: Mapping[str, str]) -> tuple[str, str, str]:
    """A row's catalog model, catalog device and precision (``model``, ``hardware``,
    ``gemm_quant`` / ``moe_quant``): the mapping every measurement file shares."""
    model = _model(row["model"])
    precision = _native_precision(model, _precision(row["gemm_quant"], row["moe_quant"]))
    return model, _device(row["hardware"]), precision


#: Engine families that run a ``tp`` not dividing the attention heads as wide expert
#: parallelism: attention data-parallel on each of the ``tp`` ranks (attention TP 1), experts
#: spread over all of them (``moe_ep = tp``). No engine splits heads unevenly, so such a ``tp``
#: is attention DP or not an engine layout. TensorRT-LLM: ``enable_attention_dp: true`` runs
#: attention alone on every rank, the MoE over ``moe_expert_parallel_size`` x
#: ``moe_tensor_parallel_size`` = ``tp`` ranks (its wide-EP / DeepSeek-R1 deployment guides).
#: SGLang: ``--enable-dp-attention`` gives attention TP ``tp // dp_size``
#: (``compute_dp_attention_world_info`` in ``sglang/srt/layers/dp_attention.py``); its wide-EP
#: recipes (``--tp N --dp N --enable-dp-attention --ep N --moe-a2a-backend deepep``, the
#: InferenceX "dep" layouts) set ``dp_size = tp``, attention TP 1. vLLM's attention DP is its
#: ``--data-parallel-size``, which the files record in ``attn_dp``: a vLLM ``tp`` must divide
#: the heads.
WIDE_EP_FAMILIES: frozenset[str] = frozenset({"trtllm", "sglang"})


def row_layout(row: Mapping[str, str], model: str) -> tuple[int, int, int]:
    """The ``(tp, dp, ep)`` a row's engine ran (``model``: its catalog id): the recorded
    layout, or, when ``tp`` does not divide the attention heads, the wide-EP layout
    ``(1, tp, tp)`` of a :data:`WIDE_EP_FAMILIES` engine whose row records experts over all
    ``tp`` ranks (``moe_ep = tp``, no ``attn_dp``, no ``pp``). Any other such row is refused
    naming what the engine cannot have run (the tp / expert split it records)."""
    tp = _positive_int(row, "tp")
    pp = _ranks(row, "pp")
    dp = _ranks(row, "attn_dp")
    ep = _ranks(row, "moe_ep")
    moe_tp = _ranks(row, "moe_tp")
    architecture = get_model(model)
    heads = architecture.num_heads
    if heads % tp == 0 or dp > 1:
        if architecture.moe is not None and check_expert_split(tp, dp, moe_tp, ep):
            raise UnsupportedError(
                f"experts split by tensor parallelism across {dp} attention data-parallel "
                f"ranks without expert parallelism (tp={tp}, attn_dp={dp}, moe_tp={moe_tp}, "
                f"moe_ep={ep}) is not replayed in the aggregated file: its cases carry no "
                "such layout yet (the disaggregated replay runs it)"
            )
        return tp * pp, dp, ep
    family = engine_family(row["engine"])
    recorded = f"tp={tp}, pp={pp}, attn_dp={dp}, moe_tp={moe_tp}, moe_ep={ep}"
    if family not in WIDE_EP_FAMILIES:
        raise UnsupportedError(
            f"tp={tp} does not divide the {heads} attention heads of {model} ({recorded}): "
            f"{family or 'the engine'} runs attention tensor-parallel over tp ranks (its "
            "attention data parallelism is attn_dp)"
        )
    if architecture.moe is None or ep != tp or moe_tp != 1 or pp != 1:
        raise UnsupportedError(
            f"tp={tp} does not divide the {heads} attention heads of {model}, so {family} can "
            "only have run it as wide expert parallelism (attention data-parallel on every "
            f"rank, experts over all {tp}: moe_ep={tp}, moe_tp=1, pp=1); the row records "
            f"{recorded}, not that layout, and not how the devices were split otherwise (in "
            "the measured sample such a tp is a disaggregated deployment's GPU total or a "
            "tp x ep product; docs/engine.md)"
        )
    return 1, tp, tp


def check_expert_split(tp: int, dp: int, moe_tp: int, ep: int, pool: str = "") -> bool:
    """The runner's expert split: ``moe_ep`` expert-parallel ranks over the ``tp x attn_dp``
    devices, each expert tensor-parallel over the rest (``moe_tp x moe_ep = tp x attn_dp``);
    without expert parallelism beside attention data parallelism, every expert
    tensor-parallel over all ``tp x attn_dp`` ranks. Returns whether the split is that last
    one (the layout's ``moe_over_dp``). ``moe_tp`` and ``moe_ep`` both 1 is the source's "none"
    (not set): the engines' default, experts tensor-parallel over every rank of the worker
    (vLLM: "the expert layers will by default form a (DP x TP) sized tensor parallel group"
    unless ``--enable-expert-parallel``, docs/serving/data_parallel_deployment.md;
    TensorRT-LLM: ``moe_tensor_parallel_size`` defaults to ``tp_size / moe_expert_parallel_size``
    over the whole world, attention DP included; SGLang: ``--tp`` is the world, which
    ``--enable-dp-attention`` splits for attention only). A recorded split it cannot represent
    is refused, naming the columns (``pool``: a disaggregated file's ``prefill`` / ``decode``)."""
    column = f"{pool}_" if pool else ""
    if moe_tp == ep == 1:
        moe_tp = tp * dp  # "none" in the source: the engines' default split over every rank
    if moe_tp * ep != tp * dp:
        raise InvalidParameterError(
            f"{column}moe_tp",
            moe_tp,
            f"{column}moe_tp x {column}moe_ep = {column}tp x {column}attn_dp = {tp * dp}",
        )
    return ep == 1 and dp > 1


def row_case(
    row: Mapping[str, str],
    engine_options: tuple[tuple[str, str | float], ...] = (),
    length_range_ratio: float = DEFAULT_LENGTH_RANGE_RATIO,
) -> ValidationCase:
    """The serving case of one row (domain errors say why a row cannot be one), under
    ``engine_options`` over its engine's profile and the benchmark client's
    ``length_range_ratio`` (the replay's recipe settings)."""
    model, device, precision = row_deployment(row)
    _check_devices(row)
    ran = recipe_layout(row)
    if ran is not None and ran.layout is None:
        raise _disaggregated_only(ran)
    tp, dp, ep = row_layout(row, model) if ran is None or ran.layout is None else ran.layout
    return ValidationCase(
        kind=SERVING_TTFT_KIND,
        model=model,
        device=device,
        tp=tp,
        dp=dp,
        ep=ep,
        precision=precision,
        concurrency=_positive_int(row, "concurrency"),
        query_len=_positive_int(row, "isl"),
        output_len=_positive_int(row, "osl"),
        measured=_measured(row, "ttft_ms"),
        unit="ms",
        source=SERVING_SOURCE,
        name=row["case_id"],
        engine=row["engine"],
        engine_options=engine_options,
        length_range_ratio=length_range_ratio,
    )


#: A row's predicted (TTFT, TPOT) and the spreads of their 80 % intervals (None: no intervals).
RowPrediction = tuple[float, float, CaseSpreads | None]
#: The disaggregated replay of a row under its deployment's settings: (TTFT, TPOT).
DisaggPredictor = Callable[[Mapping[str, str], DisaggSettings], tuple[float, float]]


def _disaggregated_only(ran: RecipeLayout) -> UnsupportedError:
    deployment = ran.disaggregated
    assert deployment is not None
    pools = dict(deployment.layout)
    return UnsupportedError(
        f"the row ran as the disaggregated deployment of its recipe ({deployment.recipe}: "
        f"{pools['prefill_workers']} prefill x {pools['prefill_tp']}/{pools['prefill_attn_dp']}"
        f"/{pools['prefill_moe_ep']}, {pools['decode_workers']} decode x {pools['decode_tp']}/"
        f"{pools['decode_attn_dp']}/{pools['decode_moe_ep']} tp/attn_dp/moe_ep), which only the "
        "disaggregated replay of validate --cases predicts"
    )


def row_settings_as_run(row: Mapping[str, str]) -> RowSettings | DisaggSettings:
    """The settings a row ran with: its deployment's where its recipe ran it disaggregated,
    else its recipe's (:func:`~app.core.validation.recipes.row_settings`), with the note of
    the recipe's layout where the row records another."""
    ran = recipe_layout(row)
    if ran is not None and ran.disaggregated is not None:
        return ran.disaggregated
    settings = row_settings(row)
    if ran is None:
        return settings
    return dataclasses.replace(
        settings,
        note="; ".join(p for p in (settings.note, ran.note) if p),
        source="; ".join(p for p in (settings.source, ran.source) if p),
    )


def row_outcome(
    row: Mapping[str, str],
    predict: Callable[[Mapping[str, str]], RowPrediction],
    settings: RowSettings | DisaggSettings = DEFAULT_SETTINGS,
) -> RowOutcome:
    """One row's outcome: ``predict(row)``'s (TTFT, TPOT) with their intervals when it gives
    spreads (and the calibration's note), or the domain error's reason; ``settings``: the
    engine settings the prediction ran with and how they are known."""
    base: dict[str, Any] = {
        "settings": settings.settings,
        "settings_note": "; ".join(p for p in (settings.note, settings.source) if p),
        "case_id": row["case_id"],
        "hardware": row["hardware"],
        "engine_family": (row["engine"].split() or ["(blank)"])[0],
        "model": row["model"],
        "measured_ttft_ms": _float_or_nan(row["ttft_ms"]),
        "measured_tpot_ms": _float_or_nan(row["tpot_ms"]),
    }
    try:
        _measured(row, "tpot_ms")
        ttft_ms, tpot_ms, spread = predict(row)
    except ChunkwiseError as err:
        return RowOutcome(**base, error=str(err))
    if spread is None:
        return RowOutcome(**base, ttft_ms_pred=ttft_ms, tpot_ms_pred=tpot_ms)
    return RowOutcome(
        **base,
        ttft_ms_pred=ttft_ms,
        tpot_ms_pred=tpot_ms,
        ttft_ms_interval=spread.ttft.interval(ttft_ms),
        tpot_ms_interval=spread.tpot.interval(tpot_ms),
        calibration_note=spread.reason,
    )


def _float_or_nan(text: str) -> float:
    return float(text) if _DECIMAL.fullmatch(text) else math.nan


def replay_case_file(
    text: str,
    *,
    drop_layout_duplicates: bool = False,
    calibration: CalibrationProfile | None = None,
    disaggregated: DisaggPredictor | None = None,
) -> CaseFileReport:
    """Predict every row of a measurement file (``drop_layout_duplicates``: leave out the rows
    that repeat a smaller deployment's measurement, see ``layout_duplicates``), with the 80 %
    interval of every prediction; ``calibration``: under its fitted parameters (a row outside
    it says so in ``calibration_note`` and gets the widened interval). A row whose recipe ran
    it as a disaggregated deployment (:mod:`app.core.validation.recipe_layouts`) is predicted
    by ``disaggregated`` (the disaggregated replay, without intervals: the residuals are the
    aggregated rows'); without it such a row is refused, naming the deployment."""
    rows = read_case_rows(text)
    skip = layout_duplicates(rows) if drop_layout_duplicates else set()
    replay = ServingReplay(None if calibration is None else calibration.values)
    cases: dict[int, ValidationCase] = {}  # by row index: a file may repeat a case_id

    def predictor(index: int) -> Callable[[Mapping[str, str]], RowPrediction]:
        def predict(row: Mapping[str, str]) -> RowPrediction:
            settings = row_settings_as_run(row)
            if isinstance(settings, DisaggSettings):
                if disaggregated is None:
                    raise _disaggregated_only(RecipeLayout(disaggregated=settings))
                return (*disaggregated(row, settings), None)
            case = row_case(row, settings.options, settings.length_range_ratio)
            predicted = replay.predict(case)
            cases[index] = case
            return (*predicted, case_spreads(case, calibration))

        return predict

    outcomes = {
        i: row_outcome(row, predictor(i), row_settings_as_run(row))
        for i, row in enumerate(rows)
        if i not in skip
    }
    report = file_report(rows, outcomes)
    if calibration is not None:
        return report  # calibrated intervals come from the calibration's own residuals
    residuals = [
        DeploymentResidual(
            residual=case_residual(case, o.ttft_ms_pred, o.tpot_ms_pred, o.measured_tpot_ms),
            deployment=(o.hardware, o.engine_family, case.model),
            family=o.engine_family.lower(),
        )
        for i, o in outcomes.items()
        if o.ttft_ms_pred is not None
        and o.tpot_ms_pred is not None
        and (case := cases.get(i)) is not None
    ]
    return dataclasses.replace(report, interval_checks=leave_deployment_out(residuals))


def case_file_report(
    outcomes: tuple[RowOutcome, ...], replicated: tuple[PredictedConfiguration, ...] = ()
) -> CaseFileReport:
    """The report of a file's outcomes: overall, per (hardware, engine family), per (hardware,
    engine family, model) and per engine family, groups in the order of their first row; with
    the replica floor of the ``replicated`` configurations beside the family errors."""
    by_engine: dict[str, list[RowOutcome]] = {}
    by_model: dict[str, list[RowOutcome]] = {}
    by_family: dict[str, list[RowOutcome]] = {}
    for o in outcomes:
        by_engine.setdefault(f"{o.hardware} | {o.engine_family}", []).append(o)
        by_model.setdefault(f"{o.hardware} | {o.engine_family} | {o.model}", []).append(o)
        by_family.setdefault(o.engine_family.lower(), []).append(o)
    return CaseFileReport(
        outcomes=outcomes,
        overall=_group_errors(OVERALL, outcomes),
        by_engine=tuple(_group_errors(g, items) for g, items in by_engine.items()),
        by_model=tuple(_group_errors(g, items) for g, items in by_model.items()),
        by_family=tuple(_group_errors(g, items) for g, items in by_family.items()),
        floors=floor_comparisons(replicated) if replicated else (),
        replicated=replicated,
    )


def file_report(
    rows: Sequence[Mapping[str, str]], outcomes: Mapping[int, RowOutcome]
) -> CaseFileReport:
    """The report of a replayed file (``outcomes`` by row index; rows left out are absent),
    with the file's replica floor beside the errors."""
    replicas = replica_report(configuration_columns(tuple(rows[0])), rows, skip_unusable=True)
    predictions = {
        i: (o.ttft_ms_pred, o.tpot_ms_pred)
        for i, o in outcomes.items()
        if o.ttft_ms_pred is not None and o.tpot_ms_pred is not None
    }
    return case_file_report(
        tuple(outcomes.values()), predicted_configurations(replicas, predictions)
    )
