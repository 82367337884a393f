"""Sweeps: a spec's scenarios resolved once, evaluated in batches, one row each.

    spec file --load_points--> SweepPoints --prepare--> Tasks (scenario key + echo)
        --run_sweep (in-process, or batches in a spawn process pool)--> one row per scenario

Every point is validated (its request model) and resolved (:mod:`.scenario`) before anything
runs: a bad point is an error naming the point and the field. Points resolving to the same
Scenario are evaluated once (one row, keyed by ``scenario_key``). A task carries the echo as
JSON (the request as it ran: re-resolving it gives the same Scenario), so a later worker on
another host takes the same batches. Evaluation goes through the service functions the API
uses; a domain error (a size check, a deadline) is the row's ``error``, never a lost row.
"""

from __future__ import annotations

import csv
import io
import json
import math
import multiprocessing
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args, get_origin

from app.core.errors import ChunkwiseError, InvalidParameterError
from app.core.sweep import SweepPoint, expand_csv, expand_grid, set_field

if TYPE_CHECKING:
    from pydantic import BaseModel

    from app.services.context import ServiceContext

#: The spec file types, by suffix.
SPEC_SUFFIXES = (".json", ".yaml", ".yml", ".csv")
#: What a YAML spec needs when PyYAML is absent.
YAML_NEEDS = "JSON or CSV, or install pyyaml (pip install 'chunkwise[sweep]')"
#: The columns every row has after its sweep values.
RESULT_COLUMNS = (
    "operation",
    "scenario_key",
    "ttft_ms",
    "tpot_ms",
    "throughput_tokens_s",
    "feasible",
    "best_tp",
    "best_dp",
    "best_ep",
    "best_pp",
    "best_concurrency",
    "error",
)
#: The best row's fields an optimize row reports (its layout and concurrency), each as
#: ``best_<field>`` (a grid may sweep ``concurrency`` itself).
BEST_FIELDS = ("tp", "dp", "ep", "pp", "concurrency")
#: Tasks per process the pool is given at least (smaller batches balance a mixed grid).
BATCHES_PER_PROCESS = 8
#: Most scenarios one task carries.
MAX_BATCH = 64
T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """One scenario to evaluate: its key, its operation, its echo (JSON) and sweep values."""

    scenario_key: str
    operation: str
    echo: Mapping[str, Any]
    values: tuple[tuple[str, Any], ...]


def load_spec(path: Path) -> Any:
    """A spec file read: its CSV text (``.csv``), else its grid document (``.json``,
    ``.yaml``/``.yml``), not yet expanded."""
    suffix = path.suffix.lower()
    if suffix not in SPEC_SUFFIXES:
        raise InvalidParameterError("spec", path.name, f"a file ending {', '.join(SPEC_SUFFIXES)}")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        readable = f"a readable file ({err.strerror})"
        raise InvalidParameterError("spec", str(path), readable) from None
    if suffix == ".csv":
        return text
    if suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise InvalidParameterError("spec", path.name, f"JSON ({err.msg})") from None
    try:
        import yaml
    except ImportError:
        raise InvalidParameterError("spec", path.name, YAML_NEEDS) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        line = "" if where is None else f" at line {where.line + 1}"
        problem = getattr(err, "problem", None) or "unreadable"
        raise InvalidParameterError("spec", path.name, f"YAML ({problem}{line})") from None


def load_points(path: Path) -> tuple[SweepPoint, ...]:
    """The points of a spec file: a grid document (``.json``, ``.yaml``/``.yml``) or CSV rows."""
    spec = load_spec(path)
    if isinstance(spec, str):
        return typed_points(expand_csv(spec))
    return expand_grid(spec)


def _takes_text(annotation: Any) -> bool:
    """Whether a field of this type takes text (a string, or a Literal of strings)."""
    if annotation is str:
        return True
    if get_origin(annotation) is Literal:
        return any(isinstance(arg, str) for arg in get_args(annotation))
    return any(_takes_text(arg) for arg in get_args(annotation) if arg is not type(None))


def _field_type(model: type[BaseModel], name: str) -> Any:
    """The annotation of a (dotted) field; None for a name the model does not have (its
    validation names it)."""
    head, _, rest = name.partition(".")
    field = model.model_fields.get(head)
    if field is None:
        return None
    if not rest:
        return field.annotation
    for arg in (field.annotation, *get_args(field.annotation)):
        if isinstance(arg, type) and hasattr(arg, "model_fields"):
            return _field_type(arg, rest)
    return None


def _typed_cell(model: type[BaseModel], name: str, value: Any) -> Any:
    """A CSV cell as its field's type asks: text where the field takes text, else the cell
    read as a JSON scalar (``128``, ``0.5``, ``true``); the model refuses what does not fit."""
    annotation = _field_type(model, name)
    if not isinstance(value, str) or annotation is None or _takes_text(annotation):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _typed(point: SweepPoint) -> SweepPoint:
    """A CSV point with its cells typed by its request model's fields."""
    model = _request_model(point.operation)
    values = tuple((name, _typed_cell(model, name, value)) for name, value in point.values)
    body: dict[str, Any] = {}
    for name, value in values:
        set_field(body, name, value)
    return SweepPoint(operation=point.operation, body=body, values=values)


def typed_points(points: Sequence[SweepPoint]) -> tuple[SweepPoint, ...]:
    """CSV points with their cells typed by their request models' fields."""
    return tuple(_typed(point) for point in points)


def _request_model(operation: str) -> type[BaseModel]:
    if operation == "simulate":
        from app.models.simulate import SimulateRequest

        return SimulateRequest
    if operation == "optimize":
        from app.models.optimize import OptimizeRequest

        return OptimizeRequest
    from app.models.capacity import PlanRequest

    return PlanRequest


def _resolve(context: ServiceContext, operation: str, request: Any) -> Any:
    """The resolver of ``operation`` (and mode): a Resolved."""
    from app.services import scenario as resolver

    if operation == "simulate":
        if request.mode == "disagg":
            return resolver.resolve_disagg_simulation(context, request, allow_paths=True)
        return resolver.resolve_simulation(context, request, allow_paths=True)
    if operation == "optimize":
        if request.mode == "disagg":
            return resolver.resolve_disagg_search(request, allow_paths=True)
        return resolver.resolve_search(context, request, allow_paths=True)
    return resolver.resolve_plan(context, request)


def _point_name(number: int, point: SweepPoint) -> str:
    shown = ", ".join(f"{name}={value!r}" for name, value in point.values)
    return f"scenario {number} ({shown})"


def prepare(context: ServiceContext, points: Sequence[SweepPoint]) -> list[Task]:
    """Every point validated and resolved, before anything runs; one task per distinct
    Scenario (the first point's values). A bad point raises, naming it and the field."""
    from pydantic import ValidationError

    tasks: dict[str, Task] = {}
    for number, point in enumerate(points, start=1):
        model = _request_model(point.operation)
        try:
            request = model.model_validate(dict(point.body))
            resolved = _resolve(context, point.operation, request)
        except ValidationError as err:
            item = err.errors()[0]
            field = ".".join(str(part) for part in item.get("loc", ())) or "body"
            reason = item.get("msg", "invalid")
            raise InvalidParameterError(
                field, item.get("input"), f"valid in {_point_name(number, point)} ({reason})"
            ) from None
        except ChunkwiseError as err:
            raise InvalidParameterError(
                getattr(err, "field", "scenario"),
                getattr(err, "value", None),
                f"valid in {_point_name(number, point)}: {err}",
            ) from None
        key = resolved.scenario.key
        if key not in tasks:
            tasks[key] = Task(
                scenario_key=key,
                operation=point.operation,
                echo=resolved.echo.model_dump(mode="json", exclude_none=True),
                values=point.values,
            )
    return list(tasks.values())


def _result(operation: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """The figures of one answer: the run's, an optimize answer's best row's, a plan's."""
    if operation == "optimize":
        best = body.get("best")
        if not isinstance(best, Mapping):
            return {"feasible": False}
        row = {f"best_{name}": best.get(name) for name in BEST_FIELDS}
        throughput = best.get("throughput_tokens_s", best.get("output_throughput"))
        return {
            **row,
            "ttft_ms": best.get("ttft_ms"),
            "tpot_ms": best.get("tpot_ms"),
            "throughput_tokens_s": throughput,
            "feasible": True,
        }
    if operation == "plan":
        return {
            "ttft_ms": body.get("ttft_ms"),
            "tpot_ms": body.get("tpot_ms"),
            "feasible": body.get("replicas", 0) > 0,
        }
    return {
        "ttft_ms": body.get("ttft_ms"),
        "tpot_ms": body.get("tpot_ms"),
        "throughput_tokens_s": body.get("output_throughput"),
        "feasible": body.get("feasible"),
    }


def evaluate_task(context: ServiceContext, task: Task) -> dict[str, Any]:
    """One scenario's row: its sweep values, key and figures, or its error."""
    from pydantic import ValidationError

    try:
        request = _request_model(task.operation).model_validate(dict(task.echo))
        body = _answer(context, task.operation, request)
    except (ChunkwiseError, ValidationError) as err:
        return error_row(task, str(err).splitlines()[0])
    row = _row(task)
    row.update(_result(task.operation, body))
    return row


def _row(task: Task) -> dict[str, Any]:
    """A row's sweep values, operation and key (its figures and error empty)."""
    row: dict[str, Any] = dict.fromkeys(RESULT_COLUMNS)
    row.update(task.values)
    row["operation"] = task.operation
    row["scenario_key"] = task.scenario_key
    return row


def error_row(task: Task, error: str) -> dict[str, Any]:
    """The row of a scenario that failed: its values and key, and the error."""
    row = _row(task)
    row["error"] = error
    return row


def _answer(context: ServiceContext, operation: str, request: Any) -> dict[str, Any]:
    """The answer of the service function the API calls for ``operation``, as JSON."""
    if operation == "simulate":
        from app.services.simulate import simulate

        return simulate(context, request, allow_paths=True).model_dump(mode="json")
    if operation == "optimize":
        from app.services.optimize import optimize

        return optimize(context, request, allow_paths=True).model_dump(mode="json")
    from app.services.capacity import plan

    return plan(context, request).model_dump(mode="json")


# -- the local pool ---------------------------------------------------------------------------
_WORKER_CONTEXT: list[ServiceContext] = []  # one per worker process


def worker_start(settings_json: str | None = None) -> None:
    """A pool process's context: from ``settings_json`` (the API's settings), else the
    environment's."""
    from app.services.context import create_context
    from app.settings import Settings

    settings = Settings() if settings_json is None else Settings.model_validate_json(settings_json)
    _WORKER_CONTEXT.append(create_context(settings))


def evaluate_tasks(context: ServiceContext, tasks: Sequence[Task]) -> list[dict[str, Any]]:
    """A batch's rows: the one task function of the local pool, the API's own pool and the
    Celery workers (app/services/sweep_queue.py)."""
    return [evaluate_task(context, task) for task in tasks]


def evaluate_batch(
    tasks: Sequence[Task],
    owner: str | None = None,
    calibrations: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """A pool process's batch (the process's own context), evaluated as ``owner`` (the
    sweep's: a stored calibration belongs to one); ``calibrations``: the stored profiles its
    scenarios name (by id, as stored) when the API keeps them in its own process, where a pool
    process cannot read them."""
    from app.services.context import REQUEST_OWNER

    context = _WORKER_CONTEXT[0]
    for calibration_id, value in (calibrations or {}).items():
        left_s = float(value.get("expires_at_s", 0)) - time.time()
        if left_s > 0:
            context.calibrations.put(calibration_id, dict(value), ttl_s=math.ceil(left_s))
    owned = REQUEST_OWNER.set(owner)
    try:
        return evaluate_tasks(context, tasks)
    finally:
        REQUEST_OWNER.reset(owned)


def named_calibrations(tasks: Sequence[Task]) -> set[str]:
    """The stored calibrations (ids) the tasks' scenarios name."""
    return {ref for task in tasks if isinstance(ref := task.echo.get("calibration"), str)}


def batches(tasks: Sequence[T], processes: int) -> Iterator[Sequence[T]]:
    """Batches of about ``len / (processes * BATCHES_PER_PROCESS)`` tasks (or their keys), at
    most :data:`MAX_BATCH`."""
    size = max(1, min(MAX_BATCH, math.ceil(len(tasks) / (processes * BATCHES_PER_PROCESS))))
    for start in range(0, len(tasks), size):
        yield tasks[start : start + size]


def run_sweep(
    context: ServiceContext,
    tasks: Sequence[Task],
    *,
    processes: int = 1,
    done: Callable[[list[dict[str, Any]]], None],
) -> None:
    """Evaluate ``tasks``: in this process (``processes == 1``) or in a ``spawn`` pool of
    ``processes`` workers, batch by batch; ``done`` gets each finished batch's rows."""
    if processes < 1:
        raise InvalidParameterError("processes", processes, "at least 1")
    if processes == 1:
        for batch in batches(tasks, 1):
            done(evaluate_tasks(context, batch))
        return
    pool = ProcessPoolExecutor(
        max_workers=processes,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=worker_start,
    )
    with pool:
        pending: set[Future[list[dict[str, Any]]]] = {
            pool.submit(evaluate_batch, batch) for batch in batches(tasks, processes)
        }
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                done(future.result())


# -- the output file (csv, json, parquet) and resume -------------------------------------------
#: The output file types, by suffix.
OUT_SUFFIXES = (".csv", ".json", ".parquet")
PARQUET_NEEDS = "pyarrow (pip install 'chunkwise[kernels]' or pip install pyarrow)"


def check_out(path: Path) -> None:
    """The output's type is known, and parquet's library installed."""
    suffix = path.suffix.lower()
    if suffix not in OUT_SUFFIXES:
        raise InvalidParameterError("out", path.name, f"a file ending {', '.join(OUT_SUFFIXES)}")
    if suffix == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            needs = f"csv or json, or install {PARQUET_NEEDS}"
            raise InvalidParameterError("out", path.name, needs) from None


def columns(tasks: Sequence[Task], rows: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """The sweep values' names (in the spec's order), then :data:`RESULT_COLUMNS`."""
    names: dict[str, None] = {}
    for task in tasks:
        names.update(dict.fromkeys(name for name, _ in task.values))
    for row in rows:
        names.update(dict.fromkeys(name for name in row if name not in RESULT_COLUMNS))
    return [name for name in names if name not in RESULT_COLUMNS] + list(RESULT_COLUMNS)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows an earlier (interrupted) sweep wrote to ``path``; none when it is absent."""
    if not path.exists():
        return []
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            with path.open(newline="", encoding="utf-8") as handle:
                return [dict(row) for row in csv.DictReader(handle)]
        if suffix == ".json":
            rows = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(rows, list):
                raise ValueError("not a list of rows")
            return rows
        import pyarrow.parquet as pq

        return list(pq.read_table(path).to_pylist())
    except (ValueError, OSError) as err:
        raise InvalidParameterError(
            "out", path.name, f"a sweep's earlier output to resume from ({err})"
        ) from None


def _csv_cell(value: Any) -> Any:
    if isinstance(value, list | dict):
        return json.dumps(value)
    return "" if value is None else value


def csv_lines(names: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """The rows as CSV text, a header line first, then a line per row."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(names)
    for row in rows:
        writer.writerow([_csv_cell(row.get(name)) for name in names])
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    if buffer.getvalue():
        yield buffer.getvalue()


def json_chunks(names: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """The rows as one JSON array (each row's columns in ``names`` order), a row a chunk."""
    yield "["
    separator = "\n"
    for row in rows:
        yield separator + json.dumps({name: row.get(name) for name in names})
        separator = ",\n"
    yield "\n]\n"


def parquet_bytes(names: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> bytes:
    """The rows as a parquet file (lists and objects as their JSON text)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    listed = list(rows)
    table = pa.table({name: [_parquet_cell(row.get(name)) for row in listed] for name in names})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return bytes(sink.getvalue().to_pybytes())


def write_rows(path: Path, names: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> None:
    """Every row to ``path`` (a temporary file renamed over it: an interruption leaves the
    last complete file)."""
    partial = path.with_name(path.name + ".partial")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        with partial.open("w", newline="", encoding="utf-8") as handle:
            handle.writelines(csv_lines(names, rows))
    elif suffix == ".json":
        shaped = [{name: row.get(name) for name in names} for row in rows]
        partial.write_text(json.dumps(shaped, indent=1) + "\n", encoding="utf-8")
    else:
        partial.write_bytes(parquet_bytes(names, rows))
    partial.replace(path)


def _parquet_cell(value: Any) -> Any:
    """A parquet column holds one type: lists and objects as their JSON text."""
    return json.dumps(value) if isinstance(value, list | dict) else value
