"""A TypeScript client typed from the live ``/openapi.json`` calls every operation of the real app.

The app runs under uvicorn on a free loopback port. The project ``tests/clients/ts`` (exact
versions in its package-lock.json) is copied to a temporary directory and installed with
``npm ci``; ``openapi-typescript`` generates the types from the server's ``/openapi.json``;
``tsc --strict`` (``noEmitOnError``) compiles ``src/client.ts`` against them, so a schema change
that breaks a typed client fails here; plain ``node`` runs it against the server: one check per
operation id, errors read through the ``Problem`` schema. Needs ``node`` and ``npm`` (``.ci/run``
installs Debian's ``nodejs`` and ``npm``): without them the test fails under ``CI=true`` and skips
elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.test_calibrations import _csv, _rows
from tests.integration.conftest import Uvicorn
from tests.integration.servers import redis_env, start_server

pytestmark = pytest.mark.ts_client

PROJECT = Path(__file__).resolve().parent / "ts"
SOURCES = ("package.json", "package-lock.json", "tsconfig.json", "src/client.ts")
NPM_TIMEOUT_S = 240


def _tools() -> tuple[str, str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        reason = "the TypeScript client test needs node and npm (.ci/run installs nodejs and npm)"
        if os.environ.get("CI", "").lower() not in ("", "0", "false"):
            pytest.fail(reason)
        pytest.skip(reason)
    return node, npm


def _run(args: list[str], cwd: Path, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "npm_config_update_notifier": "false", "NO_COLOR": "1"}
    result = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    assert result.returncode == 0, (
        f"{' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    )
    return result


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Uvicorn]:
    """One uvicorn worker with the in-process cache on a free loopback port."""
    app = Uvicorn(env=redis_env(None), workers=1)
    log = tmp_path_factory.mktemp("uvicorn") / "uvicorn.log"
    try:
        yield start_server(app, log)
    finally:
        app.stop()


def test_packages_are_pinned() -> None:
    """Every dependency is an exact version, the one the lockfile installs."""
    manifest = json.loads((PROJECT / "package.json").read_text(encoding="utf-8"))
    lock = json.loads((PROJECT / "package-lock.json").read_text(encoding="utf-8"))
    wanted = manifest["dependencies"]
    assert {"openapi-typescript", "openapi-fetch", "typescript"} <= set(wanted)
    for name, version in wanted.items():
        assert version[0].isdigit(), f"{name}: {version} is a range"
        assert lock["packages"][f"node_modules/{name}"]["version"] == version


def test_every_operation_through_the_typescript_client(server: Uvicorn, tmp_path: Path) -> None:
    node, npm = _tools()
    for name in SOURCES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(PROJECT / name, tmp_path / name)
    _run([npm, "ci", "--no-audit", "--no-fund", "--prefer-offline"], tmp_path, NPM_TIMEOUT_S)
    schema_url = f"{server.base_url}/openapi.json"
    _run(
        [node, "node_modules/openapi-typescript/bin/cli.js", schema_url,
         "--default-non-nullable", "false", "--output", "src/generated/schema.ts"],
        tmp_path,
    )  # fmt: skip
    _run([node, "node_modules/typescript/bin/tsc", "--strict", "--project", "."], tmp_path)
    (tmp_path / "calibration.csv").write_text(_csv(_rows()), encoding="utf-8")
    result = _run([node, "build/client.js", server.base_url, "calibration.csv"], tmp_path)
    called = set(json.loads(result.stdout.splitlines()[-1])["called"])
    schema = httpx.get(schema_url, timeout=10).json()
    operations = {op["operationId"] for ops in schema["paths"].values() for op in ops.values()}
    assert called == operations
