"""Behaviour pinned across restructurings: the golden corpus must reproduce byte for byte.

Recorded with ``python -m scripts.golden --write`` (see :mod:`tests.golden.cases`). A failure
prints a unified diff of the case's output against the recorded one.
"""

from __future__ import annotations

import difflib

import pytest

from tests.golden.harness import all_cases, expected_path, render

CASES = all_cases()


def test_case_names_are_unique() -> None:
    names = [case.name for case in CASES]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_output_is_unchanged(case: object) -> None:
    expected = expected_path(case.name).read_text()  # type: ignore[attr-defined]
    actual = render(case)  # type: ignore[arg-type]
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                actual.splitlines(keepends=True),
                "recorded",
                "now",
                n=2,
            )
        )
        pytest.fail(f"{case.name} changed:\n{diff[:6000]}")  # type: ignore[attr-defined]
