"""Helpers the API and CLI tests share."""

from __future__ import annotations

import json
from typing import Any

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


def assert_names_field(response: httpx.Response | Any, field: str | int) -> None:
    """A 422 problem+json whose only invalid field is ``field``."""
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert [e["loc"][-1] for e in response.json()["errors"]] == [field]


def long_context_qwen3_32b(factor: float = 32.0) -> dict[str, object]:
    """Qwen3-32B inline, its context extended by YaRN as its model card describes (``factor`` x
    the 32,768 original positions; 32: 1,048,576 tokens), for the tests of bounds that only a
    prompt beyond the native 40,960 tokens reaches."""
    from app.core.catalog.models import CONFIG_DIR

    config = json.loads((CONFIG_DIR / "qwen3_dense_32b.json").read_text(encoding="utf-8"))
    config["rope_scaling"] = {
        "rope_type": "yarn",
        "factor": factor,
        "original_max_position_embeddings": 32768,
    }
    return {"name": "Qwen3-32B-yarn", "config": config}
