"""``validate --kernels DIR``: read AIConfigurator's measured kernel tables and price every row.

Reading parquet needs ``pyarrow`` (the optional ``kernels`` extra), imported only here and only
when the command runs; the mapping of a measured row to the runner's op and its latency is
:mod:`app.core.validation.kernels` (stdlib only). Each table is read once; every distinct key
(the columns its prediction reads) is priced once per system and reused by its other rows (the
engines of one system measure the same shapes).

Layout: ``DIR`` is the unpacked ``aiconfigurator-core`` wheel, or its ``aiconfigurator_core``,
``systems`` or ``systems/data`` folder (:data:`DATA_SUBDIRS`); the data folder holds
``<system>/<op>/<engine>/<version>/<table>.parquet``. Only systems with tables are valid
``--system`` values (0.12.0 ships empty ``a100_pcie`` and ``a30`` folders).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.catalog import get_device
from app.core.errors import InvalidParameterError, UnsupportedError
from app.core.limits import KernelSplit
from app.core.validation.kernels import (
    ALL_BANDS,
    KERNEL_TABLES,
    KEY_COLUMNS,
    NO_DEVICE,
    NON_POSITIVE_MEASUREMENT,
    SYSTEM_DEVICES,
    GroupKey,
    KernelFamily,
    KernelPrediction,
    KernelPricer,
    KernelReport,
    build_report,
    split_of,
    table_refusal,
)

#: Tables priced per engine version (the MoE curves are fitted per version).
MOE_TABLES = frozenset(t for t, family in KERNEL_TABLES.items() if family is KernelFamily.MOE)
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

        arrays = [columns[field.name].cast(field.type) for field in self.schema]
        self.writer.write_table(pa.table(arrays, schema=self.schema))

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
    pricers: dict[tuple[str, str, str], KernelPricer | None] = {}
    memos: dict[tuple[str, str, str], dict[str, dict[tuple[object, ...], KernelPrediction]]] = {}
    sink = _CsvSink(csv_path) if csv_path is not None else None
    try:
        for table in tables:
            # Per (system, engine): the engine's fitted curves price its kernels; MoE tables
            # per engine version too (each version's own MoE curve).
            # Tables come sorted by system: a new system drops the last one's memos.
            version = table.version if table.table in MOE_TABLES else ""
            owner = (table.system, table.engine, version)
            if owner not in pricers:
                if all(system != table.system for system, _, _ in pricers):
                    memos.clear()
                name = SYSTEM_DEVICES.get(table.system)
                pricers[owner] = (
                    KernelPricer(get_device(name), table.engine, version or None) if name else None
                )
            memo = memos.setdefault(owner, {})  # keys are priced per system and engine
            _price_table(table, pricers[owner], memo, acc, sink, split)
    finally:
        if sink is not None:
            sink.close()
    return build_report(acc.errors, acc.refusals, acc.points)


def _column(table: Any, name: str) -> list[Any]:
    if name in table.column_names:
        values: list[Any] = table.column(name).to_pylist()
        return values
    return [None] * table.num_rows


def _constant(value: str, rows: int) -> Any:
    """A string column of one value (dictionary-encoded, built without a Python list)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    zeros = pc.fill_null(pa.nulls(rows, pa.int32()), 0)
    return pa.DictionaryArray.from_arrays(zeros, pa.array([value], pa.string()))


def _measured(data: Any) -> Any:
    """The measured latency (ms) as float64; null where a table has none."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if _MEASURED_COLUMN in data.column_names:
        return pc.cast(data.column(_MEASURED_COLUMN), pa.float64()).combine_chunks()
    return pa.nulls(data.num_rows, pa.float64())


def _price_table(
    table: KernelTable,
    pricer: KernelPricer | None,
    memo: dict[str, dict[tuple[object, ...], KernelPrediction]],
    acc: _Accumulator,
    sink: _CsvSink | None,
    split: KernelSplit,
) -> None:
    """Price one table: each row's key is looked up (priced once per system), then the
    per-row arithmetic, counts and CSV columns are pyarrow's (indices into the distinct
    predictions of this table)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    data = _read(table.path)
    shapes = None
    if sink is not None or split != "all":
        shapes = _shape_text(data)
        if split != "all":
            keep = [split_of(shape or "") == split for shape in shapes.to_pylist()]
            mask = pa.array(keep, pa.bool_())
            data, shapes = data.filter(mask), shapes.filter(mask)
    rows = data.num_rows
    acc.points += rows
    family = KERNEL_TABLES.get(table.table)
    if family is None or pricer is None:
        reason = NO_DEVICE if pricer is None else table_refusal(table.table) or NO_DEVICE
        acc.refusals[reason] += rows
        if sink is not None:
            empty = pa.nulls(rows, pa.float64())
            reasons = _constant(reason, rows)
            label = _constant(table.table, rows)
            blank = _constant("", rows)
            sink.write(_csv_columns(table, data, shapes, (label, blank, blank), (empty, reasons)))
        return
    family_memo = memo.setdefault(family.value, {})
    price = pricer.price
    distinct: list[KernelPrediction] = []
    local: dict[int, int] = {}
    indices: list[int] = []
    append = indices.append
    for key in zip(*(_column(data, c) for c in KEY_COLUMNS[family]), strict=True):
        prediction = family_memo.get(key)
        if prediction is None:
            prediction = family_memo[key] = price(family, key)
        index = local.get(id(prediction))
        if index is None:
            index = local[id(prediction)] = len(distinct)
            distinct.append(prediction)
        append(index)
    index_array = pa.array(indices, pa.int32())
    predicted = pc.take(pa.array([p.predicted_ms for p in distinct], pa.float64()), index_array)
    measured = _measured(data)
    usable = pc.and_kleene(pc.is_valid(predicted), pc.greater(measured, 0.0))
    usable = pc.fill_null(usable, False)
    # error_pct (app.core.validation.kernels), row-wise in pyarrow
    errors = pc.multiply(pc.divide(pc.subtract(predicted, measured), measured), 100.0)
    _count_refusals(acc, distinct, index_array, predicted, usable)
    _group_errors(acc, table, distinct, index_array, errors, usable)
    if sink is not None:
        labels = tuple(
            pc.take(pa.array([getattr(p, field) for p in distinct], pa.string()), index_array)
            for field in ("op", "quantization", "band")
        )
        reasons = pc.take(
            pa.array([p.reason or NON_POSITIVE_MEASUREMENT for p in distinct], pa.string()),
            index_array,
        )
        error_text = pc.if_else(usable, pc.cast(pc.round(errors, 2), pa.string()), reasons)
        kept = pc.if_else(usable, predicted, pa.scalar(None, pa.float64()))
        sink.write(_csv_columns(table, data, shapes, labels, (kept, error_text), measured=measured))


def _count_refusals(
    acc: _Accumulator,
    distinct: list[KernelPrediction],
    indices: Any,
    predicted: Any,
    usable: Any,
) -> None:
    """Count the rows without an error: per the prediction's reason, or (a prediction but no
    positive measurement) :data:`NON_POSITIVE_MEASUREMENT`."""
    import pyarrow.compute as pc

    refused = pc.invert(usable)
    if not pc.any(refused).as_py():
        return
    unpriced = pc.filter(indices, pc.is_null(predicted))
    for item in pc.value_counts(unpriced).to_pylist():
        acc.refusals[distinct[item["values"]].reason] += item["counts"]
    unmeasured = pc.sum(pc.and_(refused, pc.is_valid(predicted))).as_py() or 0
    if unmeasured:
        acc.refusals[NON_POSITIVE_MEASUREMENT] += unmeasured


def _group_errors(
    acc: _Accumulator,
    table: KernelTable,
    distinct: list[KernelPrediction],
    indices: Any,
    errors: Any,
    usable: Any,
) -> None:
    """Append each usable row's error to its (system, engine, op, quantization) group, whole
    and in its band."""
    import pyarrow.compute as pc

    kept = pc.filter(indices, usable)
    if len(kept) == 0:
        return
    order = pc.sort_indices(kept)
    ordered = pc.take(kept, order)
    values = pc.take(pc.filter(errors, usable), order).to_pylist()
    groups = acc.errors
    start = 0
    for item in pc.value_counts(ordered).to_pylist():  # runs in sorted order
        owner, end = distinct[item["values"]], start + item["counts"]
        group = (table.system, table.engine, owner.op, owner.quantization)
        for band in (ALL_BANDS, owner.band):
            groups.setdefault((*group, band), []).extend(values[start:end])
        start = end


def _csv_columns(
    table: KernelTable,
    data: Any,
    shapes: Any,
    labels: tuple[Any, Any, Any],
    outcome: tuple[Any, Any],
    *,
    measured: Any = None,
) -> dict[str, Any]:
    """One CSV block: ``labels`` (op, quantization, band) and ``outcome`` (predicted_ms,
    error) per row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = data.num_rows
    if "kernel_source" in data.column_names:
        source = pc.cast(data.column("kernel_source"), pa.string())
    else:
        source = _constant("", rows)
    return {
        "system": _constant(table.system, rows),
        "engine": _constant(table.engine, rows),
        "version": _constant(table.version, rows),
        "table": _constant(f"{table.op}/{table.table}", rows),
        "op": labels[0],
        "kernel_source": source,
        "quantization": labels[1],
        "shape": shapes,
        "band": labels[2],
        "measured_ms": _measured(data) if measured is None else measured,
        "predicted_ms": outcome[0],
        "error": outcome[1],
    }
