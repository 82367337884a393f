"""Every field of ``/openapi.json`` says what it is and, for a number, in which unit.

A generated client shows a property's ``description`` as its documentation, and the dashboard
reads the same document: a field without one is a number nobody can read. Unit suffixes
(``_ms``, ``_gb``, ...) are the house style for names; these tests hold the descriptions to
them, and every other number to a stated unit or kind (a count of something, a fraction).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

JSON = dict[str, Any]

#: A name's unit suffix -> what its description must contain (a regular expression).
#: Longest suffix first: ``_tokens_s`` and ``_gb_s`` are not seconds.
SUFFIX_UNITS: tuple[tuple[str, str], ...] = (
    ("_tokens_s", r"tokens/s"),
    ("_gb_s", r"GB/s"),
    ("_tflops", r"TFLOPS"),
    ("_tops", r"TOPS"),
    ("_bytes", r"\bbytes\b"),
    ("_gb", r"\bGB\b.*(10\^9 bytes|decimal)|(10\^9 bytes|decimal).*\bGB\b"),
    ("_ms", r"\bms\b"),
    ("_qps", r"requests/s"),
    ("_s", r"(\bs\b|second)"),
)
#: Words that name a unit, or say that a number is a count of something or has none (a
#: fraction, a ratio, an index, a seed): every number's description has one of them.
UNIT_WORDS = re.compile(
    r"\b(ms|s|seconds?|tokens?(/s)?|requests?(/s)?|GB(/s)?|bytes|FLOPs|TFLOPS|TOPS|"
    r"devices?|ranks?|workers?|replicas?|instances?|units?|clients?|steps?|jobs?|runs?|"
    r"layers?|parameters?|chunks?|layouts?|configurations?|probes?|points?|rows?|shapes?|"
    r"forwards?|scenarios?|"
    r"hits?|misses|reads?|elements|stages|fraction|ratio|percentile|multiplier|index|indices|"
    r"seed|port|HTTP status|currency)\b"
)
#: Descriptions the dashboard reads as a placeholder (``default 1.15``, app/web/js/fields.js):
#: their form is fixed, so they cannot name a unit.
PLACEHOLDER = re.compile(r"default ([\d.]+)")


@pytest.fixture
def spec(client: TestClient) -> JSON:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    return dict(response.json())


def _properties(spec: JSON) -> Iterator[tuple[str, str, JSON]]:
    """``(schema, property, its schema)`` of every component schema."""
    for schema_name, schema in spec["components"]["schemas"].items():
        for name, prop in schema.get("properties", {}).items():
            yield schema_name, name, prop


def _parameters(spec: JSON) -> Iterator[tuple[str, str, JSON]]:
    """``("METHOD path", parameter, its object)`` of every query and path parameter."""
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            for parameter in operation.get("parameters", []):
                if parameter["in"] in ("query", "path"):
                    yield f"{method.upper()} {path}", parameter["name"], parameter


def _fields(spec: JSON) -> Iterator[tuple[str, str, str, JSON]]:
    """``(where, name, description, schema)`` of every property and parameter."""
    for where, name, prop in _properties(spec):
        yield where, name, str(prop.get("description") or ""), prop
    for where, name, parameter in _parameters(spec):
        yield where, name, str(parameter.get("description") or ""), parameter.get("schema", {})


def _types(schema: JSON) -> set[str]:
    """The JSON types a value (or the elements of a list or map value) can have."""
    found = {schema["type"]} if isinstance(schema.get("type"), str) else set()
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for part in schema.get(key, []):
            found |= _types(part)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            found |= _types(schema[key])
    return found


def _is_number(schema: JSON) -> bool:
    return bool(_types(schema) & {"integer", "number"})


def test_every_property_and_parameter_has_a_description(spec: JSON) -> None:
    missing = [f"{where}.{name}" for where, name, text, _ in _fields(spec) if not text.strip()]
    assert missing == [], f"{len(missing)} fields without a description: {missing}"


def test_the_document_has_the_fields_the_checks_read(spec: JSON) -> None:
    """The checks below are not vacuous: the document has unit-suffixed numbers of each kind."""
    names = {name for _, name, _, _ in _fields(spec)}
    for suffix, _ in SUFFIX_UNITS:
        if suffix not in ("_tops", "_bytes", "_s", "_qps"):
            assert any(n.endswith(suffix) for n in names), suffix
    assert {"expires_at_s", "hbm_bytes", "peak_int8_tops", "p_qps"} <= names
    assert sum(1 for _, _, _, schema in _fields(spec) if _is_number(schema)) > 200


def _suffix_unit(name: str) -> tuple[str, str] | None:
    for suffix, unit in SUFFIX_UNITS:
        if name.endswith(suffix) or f"{suffix}_" in name:
            return suffix, unit
    return None


def test_a_unit_suffix_is_stated_in_the_description(spec: JSON) -> None:
    """``ttft_ms`` says ms, ``memory_left_gb`` decimal GB, ``expires_at_s`` seconds, and
    ``ttft_ms_interval`` (a suffix inside the name) ms as well."""
    wrong = []
    for where, name, text, _ in _fields(spec):
        rule = _suffix_unit(name)
        if rule is not None and not re.search(rule[1], text):
            wrong.append(f"{where}.{name} ({rule[0]}): {text!r}")
    assert wrong == [], "\n".join(wrong)


def test_every_number_states_its_unit_or_kind(spec: JSON) -> None:
    """A number without a unit suffix (``concurrency``, ``output_throughput``, ``tp``) says
    what it counts or measures; throughputs and rates say per second (or a fraction)."""
    wrong = []
    for where, name, text, schema in _fields(spec):
        if not _is_number(schema) or PLACEHOLDER.fullmatch(text):
            continue
        if not UNIT_WORDS.search(text):
            wrong.append(f"{where}.{name}: no unit: {text!r}")
        elif "throughput" in name and "/s" not in text:
            wrong.append(f"{where}.{name}: a throughput without /s: {text!r}")
        elif name.endswith("_rate") and not re.search(r"/s|per second|fraction", text):
            wrong.append(f"{where}.{name}: a rate without /s or fraction: {text!r}")
        elif name in ("utilisation", "memory_fraction") and "fraction" not in text:
            wrong.append(f"{where}.{name}: a share without fraction: {text!r}")
    assert wrong == [], "\n".join(wrong)


def test_the_dashboard_placeholders_keep_their_form(spec: JSON) -> None:
    """``app/web/js/fields.js`` shows ``default 1.15`` descriptions as a field's placeholder."""
    stated = {
        f"{where}.{name}": text
        for where, name, text, _ in _fields(spec)
        if PLACEHOLDER.fullmatch(text)
    }
    assert stated == {"SchedulerOptions.slack_ratio": "default 1.15"}
