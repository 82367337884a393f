"""``validate --kernels DIR``: read AIConfigurator's measured kernel tables and price every row.

Reading parquet needs ``pyarrow`` (the optional ``kernels`` extra), imported only here and only
when the command runs; the mapping of a measured row to the runner's op and its latency is
:mod:`app.core.validation.kernels` (stdlib only). Each table is read once; every distinct key
(the columns its prediction reads) is priced once per system and reused by its other rows (the
engines of one system measure the same shapes).

Layout: ``DIR`` is the unpacked ``aiconfigurator-core`` wheel (``aiconfigurator_core/systems/
data`` inside), its ``systems`` folder's parent, or the ``data`` folder itself, holding
``<system>/<op>/<engine>/<version>/<table>.parquet``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.catalog import get_device
from app.core.errors import InvalidParameterError, UnsupportedError
from app.core.validation.kernels import (
    ALL_BANDS,
    KERNEL_TABLES,
    KEY_COLUMNS,
    NO_DEVICE,
    NON_POSITIVE_MEASUREMENT,
    SYSTEM_DEVICES,
    GroupKey,
    KernelPrediction,
    KernelPricer,
    KernelReport,
    KernelSplit,
    build_report,
    error_pct,
    split_of,
    table_refusal,
)

DATA_SUBDIRS = (".", "data", "systems/data", "aiconfigurator_core/systems/data")
_LAYOUT = "<system>/<op>/<engine>/<version>/<table>.parquet"
#: Columns that describe the measurement, not the shape (left out of the ``shape`` text).
_META_COLUMNS = frozenset(
    {
        "framework",
        "version",
        "device",
        "kernel_source",
        "latency",
        "power",
        "power_limit",
    }
)
_MEASURED_COLUMN = "latency"
CSV_COLUMNS = (
    "system",
    "engine",
    "version",
    "table",
    "op",
    "kernel_source",
    "quantization",
    "shape",
    "band",
    "split",
    "measured_ms",
    "predicted_ms",
    "error",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelTable:
    path: Path
    system: str
    op: str
    engine: str
    version: str

    @property
    def table(self) -> str:
        return self.path.stem


def find_data_dir(root: Path) -> Path:
    """The folder holding ``<system>/...`` under ``root`` (see the module doc)."""
    for sub in DATA_SUBDIRS:
        candidate = root / sub
        if candidate.is_dir() and next(candidate.glob("*/*/*/*/*.parquet"), None) is not None:
            return candidate
    raise InvalidParameterError(
        "--kernels",
        str(root),
        f"the unpacked aiconfigurator-core wheel or its systems/data folder ({_LAYOUT})",
    )


def list_tables(data: Path, system: str | None, engine: str | None) -> list[KernelTable]:
    """Every table under ``data`` (sorted), filtered by system and engine (both checked)."""
    tables = [
        KernelTable(
            path=path,
            system=path.parts[-5],
            op=path.parts[-4],
            engine=path.parts[-3],
            version=path.parts[-2],
        )
        for path in sorted(data.glob("*/*/*/*/*.parquet"))
    ]
    systems = sorted({t.system for t in tables})
    if system is not None:
        if system not in systems:
            raise InvalidParameterError("--system", system, f"one of {', '.join(systems)}")
        tables = [t for t in tables if t.system == system]
    engines = sorted({t.engine for t in tables})
    if engine is not None:
        if engine not in engines:
            raise InvalidParameterError("--engine", engine, f"one of {', '.join(engines)}")
        tables = [t for t in tables if t.engine == engine]
    return tables


def _read(path: Path) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path)
    except (OSError, pa.ArrowException) as err:
        raise InvalidParameterError(
            "--kernels", str(path), f"a readable parquet table ({err})"
        ) from None


def _shape_text(table: Any) -> Any:
    """``name=value`` of every shape column, space-separated (a pyarrow string array)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = []
    for name in table.column_names:
        if name in _META_COLUMNS:
            continue
        values = pc.cast(table.column(name), pa.string())
        parts.append(pc.binary_join_element_wise(f"{name}=", values, ""))
    if not parts:
        return pa.array([""] * table.num_rows, pa.string())
    return pc.binary_join_element_wise(*parts, " ", null_handling="replace", null_replacement="")


@dataclass(slots=True)
class _Accumulator:
    errors: dict[GroupKey, list[float]]
    refusals: Counter[str]
    points: int = 0


class _CsvSink:
    """Streams one CSV block per table (pyarrow's writer)."""

    def __init__(self, path: Path) -> None:
        import pyarrow as pa
        import pyarrow.csv as pcsv

        self.schema = pa.schema(
            [(name, pa.float64() if name.endswith("_ms") else pa.string()) for name in CSV_COLUMNS]
        )
        try:
            self.writer = pcsv.CSVWriter(str(path), self.schema)
        except (OSError, pa.ArrowException) as err:
            raise InvalidParameterError("--csv", str(path), f"a writable file ({err})") from None

    def write(self, columns: dict[str, Any]) -> None:
        import pyarrow as pa

        self.writer.write_table(pa.table(columns, schema=self.schema))

    def close(self) -> None:
        self.writer.close()


def validate_kernels(
    root: Path,
    *,
    system: str | None = None,
    engine: str | None = None,
    csv_path: Path | None = None,
    split: KernelSplit = "all",
) -> KernelReport:
    """Price every measured point under ``root`` (see the module doc); write one CSV row per
    point to ``csv_path`` if given. ``split``: only the train or test shapes (:func:`split_of`)."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise UnsupportedError(
            "validate --kernels reads parquet: install pyarrow (pip install 'chunkwise[kernels]')"
        ) from None
    tables = list_tables(find_data_dir(root), system, engine)
    acc = _Accumulator(errors={}, refusals=Counter())
    pricers: dict[str, KernelPricer | None] = {}
    memo: dict[str, dict[tuple[object, ...], KernelPrediction]] = {}
    sink = _CsvSink(csv_path) if csv_path is not None else None
    try:
        for table in tables:
            if table.system not in pricers:
                name = SYSTEM_DEVICES.get(table.system)
                pricers[table.system] = KernelPricer(get_device(name)) if name else None
                memo.clear()  # keys are priced per system
            _price_table(table, pricers[table.system], memo, acc, sink, split)
    finally:
        if sink is not None:
            sink.close()
    return build_report(acc.errors, acc.refusals, acc.points)


def _column(table: Any, name: str) -> list[Any]:
    if name in table.column_names:
        values: list[Any] = table.column(name).to_pylist()
        return values
    return [None] * table.num_rows


def _price_table(
    table: KernelTable,
    pricer: KernelPricer | None,
    memo: dict[str, dict[tuple[object, ...], KernelPrediction]],
    acc: _Accumulator,
    sink: _CsvSink | None,
    split: KernelSplit,
) -> None:
    data = _read(table.path)
    shapes: list[str] = []
    if sink is not None or split != "all":
        shapes = _shape_text(data).to_pylist()
        if split != "all":
            import pyarrow as pa

            keep = [split_of(shape or "") == split for shape in shapes]
            data = data.filter(pa.array(keep, pa.bool_()))
            shapes = [shape for shape, kept in zip(shapes, keep, strict=True) if kept]
    rows = data.num_rows
    acc.points += rows
    family = KERNEL_TABLES.get(table.table)
    if family is None or pricer is None:
        reason = NO_DEVICE if pricer is None else table_refusal(table.table) or NO_DEVICE
        acc.refusals[reason] += rows
        if sink is not None:
            measured_all = _column(data, _MEASURED_COLUMN)
            labels = [table.table] * rows
            empty: list[float | None] = [None] * rows
            _write_rows(sink, table, data, shapes, measured_all, empty, [reason] * rows, labels)
        return
    measured = _column(data, _MEASURED_COLUMN)
    family_memo = memo.setdefault(family.value, {})
    price = pricer.price
    refusals = acc.refusals
    buckets: dict[int, list[float]] = {}
    owners: dict[int, KernelPrediction] = {}
    outcome: list[KernelPrediction] = []
    predicted: list[float | None] = []
    errors: list[float | None] = []
    keys = zip(*(_column(data, c) for c in KEY_COLUMNS[family]), strict=True)
    for key, value in zip(keys, measured, strict=True):
        prediction = family_memo.get(key)
        if prediction is None:
            prediction = price(family, key)
            family_memo[key] = prediction
        predicted_ms = prediction.predicted_ms
        error: float | None = None
        if predicted_ms is None:
            refusals[prediction.reason] += 1
        elif value is None or value <= 0:
            refusals[NON_POSITIVE_MEASUREMENT] += 1
            predicted_ms = None
        else:
            error = error_pct(value, predicted_ms)
            bucket = buckets.get(id(prediction))
            if bucket is None:
                bucket = buckets[id(prediction)] = []
                owners[id(prediction)] = prediction
            bucket.append(error)
        if sink is not None:
            outcome.append(prediction)
            predicted.append(predicted_ms)
            errors.append(error)
    groups = acc.errors
    for ident, values in buckets.items():
        owner = owners[ident]
        group = (table.system, table.engine, owner.op, owner.quantization)
        for band in (ALL_BANDS, owner.band):
            groups.setdefault((*group, band), []).extend(values)
    if sink is not None:
        texts = [
            (p.reason or NON_POSITIVE_MEASUREMENT) if e is None else f"{e:+.2f}"
            for p, e in zip(outcome, errors, strict=True)
        ]
        _write_rows(sink, table, data, shapes, measured, predicted, texts, outcome)


def _write_rows(
    sink: _CsvSink,
    table: KernelTable,
    data: Any,
    shapes: list[str],
    measured: list[Any],
    predicted: list[float | None],
    errors: list[str],
    outcome: Sequence[KernelPrediction | str],
) -> None:
    """One CSV row per measured point: ``outcome`` holds each row's prediction (or, for a
    table refused whole, its name)."""
    rows = data.num_rows
    labels = [
        (item, "", "") if isinstance(item, str) else (item.op, item.quantization, item.band)
        for item in outcome
    ]
    sink.write(
        {
            "system": [table.system] * rows,
            "engine": [table.engine] * rows,
            "version": [table.version] * rows,
            "table": [f"{table.op}/{table.table}"] * rows,
            "op": [label[0] for label in labels],
            "kernel_source": [str(v) for v in _column(data, "kernel_source")],
            "quantization": [label[1] for label in labels],
            "shape": shapes,
            "band": [label[2] for label in labels],
            "split": [split_of(shape or "") for shape in shapes],
            "measured_ms": [v if isinstance(v, float | int) else None for v in measured],
            "predicted_ms": predicted,
            "error": errors,
        }
    )
