"""What the fitted kernel tables (``data/kernel_fit*.json``: GEMM, attention, MoE, collectives)
share: reading a file, checking its document and its entries (objects, keyed by non-empty
strings, each key once), their numbers and knots, and the position of a value between knots.

Every check raises :class:`KernelFitError` naming the table (``what``: ``"kernel fit"``,
``"attention fit"``) and the entry; the table modules build their own curves from the entries.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from app.core.errors import ChunkwiseError

K = TypeVar("K")
V = TypeVar("V")


class KernelFitError(ChunkwiseError):
    """The fitted kernel table is missing or malformed (a packaging error, not bad input)."""


def position(x: float, knots: tuple[float, ...]) -> tuple[int, float]:
    """The knot interval of ``x`` and its share of the way to the upper knot, linear in
    ``log2`` (clamped to the end knots)."""
    if x <= knots[0]:
        return 0, 0.0
    if x >= knots[-1]:
        return len(knots) - 2, 1.0
    i = bisect.bisect_right(knots, x) - 1
    return i, math.log2(x / knots[i]) / math.log2(knots[i + 1] / knots[i])


#: Entries a curve remembers per axis before it forgets them all (token counts, contexts and
#: messages recur within a simulation; the bound keeps a long-lived process's memory flat).
POSITION_MEMO_LIMIT = 4096


def memo_position(
    memo: dict[float, tuple[int, float]], x: float, knots: tuple[float, ...]
) -> tuple[int, float]:
    """:func:`position`, remembered in ``memo`` (emptied at :data:`POSITION_MEMO_LIMIT`)."""
    found = memo.get(x)
    if found is None:
        if len(memo) >= POSITION_MEMO_LIMIT:
            memo.clear()
        found = memo[x] = position(x, knots)
    return found


def check_knots(name: str, knots: tuple[float, ...]) -> None:
    """Two or more positive, increasing knots (a ValueError otherwise)."""
    if len(knots) < 2 or any(k <= 0 for k in knots):
        raise ValueError(f"{name} needs two or more positive knots")
    if any(b <= a for a, b in itertools.pairwise(knots)):
        raise ValueError(f"{name} must increase")


def number(entry: Mapping[str, Any], name: str) -> float:
    """The number ``entry[name]`` (not a bool)."""
    value = entry.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise KernelFitError(f"kernel fit: {name!r} is not a number in {entry.get('device')}")
    return float(value)


def numbers(entry: Mapping[str, Any], name: str) -> tuple[float, ...]:
    """The list of numbers ``entry[name]``."""
    values = entry.get(name)
    if not isinstance(values, list):
        raise KernelFitError(f"kernel fit: {name!r} is not a list in {entry.get('device')}")
    return tuple(number({name: v, "device": entry.get("device")}, name) for v in values)


def number_rows(
    entry: Mapping[str, Any], name: str, key: object, what: str
) -> tuple[tuple[float, ...], ...]:
    """The table ``entry[name]``: a list of rows of numbers (``key`` names the entry)."""
    rows = entry.get(name)
    if not isinstance(rows, list):
        raise KernelFitError(f"{what}: {name!r} is not a list in {key}")
    return tuple(numbers({"row": row, "device": key}, "row") for row in rows)


def read_fit_json(path: Path, what: str) -> Any:
    """The decoded json of the fitted table ``what`` at ``path`` (raises
    :class:`KernelFitError` if it cannot be read or is not json)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise KernelFitError(f"{what}: cannot read {path} ({err.strerror})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise KernelFitError(f"{what}: {path} is not json ({err.msg})") from None


def _a(name: str) -> str:
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name!r}"


def document_entries(
    body: Any, *, what: str, document: str, entries: str
) -> tuple[dict[str, Any], Iterator[dict[str, Any]]]:
    """The ``source`` object and the entries of a fitted table's decoded json: a ``document``
    (its ``format``) with a ``source`` object and an ``entries`` list (both checked now), each
    entry an object (checked as it is reached)."""
    if not isinstance(body, dict) or body.get("format") != document:
        raise KernelFitError(f"{what}: not a {document} document")
    listed, source = body.get(entries), body.get("source")
    if not isinstance(listed, list) or not isinstance(source, dict):
        raise KernelFitError(f"{what}: needs a 'source' object and {_a(entries)} list")
    return source, objects(listed, what=what, entries=entries)


def objects(listed: list[Any], *, what: str, entries: str) -> Iterator[dict[str, Any]]:
    """Each item of the ``entries`` list, an object."""
    for entry in listed:
        if not isinstance(entry, dict):
            raise KernelFitError(f"{what}: {_a(entries)} entry is not an object")
        yield entry


def string_key(
    entry: Mapping[str, Any], names: tuple[str, ...], what: str, kind: str = "entry"
) -> tuple[str, ...]:
    """``entry``'s values of ``names``, each a non-empty string."""
    key = tuple(entry.get(name) for name in names)
    parts = tuple(part for part in key if isinstance(part, str) and part)
    if len(parts) != len(key):
        raise KernelFitError(f"{what}: {kind} without {'/'.join(names)}: {key}")
    return parts


def add_curve(
    curves: dict[K, V],
    key: K,
    build: Callable[[Mapping[str, Any], K], V],
    entry: Mapping[str, Any],
    what: str,
    kind: str = "",
) -> None:
    """``build(entry, key)`` under ``key`` (each key once); a curve it refuses (a ValueError)
    raised naming the key (``kind`` before it: ``"skew"``)."""
    named = f"{kind} {key}" if kind else str(key)
    if key in curves:
        raise KernelFitError(f"{what}: {named} appears twice")
    try:
        curves[key] = build(entry, key)
    except ValueError as err:
        raise KernelFitError(f"{what}: {named}: {err}") from None
