"""A sweep spec expanded into its scenarios' request bodies (pure; stdlib only).

Two spellings, both one request body per scenario before any validation:

- a grid document (the service loads YAML or JSON into it)::

      {"operation": "simulate", "base": {...one request body...},
       "grid": {"input_length": [256, 1024], "engine_options.arrival_spread": [...]},
       "exclude": [{"input_length": 1024, "concurrency": 64}]}

  the cross product of the grid's lists over ``base``, minus every point matching all the
  pairs of an exclude rule;
- CSV rows: a header naming request fields and an ``operation`` column, one scenario a row;
  a cell stays text (the request model converts it to its field's type) unless it spells a
  JSON list or object; an empty cell leaves the field out.

A dotted name (``engine_options.arrival_spread``) sets a field of a nested object. The bound
(:data:`~app.core.limits.MAX_SWEEP_SCENARIOS`) is checked before a point is built.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.errors import InvalidParameterError
from app.core.limits import MAX_SWEEP_SCENARIOS, SWEEP_OPERATIONS

#: The CSV column naming each row's operation.
OPERATION_COLUMN = "operation"
#: The keys of a grid document.
GRID_KEYS = ("operation", "base", "grid", "exclude")


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepPoint:
    """One scenario of a sweep: its operation, its request body, and the values the sweep gave
    it (the grid's or the CSV row's, by field name, in the spec's order)."""

    operation: str
    body: Mapping[str, Any]
    values: tuple[tuple[str, Any], ...]


def set_field(body: dict[str, Any], name: str, value: Any) -> None:
    """``body[name] = value``, a dotted name into (new or copied) nested objects."""
    head, _, rest = name.partition(".")
    if not rest:
        body[head] = value
        return
    inner = body.get(head)
    if inner is None:
        inner = {}
    elif not isinstance(inner, Mapping):
        raise InvalidParameterError(name, inner, f"an object under {head!r} to set {rest!r} in")
    body[head] = dict(inner)
    set_field(body[head], rest, value)


def _operation(value: object, field: str) -> str:
    if value not in SWEEP_OPERATIONS:
        raise InvalidParameterError(field, value, f"one of {', '.join(SWEEP_OPERATIONS)}")
    assert isinstance(value, str)
    return value


def _check_count(count: int) -> None:
    if count > MAX_SWEEP_SCENARIOS:
        raise InvalidParameterError(
            "grid", f"{count} scenarios", f"at most {MAX_SWEEP_SCENARIOS} scenarios"
        )


def _grid(document: Mapping[str, Any]) -> dict[str, list[Any]]:
    grid = document.get("grid")
    if not isinstance(grid, Mapping) or not grid:
        raise InvalidParameterError("grid", grid, "an object of field -> [values, ...], not empty")
    lists: dict[str, list[Any]] = {}
    for name, values in grid.items():
        if not isinstance(values, list) or not values:
            raise InvalidParameterError(f"grid.{name}", values, "a list of values, not empty")
        lists[str(name)] = values
    return lists


def _excludes(document: Mapping[str, Any], grid: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    rules = document.get("exclude", [])
    if not isinstance(rules, list):
        raise InvalidParameterError("exclude", rules, "a list of {field: value} objects")
    for rule in rules:
        if not isinstance(rule, Mapping) or not rule:
            raise InvalidParameterError("exclude", rule, "an object of grid field -> value")
        for name in rule:
            if name not in grid:
                raise InvalidParameterError(
                    f"exclude.{name}", rule[name], f"a grid field ({', '.join(grid)})"
                )
    return [dict(rule) for rule in rules]


def grid_count(grid: Mapping[str, Sequence[Any]]) -> int:
    """Points of the grid's cross product (before its exclude rules)."""
    return math.prod(len(values) for values in grid.values())


def expand_grid(document: Mapping[str, Any]) -> tuple[SweepPoint, ...]:
    """The scenarios of a grid document, in the grid's order (the last field varies fastest)."""
    if not isinstance(document, Mapping):
        raise InvalidParameterError("spec", document, "an object with operation, base and grid")
    unknown = [key for key in document if key not in GRID_KEYS]
    if unknown:
        raise InvalidParameterError(unknown[0], document[unknown[0]], f"one of {GRID_KEYS}")
    operation = _operation(document.get("operation"), "operation")
    base = document.get("base", {})
    if not isinstance(base, Mapping):
        raise InvalidParameterError("base", base, "an object: one request body")
    grid = _grid(document)
    _check_count(grid_count(grid))
    rules = _excludes(document, grid)
    names = list(grid)
    points = []
    for combination in itertools.product(*grid.values()):
        values = tuple(zip(names, combination, strict=True))
        given = dict(values)
        if any(all(given[k] == v for k, v in rule.items()) for rule in rules):
            continue
        body = dict(base)
        for name, value in values:
            set_field(body, name, value)
        points.append(SweepPoint(operation=operation, body=body, values=values))
    return tuple(points)


def _cell(text: str) -> Any:
    """A CSV cell: a JSON list or object parsed, anything else as text (the request model
    converts it to its field's type)."""
    stripped = text.strip()
    if stripped[:1] in ("[", "{"):
        try:
            return json.loads(stripped)
        except json.JSONDecodeError:
            return stripped
    return stripped


def expand_csv(text: str) -> tuple[SweepPoint, ...]:
    """The scenarios of a CSV spec: one a row, its ``operation`` column naming its request."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if not header or OPERATION_COLUMN not in header:
        raise InvalidParameterError(
            OPERATION_COLUMN, header, "a CSV header with an 'operation' column and request fields"
        )
    names = [name.strip() for name in header]
    rows = [row for row in reader if any(cell.strip() for cell in row)]
    if not rows:
        raise InvalidParameterError("rows", 0, "at least one scenario row")
    _check_count(len(rows))
    points = []
    for number, row in enumerate(rows, start=2):
        if len(row) != len(names):
            raise InvalidParameterError(
                f"row {number}", len(row), f"{len(names)} cells (the header's columns)"
            )
        cells = dict(zip(names, row, strict=True))
        operation = _operation(cells.pop(OPERATION_COLUMN).strip(), f"row {number}: operation")
        values = tuple((name, _cell(cell)) for name, cell in cells.items() if cell.strip())
        body: dict[str, Any] = {}
        for name, value in values:
            set_field(body, name, value)
        points.append(SweepPoint(operation=operation, body=body, values=values))
    return tuple(points)
