"""The replica floor of a measurement file (``chunkwise validate --replicas FILE.csv``).

A measurement file often holds one configuration more than once: another dump of the same
benchmark, another engine build. Those repeats say how far two measurements of one
configuration disagree, which is the floor under any model's error on that file: a model
cannot be expected to land closer to a measurement than a second measurement does.

- **Configuration** (:func:`configuration_key`): hardware, engine family (the engine column's
  first word, never its version), architecture (the catalog's id when the model resolves, so
  ``nvidia/Llama-3.1-8B-Instruct-FP8`` and ``meta-llama/Llama-3.1-8B-Instruct`` are one),
  quantization (``gemm_quant``, ``moe_quant``; blank is "unrecorded"), the parallel layout
  (aggregated: ``tp pp attn_dp moe_tp moe_ep``; disaggregated: per pool ``workers tp attn_dp
  moe_tp moe_ep``; a size of 0 or blank is 1, "not split") and the load (``isl``, ``osl``,
  ``concurrency``). The engine version and the source dump (``case_id``) are not part of it.
- **Copies** (:func:`same_measurement`): a row whose TTFT and TPOT both equal an earlier row's
  of the same configuration to the printed digits of the shorter number is that measurement
  recorded again (the sample's later dumps repeat earlier ones, sometimes rounded: 163.73 and
  163.72509357752278 ms). Two benchmark runs do not agree on both means to six digits, so a
  copy is one measurement, counted once; counting it would pull the floor to 0.
- **Replicated configuration**: one with at least two distinct measurements.
- **Pairwise spread**: over every pair of distinct measurements of a configuration,
  ``|ln(a / b)|``; the median per engine family and overall, shown as ``exp(m) - 1`` in %.
- **Version-blind floor**: each distinct measurement against its configuration's centre (the
  geometric mean of its measurements), ``|ln(x / centre)|``; the median, shown the same way.
  It is the error a model that predicted every replicated configuration's centre exactly
  would still show against the individual measurements.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.catalog.models import resolve_model_name
from app.core.errors import InvalidParameterError
from app.core.validation.csv_text import csv_lines, malformed_csv
from app.core.validation.report import PERCENT

#: The columns that identify an aggregated row's configuration.
AGG_CONFIGURATION_COLUMNS: tuple[str, ...] = (
    "hardware",
    "engine",
    "model",
    "gemm_quant",
    "moe_quant",
    "tp",
    "pp",
    "attn_dp",
    "moe_tp",
    "moe_ep",
    "isl",
    "osl",
    "concurrency",
)
#: The columns that identify a disaggregated row's configuration (the batch-size columns are
#: not engine settings in the source, see :mod:`app.core.validation.disagg_file`).
DISAGG_CONFIGURATION_COLUMNS: tuple[str, ...] = (
    "hardware",
    "engine",
    "model",
    "gemm_quant",
    "moe_quant",
    *(
        f"{pool}_{size}"
        for pool in ("prefill", "decode")
        for size in ("workers", "tp", "attn_dp", "moe_tp", "moe_ep")
    ),
    "isl",
    "osl",
    "concurrency",
)
#: What a row needs besides its configuration.
MEASUREMENT_COLUMNS: tuple[str, ...] = ("case_id", "ttft_ms", "tpot_ms")
#: Configuration columns that are text; every other one is a size or a length.
_TEXT_COLUMNS = frozenset({"hardware", "engine", "model", "gemm_quant", "moe_quant"})
_UNRECORDED = "unrecorded"
METRICS: tuple[str, ...] = ("ttft", "tpot")
OVERALL = "overall"


def configuration_columns(header: Sequence[str]) -> tuple[str, ...]:
    """The configuration columns of a file with ``header`` (disaggregated when it names the
    pools' worker counts)."""
    if {"prefill_workers", "decode_workers"} & set(header):
        return DISAGG_CONFIGURATION_COLUMNS
    return AGG_CONFIGURATION_COLUMNS


def _size(row: Mapping[str, str], column: str) -> str:
    text = row[column]
    try:
        value = int(text or "0")
    except ValueError:
        raise InvalidParameterError(column, text, "an integer >= 0") from None
    if value < 0:
        raise InvalidParameterError(column, text, "an integer >= 0")
    return str(max(1, value))


def configuration_key(row: Mapping[str, str], columns: Sequence[str]) -> tuple[str, ...]:
    """The configuration a row measures (see the module docstring for what is and is not in
    it), as one value per column of ``columns``."""
    key = []
    for column in columns:
        text = row[column].strip()
        if column == "engine":
            key.append((text.split() or ["(blank)"])[0].lower())
        elif column == "model":
            key.append(resolve_model_name(text) or text.lower())
        elif column in _TEXT_COLUMNS:
            key.append((text.lower() or _UNRECORDED) if column.endswith("_quant") else text)
        else:
            key.append(_size(row, column))
    return tuple(key)


def same_measurement(a: str, b: str) -> bool:
    """Whether two printed values are one number: equal to the digits of the shorter one
    (``163.73`` and ``163.72509357752278`` are; ``163.7`` and ``163.8`` are not)."""
    decimals = min(_decimals(a), _decimals(b))
    return abs(float(a) - float(b)) <= 0.5 * 10.0**-decimals * (1 + 1e-9)


def _decimals(text: str) -> int:
    mantissa = text.lower().split("e")[0]
    return len(mantissa.split(".")[1]) if "." in mantissa else 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    """One distinct measurement of a configuration (``row``: its index among the file's rows;
    ``copies``: the indices of later rows that repeat it)."""

    row: int
    case_id: str
    engine: str
    ttft_ms: float
    tpot_ms: float
    copies: tuple[int, ...] = ()

    def value(self, metric: str) -> float:
        return self.ttft_ms if metric == "ttft" else self.tpot_ms


@dataclass(frozen=True, slots=True, kw_only=True)
class Configuration:
    """A configuration's distinct measurements and their geometric-mean centre."""

    key: tuple[str, ...]
    family: str
    measurements: tuple[Measurement, ...]

    @property
    def replicated(self) -> bool:
        return len(self.measurements) > 1

    @property
    def rows(self) -> tuple[int, ...]:
        """Every row of the file that measures this configuration, copies included."""
        return tuple(sorted(i for m in self.measurements for i in (m.row, *m.copies)))

    def centre_ms(self, metric: str) -> float:
        logs = [math.log(m.value(metric)) for m in self.measurements]
        return math.exp(statistics.fmean(logs))

    def pair_logs(self, metric: str) -> list[float]:
        values = [m.value(metric) for m in self.measurements]
        return [abs(math.log(a / b)) for a, b in itertools.combinations(values, 2)]

    def centre_logs(self, metric: str) -> list[float]:
        centre = self.centre_ms(metric)
        return [abs(math.log(m.value(metric) / centre)) for m in self.measurements]


def log_pct(logs: Sequence[float]) -> float | None:
    """The median of ``|ln ratio|`` values as a percentage (``exp(median) - 1``)."""
    return (math.exp(statistics.median(logs)) - 1) * PERCENT if logs else None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaSpread:
    """The spread of one engine family's (or the whole file's) replicated configurations."""

    group: str
    configurations: int
    measurements: int
    pairs: int
    ttft_pair_pct: float | None
    tpot_pair_pct: float | None
    #: The version-blind floor: each measurement against its configuration's centre.
    ttft_floor_pct: float | None
    tpot_floor_pct: float | None


def replica_spread(group: str, configurations: Sequence[Configuration]) -> ReplicaSpread:
    def pooled(logs: str, metric: str) -> list[float]:
        return [x for c in configurations for x in getattr(c, logs)(metric)]

    return ReplicaSpread(
        group=group,
        configurations=len(configurations),
        measurements=sum(len(c.measurements) for c in configurations),
        pairs=len(pooled("pair_logs", "ttft")),
        ttft_pair_pct=log_pct(pooled("pair_logs", "ttft")),
        tpot_pair_pct=log_pct(pooled("pair_logs", "tpot")),
        ttft_floor_pct=log_pct(pooled("centre_logs", "ttft")),
        tpot_floor_pct=log_pct(pooled("centre_logs", "tpot")),
    )


#: The columns of ``validate --replicas --csv``: one line per row of a replicated
#: configuration.
REPLICA_OUT_COLUMNS = (
    "configuration",
    "engine_family",
    "case_id",
    "engine",
    "ttft_ms",
    "tpot_ms",
    "ttft_centre_ms",
    "tpot_centre_ms",
    "ttft_vs_centre_pct",
    "tpot_vs_centre_pct",
    "copy_of",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaReport:
    """A file's configurations, its replicated ones, and their spread per family and overall."""

    columns: tuple[str, ...]
    rows: int
    configurations: tuple[Configuration, ...]
    by_family: tuple[ReplicaSpread, ...]
    overall: ReplicaSpread

    @property
    def replicated(self) -> tuple[Configuration, ...]:
        return tuple(c for c in self.configurations if c.replicated)

    @property
    def copies(self) -> int:
        return sum(len(m.copies) for c in self.configurations for m in c.measurements)

    def floor(self, family: str) -> ReplicaSpread | None:
        """The spread of ``family`` (:data:`OVERALL` for the whole file), if it has replicas."""
        if family == OVERALL:
            return self.overall
        return next((s for s in self.by_family if s.group == family), None)

    def format_table(self) -> str:
        lines = [
            f"{self.rows} rows, {len(self.configurations)} configurations, "
            f"{len(self.replicated)} measured more than once; {self.copies} rows repeat "
            "another row's measurement to its printed digits (a copy, counted once)",
            f"{'engine family':14s} {'configs':>7s} {'meas.':>6s} {'pairs':>6s} "
            f"{'TTFT pair':>9s} {'TPOT pair':>9s} {'TTFT floor':>10s} {'TPOT floor':>10s}",
        ]
        for s in (*self.by_family, self.overall):
            lines.append(
                f"{s.group:14s} {s.configurations:7d} {s.measurements:6d} {s.pairs:6d} "
                f"{_pct(s.ttft_pair_pct):>9s} {_pct(s.tpot_pair_pct):>9s} "
                f"{_pct(s.ttft_floor_pct):>10s} {_pct(s.tpot_floor_pct):>10s}"
            )
        lines.append(
            "pair: median |ln(a/b)| over pairs of measurements of one configuration; floor "
            "(version-blind): median |ln(x/centre)|, centre = the configuration's geometric "
            "mean; both as exp(median) - 1"
        )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        def spread(s: ReplicaSpread) -> dict[str, Any]:
            return {field: getattr(s, field) for field in ReplicaSpread.__dataclass_fields__}

        return {
            "rows": self.rows,
            "configurations": len(self.configurations),
            "copies": self.copies,
            "overall": spread(self.overall),
            "by_family": [spread(s) for s in self.by_family],
            "replicated": [
                {
                    "configuration": dict(zip(self.columns, c.key, strict=True)),
                    "ttft_centre_ms": c.centre_ms("ttft"),
                    "tpot_centre_ms": c.centre_ms("tpot"),
                    "measurements": [
                        {
                            "case_id": m.case_id,
                            "engine": m.engine,
                            "ttft_ms": m.ttft_ms,
                            "tpot_ms": m.tpot_ms,
                            "copies": len(m.copies),
                        }
                        for m in c.measurements
                    ],
                }
                for c in self.replicated
            ],
        }

    def to_csv(self, case_ids: Sequence[str]) -> str:
        """One line per row of a replicated configuration (``case_ids``: the file's, by row);
        a copy names the row it repeats."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(REPLICA_OUT_COLUMNS)
        for number, c in enumerate(self.replicated, start=1):
            centre = {metric: c.centre_ms(metric) for metric in METRICS}
            for m in c.measurements:
                for row in (m.row, *m.copies):
                    writer.writerow(
                        [
                            number,
                            c.family,
                            case_ids[row],
                            m.engine,
                            f"{m.ttft_ms:.6g}",
                            f"{m.tpot_ms:.6g}",
                            f"{centre['ttft']:.6g}",
                            f"{centre['tpot']:.6g}",
                            f"{(m.ttft_ms / centre['ttft'] - 1) * PERCENT:+.1f}",
                            f"{(m.tpot_ms / centre['tpot'] - 1) * PERCENT:+.1f}",
                            "" if row == m.row else case_ids[m.row],
                        ]
                    )
        return buffer.getvalue()


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def read_replica_rows(text: str) -> tuple[tuple[str, ...], list[dict[str, str]]]:
    """A file's configuration columns and rows; a header without the columns grouping needs
    raises one error naming every missing column (other columns are ignored)."""
    try:
        reader = csv.DictReader(csv_lines(text))
        header = tuple(c.strip() for c in reader.fieldnames or ())
        columns = configuration_columns(header)
        missing = [c for c in (*MEASUREMENT_COLUMNS, *columns) if c not in header]
        if missing:
            raise InvalidParameterError(
                "columns",
                f"missing {', '.join(missing)}",
                "a header with the columns that identify a configuration and its "
                f"measurements: {', '.join((*MEASUREMENT_COLUMNS, *columns))}",
            )
        rows = [
            {(k or "").strip(): (v or "").strip() for k, v in row.items() if k} for row in reader
        ]
    except csv.Error as exc:
        raise malformed_csv(exc) from None
    if not rows:
        raise InvalidParameterError("rows", 0, "at least one measurement row")
    return columns, rows


def _measured(row: Mapping[str, str], column: str) -> float:
    try:
        value = float(row[column])
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InvalidParameterError(
            column, row[column], f"a finite number > 0 (row {row['case_id']!r})"
        )
    return value


def replica_report(
    columns: Sequence[str], rows: Sequence[Mapping[str, str]], *, skip_unusable: bool = False
) -> ReplicaReport:
    """Group ``rows`` by configuration, collapse copies, and measure the spread of the
    configurations measured more than once, per engine family (in order of first row) and
    overall. A row whose sizes or measurements do not parse raises, or with ``skip_unusable``
    is left out (the replay refuses it on its own)."""
    found: dict[tuple[str, ...], list[Measurement]] = {}
    for index, row in enumerate(rows):
        try:
            key = configuration_key(row, columns)
            ttft_ms, tpot_ms = _measured(row, "ttft_ms"), _measured(row, "tpot_ms")
        except InvalidParameterError:
            if skip_unusable:
                continue
            raise
        seen = found.setdefault(key, [])
        original = _original(seen, rows, row)
        if original is None:
            seen.append(
                Measurement(
                    row=index,
                    case_id=row["case_id"],
                    engine=row["engine"],
                    ttft_ms=ttft_ms,
                    tpot_ms=tpot_ms,
                )
            )
        else:
            m = seen[original]
            seen[original] = Measurement(
                row=m.row,
                case_id=m.case_id,
                engine=m.engine,
                ttft_ms=m.ttft_ms,
                tpot_ms=m.tpot_ms,
                copies=(*m.copies, index),
            )
    family_at = columns.index("engine")
    configurations = tuple(
        Configuration(key=key, family=key[family_at], measurements=tuple(ms))
        for key, ms in found.items()
    )
    replicated = [c for c in configurations if c.replicated]
    families: dict[str, list[Configuration]] = {}
    for c in replicated:
        families.setdefault(c.family, []).append(c)
    return ReplicaReport(
        columns=tuple(columns),
        rows=len(rows),
        configurations=configurations,
        by_family=tuple(replica_spread(f, cs) for f, cs in families.items()),
        overall=replica_spread(OVERALL, replicated),
    )


def _original(
    seen: Iterable[Measurement], rows: Sequence[Mapping[str, str]], row: Mapping[str, str]
) -> int | None:
    """The position in ``seen`` of the measurement ``row`` copies, if any."""
    for position, m in enumerate(seen):
        first = rows[m.row]
        if all(same_measurement(first[c], row[c]) for c in ("ttft_ms", "tpot_ms")):
            return position
    return None


def replicas_of_text(text: str) -> tuple[ReplicaReport, list[str]]:
    """The replica report of a measurement file's text, and its rows' case ids."""
    columns, rows = read_replica_rows(text)
    return replica_report(columns, rows), [row["case_id"] for row in rows]


# -- the model against the floor (validate --cases) -----------------------------------------
#: A configuration whose model error against its centre exceeds this multiple of its own
#: floor is model error; within it, the measurements' noise (the issue's 1.5x rule).
MODEL_ERROR_FACTOR = 1.5


@dataclass(frozen=True, slots=True, kw_only=True)
class PredictedConfiguration:
    """A replicated configuration and the model's prediction for it (every row of one
    configuration replays the same inputs, so one prediction)."""

    configuration: Configuration
    ttft_ms_pred: float
    tpot_ms_pred: float

    def prediction(self, metric: str) -> float:
        return self.ttft_ms_pred if metric == "ttft" else self.tpot_ms_pred

    def error_log(self, metric: str) -> float:
        """The model's ``|ln(predicted / centre)|``."""
        return abs(math.log(self.prediction(metric) / self.configuration.centre_ms(metric)))

    def floor_log(self, metric: str) -> float:
        """The configuration's own version-blind floor (median ``|ln(x / centre)|``)."""
        return statistics.median(self.configuration.centre_logs(metric))

    def model_limited(self, metric: str) -> bool:
        return self.error_log(metric) > MODEL_ERROR_FACTOR * self.floor_log(metric)


@dataclass(frozen=True, slots=True, kw_only=True)
class FloorComparison:
    """One engine family's (or the file's) replicated configurations that the model predicts:
    their version-blind floor, the model's median error against their centres, and how many
    are model error (more than :data:`MODEL_ERROR_FACTOR` x their own floor)."""

    group: str
    configurations: int
    ttft_floor_pct: float | None
    tpot_floor_pct: float | None
    ttft_model_pct: float | None
    tpot_model_pct: float | None
    ttft_model_limited: int
    tpot_model_limited: int

    def ratio(self, metric: str) -> float | None:
        floor, model = getattr(self, f"{metric}_floor_pct"), getattr(self, f"{metric}_model_pct")
        if floor is None or model is None:
            return None
        return math.inf if floor == 0 else model / floor

    def verdict(self, metric: str) -> str:
        """ "model" when the model's error exceeds 1.5x the floor, "noise" when not."""
        ratio = self.ratio(metric)
        if ratio is None:
            return "-"
        return "model" if ratio > MODEL_ERROR_FACTOR else "noise"


def floor_comparison(group: str, predicted: Sequence[PredictedConfiguration]) -> FloorComparison:
    def floor(metric: str) -> float | None:
        return log_pct([x for p in predicted for x in p.configuration.centre_logs(metric)])

    def model(metric: str) -> float | None:
        return log_pct([p.error_log(metric) for p in predicted])

    return FloorComparison(
        group=group,
        configurations=len(predicted),
        ttft_floor_pct=floor("ttft"),
        tpot_floor_pct=floor("tpot"),
        ttft_model_pct=model("ttft"),
        tpot_model_pct=model("tpot"),
        ttft_model_limited=sum(p.model_limited("ttft") for p in predicted),
        tpot_model_limited=sum(p.model_limited("tpot") for p in predicted),
    )


def predicted_configurations(
    report: ReplicaReport, predictions: Mapping[int, tuple[float, float]]
) -> tuple[PredictedConfiguration, ...]:
    """The replicated configurations with a prediction (``predictions``: (TTFT, TPOT) by row
    index, refused rows absent), with the prediction of their first predicted row."""
    out = []
    for c in report.replicated:
        found = next((predictions[i] for i in c.rows if i in predictions), None)
        if found is not None:
            out.append(
                PredictedConfiguration(
                    configuration=c, ttft_ms_pred=found[0], tpot_ms_pred=found[1]
                )
            )
    return tuple(out)


def floor_comparisons(predicted: Sequence[PredictedConfiguration]) -> tuple[FloorComparison, ...]:
    """Per engine family (in order of first row), then overall."""
    families: dict[str, list[PredictedConfiguration]] = {}
    for p in predicted:
        families.setdefault(p.configuration.family, []).append(p)
    return (
        *(floor_comparison(f, ps) for f, ps in families.items()),
        floor_comparison(OVERALL, predicted),
    )
