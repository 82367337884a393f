"""Helpers the API and CLI tests share."""

from __future__ import annotations

import httpx
import pytest

from app.cli import main


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``chunkwise ARGV`` in-process: the exit code, stdout and stderr."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def assert_names_field(response: httpx.Response, field: str) -> None:
    """A 422 problem+json whose only invalid field is ``field``."""
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert [e["loc"][-1] for e in response.json()["errors"]] == [field]
