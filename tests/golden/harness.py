"""Run the golden corpus (:mod:`tests.golden.cases`) and render each output as stable text."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path
from typing import Any

from tests.golden.cases import API_CASES, CLI_CASES, TIMING_KEYS, ApiCase, CliCase

EXPECTED_DIR = Path(__file__).with_name("expected")


def _strip_timing(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_timing(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [_strip_timing(v) for v in value]
    return value


def _drop_request_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_request_ids(v) for k, v in value.items() if k not in {"request_id"}}
    return value


def run_api_case(case: ApiCase) -> str:
    """``status`` line, then the JSON body with timing fields removed (keys in body order)."""
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings

    app = create_app(Settings(cache_backend="memory", log_level="warning"))
    with TestClient(app) as client:
        response = client.request(case.method, case.path, json=case.body)
    body = _drop_request_ids(_strip_timing(response.json()))
    return f"status {response.status_code}\n" + json.dumps(body, indent=1) + "\n"


def run_cli_case(case: CliCase) -> str:
    """``exit`` line, then stdout without the lines that carry wall-clock figures."""
    from app.cli import main

    previous = os.environ.get("APP_CACHE_BACKEND")
    os.environ["APP_CACHE_BACKEND"] = "memory"
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            try:
                code = main(list(case.argv))
            except SystemExit as exc:
                code = int(exc.code or 0)
    finally:
        if previous is None:
            os.environ.pop("APP_CACHE_BACKEND", None)
        else:
            os.environ["APP_CACHE_BACKEND"] = previous
    text = out.getvalue()
    if case.argv[-2:] == ("--format", "json"):
        text = json.dumps(_strip_timing(json.loads(text)), indent=1) + "\n"
    lines = [
        line for line in text.splitlines() if not any(part in line for part in case.drop_containing)
    ]
    return f"exit {code}\n" + "\n".join(lines) + "\n"


def expected_path(name: str) -> Path:
    return EXPECTED_DIR / f"{name}.txt"


def all_cases() -> list[ApiCase | CliCase]:
    return [*API_CASES, *CLI_CASES]


def render(case: ApiCase | CliCase) -> str:
    return run_api_case(case) if isinstance(case, ApiCase) else run_cli_case(case)
