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
  ``moe_ep`` expert-parallel ranks.
- engine: the engine column's first word (the family: ``vllm``, ``sglang``, ``trtllm``) picks
  the engine profile the row is simulated under (:mod:`app.core.profiles`: policy, token
  budget, running cap, KV pool and dtype, CUDA-graph limit, host and front-end time), as
  ``engine`` does for a request; another family is refused with the valid names. The family
  also groups the errors.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.calibration.profile import CalibrationProfile
from app.core.catalog.devices import get_device
from app.core.catalog.models import get_model, model_names, resolve_model_name
from app.core.errors import ChunkwiseError, InvalidParameterError, UnknownModelError
from app.core.validation.cases import (
    SERVING_DEVICE_ALIASES,
    SERVING_PRECISIONS,
    SERVING_SOURCE,
    SERVING_TTFT_KIND,
    UNRECORDED_PRECISION,
    ValidationCase,
    layout_duplicates,
)
from app.core.validation.intervals import CaseSpreads, case_spreads
from app.core.validation.predict import ServingReplay
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
    #: A refused row's reason without its value, what the report counts refusals by (blank:
    #: the file's rows are not counted by reason).
    refusal: str = ""

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


def _group_errors(group: str, outcomes: Sequence[RowOutcome]) -> GroupErrors:
    ttft = [abs(e) for o in outcomes if (e := o.ttft_error_pct) is not None]
    tpot = [abs(e) for o in outcomes if (e := o.tpot_error_pct) is not None]
    inside = [flag for o in outcomes for flag in o.inside]
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
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseFileReport:
    """Every row's outcome, the errors overall, per (hardware, engine family) and per
    (hardware, engine family, model)."""

    outcomes: tuple[RowOutcome, ...]
    overall: GroupErrors
    by_engine: tuple[GroupErrors, ...]
    by_model: tuple[GroupErrors, ...]

    @property
    def refusal_counts(self) -> tuple[tuple[str, int], ...]:
        """Refused rows per reason (rows that carry one), the most frequent first."""
        counts = Counter(o.refusal for o in self.outcomes if o.refused and o.refusal)
        return tuple(counts.most_common())

    @property
    def represented_share(self) -> float:
        """The share of the rows predicted (not refused)."""
        return sum(not o.refused for o in self.outcomes) / len(self.outcomes)

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
                ]
            )
        return buffer.getvalue()

    def format_table(self) -> str:
        groups = (*self.by_engine, *self.by_model, self.overall)
        width = max(len(g.group) for g in groups)
        lines = [
            f"{'group':{width}s} {'rows':>5s} {'refused':>7s} {'TTFT med':>9s} {'TTFT p90':>9s} "
            f"{'<=25%':>6s} {'TPOT med':>9s} {'TPOT p90':>9s} {'in 80%':>6s}"
        ]
        for g in (*self.by_engine, self.overall, *self.by_model):
            lines.append(
                f"{g.group:{width}s} {g.rows:5d} {g.refused:7d} {_pct(g.ttft_median_ape_pct):>9s} "
                f"{_pct(g.ttft_p90_ape_pct):>9s} {_share(g.ttft_close_share):>6s} "
                f"{_pct(g.tpot_median_ape_pct):>9s} {_pct(g.tpot_p90_ape_pct):>9s} "
                f"{_share(g.interval_coverage):>6s}"
            )
        if self.refusal_counts:
            lines.append(
                f"represented {self.represented_share:.1%} of {len(self.outcomes)} rows; "
                "refused per reason:"
            )
            lines.extend(f"{count:5d}  {reason}" for reason, count in self.refusal_counts)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        def group(g: GroupErrors) -> dict[str, Any]:
            return {field: getattr(g, field) for field in GroupErrors.__dataclass_fields__}

        return {
            "overall": group(self.overall),
            "by_engine": [group(g) for g in self.by_engine],
            "by_model": [group(g) for g in self.by_model],
            "refused": [
                {"case_id": o.case_id, "error": o.error} for o in self.outcomes if o.refused
            ],
            "refusal_counts": dict(self.refusal_counts),
        }


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
)


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
def csv_lines(text: str) -> io.StringIO:
    """``text`` as the csv module reads a file: newlines kept (a file saved with CR or CRLF
    line ends parses; a newline inside a quoted field stays in it)."""
    return io.StringIO(text, newline="")


def read_case_rows(text: str, columns: Sequence[str] = CASE_COLUMNS) -> list[dict[str, str]]:
    """The rows of a measurement file with exactly ``columns``, after checking its header and
    size (domain errors that name the problem, a malformed CSV included)."""
    try:
        return _read_rows(csv.DictReader(csv_lines(text)), columns)
    except csv.Error as exc:
        raise malformed_csv(exc) from None


def malformed_csv(exc: csv.Error) -> InvalidParameterError:
    """The 422 of a file the csv module cannot read (a stray quote, a field too large)."""
    return InvalidParameterError("csv", str(exc), "a well-formed CSV file")


def _read_rows(reader: csv.DictReader[str], columns: Sequence[str]) -> list[dict[str, str]]:
    header = tuple(reader.fieldnames or ())
    missing = [c for c in columns if c not in header]
    unknown = [c for c in header if c not in columns]
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
def _positive_int(row: Mapping[str, str], column: str, default: int | None = None) -> int:
    text = row[column]
    if not text and default is not None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise InvalidParameterError(column, text, "a positive integer") from None
    if value < 1:
        raise InvalidParameterError(column, text, "a positive integer")
    return value


def _ranks(row: Mapping[str, str], column: str) -> int:
    """A parallel size where 0 or blank means "not split" (the sample writes ``moe_ep`` 0 for
    dense models), as the earlier serving loader read it."""
    text = row[column] or "1"
    try:
        value = int(text)
    except ValueError:
        raise InvalidParameterError(column, text, "an integer >= 0") from None
    if value < 0:
        raise InvalidParameterError(column, text, "an integer >= 0")
    return max(1, value)


def _measured(row: Mapping[str, str], column: str) -> float:
    try:
        value = float(row[column])
    except ValueError:
        raise InvalidParameterError(column, row[column], "a finite number > 0") from None
    if not (math.isfinite(value) and value > 0):
        raise InvalidParameterError(column, row[column], "a finite number > 0")
    return value


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


def row_case(row: Mapping[str, str]) -> ValidationCase:
    """The serving case of one row (domain errors say why a row cannot be one)."""
    model, device, precision = row_deployment(row)
    return ValidationCase(
        kind=SERVING_TTFT_KIND,
        model=model,
        device=device,
        tp=_positive_int(row, "tp") * _ranks(row, "pp"),
        dp=_ranks(row, "attn_dp"),
        ep=_ranks(row, "moe_ep"),
        precision=precision,
        concurrency=_positive_int(row, "concurrency"),
        query_len=_positive_int(row, "isl"),
        output_len=_positive_int(row, "osl"),
        measured=_measured(row, "ttft_ms"),
        unit="ms",
        source=SERVING_SOURCE,
        name=row["case_id"],
        engine=row["engine"],
    )


#: A row's predicted (TTFT, TPOT) and the spreads of their 80 % intervals (None: no intervals).
RowPrediction = tuple[float, float, CaseSpreads | None]


def row_outcome(
    row: Mapping[str, str], predict: Callable[[Mapping[str, str]], RowPrediction]
) -> RowOutcome:
    """One row's outcome: ``predict(row)``'s (TTFT, TPOT) with their intervals when it gives
    spreads (and the calibration's note), or the domain error's reason."""
    base: dict[str, Any] = {
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
    try:
        return float(text)
    except ValueError:
        return math.nan


def replay_case_file(
    text: str,
    *,
    drop_layout_duplicates: bool = False,
    calibration: CalibrationProfile | None = None,
) -> CaseFileReport:
    """Predict every row of a measurement file (``drop_layout_duplicates``: leave out the rows
    that repeat a smaller deployment's measurement, see ``layout_duplicates``), with the 80 %
    interval of every prediction; ``calibration``: under its fitted parameters (a row outside
    it says so in ``calibration_note`` and gets the widened interval)."""
    rows = read_case_rows(text)
    skip = layout_duplicates(rows) if drop_layout_duplicates else set()
    replay = ServingReplay(None if calibration is None else calibration.values)

    def predict(row: Mapping[str, str]) -> RowPrediction:
        case = row_case(row)
        return (*replay.predict(case), case_spreads(case, calibration))

    outcomes = tuple(row_outcome(row, predict) for i, row in enumerate(rows) if i not in skip)
    return case_file_report(outcomes)


def case_file_report(outcomes: tuple[RowOutcome, ...]) -> CaseFileReport:
    """The report of a file's outcomes: overall, per (hardware, engine family) and per
    (hardware, engine family, model), groups in the order of their first row."""
    by_engine: dict[str, list[RowOutcome]] = {}
    by_model: dict[str, list[RowOutcome]] = {}
    for o in outcomes:
        by_engine.setdefault(f"{o.hardware} | {o.engine_family}", []).append(o)
        by_model.setdefault(f"{o.hardware} | {o.engine_family} | {o.model}", []).append(o)
    return CaseFileReport(
        outcomes=outcomes,
        overall=_group_errors("overall", outcomes),
        by_engine=tuple(_group_errors(g, items) for g, items in by_engine.items()),
        by_model=tuple(_group_errors(g, items) for g, items in by_model.items()),
    )
