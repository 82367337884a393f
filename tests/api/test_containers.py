"""No Docker engine here: parse the Dockerfile and docker-compose.yml, check the essentials."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    lines: list[str] = []
    current = ""
    for raw in (ROOT / "docker" / "Dockerfile").read_text().splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    out = []
    for line in lines:
        instruction, _, args = line.partition(" ")
        out.append((instruction.upper(), args.strip()))
    return out


def stages(instructions: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for instruction, args in instructions:
        if instruction == "FROM":
            result.append([])
        if result:
            result[-1].append((instruction, args))
    return result


def test_dockerfile_is_multi_stage_slim_non_root_with_healthcheck() -> None:
    instructions = dockerfile_instructions()
    # ARG defaults are substituted into FROM lines.
    args = dict(a.split("=", 1) for i, a in instructions if i == "ARG" and "=" in a)
    built = stages(instructions)
    assert len(built) >= 2, "multi-stage build expected"
    for stage in built:
        image = stage[0][1].split()[0]
        for name, value in args.items():
            image = image.replace("${" + name + "}", value)
        assert "slim" in image or "alpine" in image, image
    final = built[-1]
    final_kinds = [i for i, _ in final]
    assert any(i == "COPY" and a.startswith("--from=") for i, a in final), "copies from a stage"
    users = [a for i, a in final if i == "USER"]
    assert users, "final stage must set USER"
    assert users[-1].split(":")[0] not in {"root", "0"}
    assert "HEALTHCHECK" in final_kinds
    healthcheck = next(a for i, a in final if i == "HEALTHCHECK")
    assert "/healthz" in healthcheck
    assert any(i == "EXPOSE" and "8000" in a for i, a in final)
    cmd = json.loads(next(a for i, a in final if i == "CMD"))
    assert cmd[:2] == ["chunkwise", "serve"]
    assert "--workers" in cmd
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0"


def test_the_image_defaults_to_the_shared_store() -> None:
    """Its two workers share one Redis (the compose file's): a calibration one stores, the
    other reads (issue 34: on the in-process cache it answered 200 or 404 by worker)."""
    final = stages(dockerfile_instructions())[-1]
    env = " ".join(a for i, a in final if i == "ENV")
    assert "APP_CACHE_BACKEND=redis" in env and "APP_REDIS_URL=redis://redis:6379/0" in env
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert "redis" in compose["services"]


def test_the_healthcheck_probes_the_port_the_service_listens_on() -> None:
    """Both follow APP_PORT: serve takes it when --port is not given, the probe reads it."""
    final = stages(dockerfile_instructions())[-1]
    env = " ".join(a for i, a in final if i == "ENV")
    assert "APP_PORT=8000" in env
    probe = json.loads(next(a for i, a in final if i == "HEALTHCHECK").split(" CMD ", 1)[1])
    assert "APP_PORT" in probe[-1] and ":8000/" not in probe[-1]
    cmd = json.loads(next(a for i, a in final if i == "CMD"))
    assert "--port" not in cmd  # a fixed --port would ignore APP_PORT


def test_dependencies_are_a_layer_of_their_own() -> None:
    """pip installs pyproject's dependencies before the code is copied, so a code change does
    not invalidate that layer; the package itself then installs without dependencies."""
    build = stages(dockerfile_instructions())[0]
    kinds = [(i, a) for i, a in build]
    copy_app = next(n for n, (i, a) in enumerate(kinds) if i == "COPY" and "app" in a.split())
    deps = next(n for n, (i, a) in enumerate(kinds) if i == "RUN" and "requirements.txt" in a)
    assert deps < copy_app
    assert [a for i, a in kinds[:deps] if i == "COPY"] == ["pyproject.toml ./"]
    final_install = kinds[copy_app + 1 :]
    assert any(i == "RUN" and "--no-deps ." in a for i, a in final_install)


def test_the_requirements_line_lists_exactly_pyprojects_dependencies(tmp_path: Path) -> None:
    import subprocess
    import sys
    import tomllib

    run = next(a for i, a in dockerfile_instructions() if i == "RUN" and "requirements.txt" in a)
    snippet = shlex.split(run.split(">", 1)[0])[2]  # python -c "<snippet>"
    (tmp_path / "pyproject.toml").write_bytes((ROOT / "pyproject.toml").read_bytes())
    printed = subprocess.run(
        [sys.executable, "-c", snippet], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    expected = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert printed == expected


def test_serve_listens_on_app_port(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    from app.cli import main

    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: seen.update(kwargs))
    monkeypatch.setenv("APP_PORT", "9123")
    assert main(["serve"]) == 0 and seen["port"] == 9123
    assert main(["serve", "--port", "8001"]) == 0 and seen["port"] == 8001
    assert seen["http"] == "app.api.http_protocol:BoundedH11Protocol"  # h11, bounded (N13)
    assert seen["h11_max_incomplete_event_size"] == 64 * 1024


def test_dockerfile_copies_only_existing_paths() -> None:
    for instruction, args in dockerfile_instructions():
        if instruction == "COPY" and not args.startswith("--from="):
            *sources, _dest = shlex.split(args)
            for source in sources:
                assert (ROOT / source).exists(), source


def compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def test_compose_runs_api_workers_against_a_healthy_redis() -> None:
    services = compose()["services"]
    redis = services["redis"]
    assert redis["image"].startswith("redis:")
    test = redis["healthcheck"]["test"]
    assert "redis-cli" in test and "ping" in test
    api = services["api"]
    assert (ROOT / api["build"]["context"] / api["build"]["dockerfile"]).is_file()
    assert api["depends_on"]["redis"]["condition"] == "service_healthy"
    assert api["environment"]["APP_CACHE_BACKEND"] == "redis"
    assert api["environment"]["APP_REDIS_URL"].startswith("redis://redis:")
    command = api["command"]
    assert command[:2] == ["chunkwise", "serve"]
    assert int(command[command.index("--workers") + 1]) >= 2
    assert any(str(port).endswith(":8000") for port in api["ports"])


def settings_of(environment: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """The Settings a process with ``environment`` reads (every name a known setting)."""
    from app.settings import Settings

    known = {f"APP_{name.upper()}" for name in Settings.model_fields}
    assert set(environment) <= known, set(environment) - known
    for name, value in environment.items():
        monkeypatch.setenv(name, str(value))
    return Settings()


def test_compose_environment_is_valid_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    environment = compose()["services"]["api"]["environment"]
    settings = settings_of(environment, monkeypatch)
    assert settings.cache_backend == "redis"
    assert settings.redis_url == "redis://redis:6379/0"
    # Authentication on: compose refuses to start without the tokens.
    assert environment["APP_API_KEYS"].startswith("${CHUNKWISE_API_KEYS:?")


def test_serve_tells_its_workers_how_many_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers' Settings.workers (APP_WORKERS) comes from --workers: with several on the
    in-process cache, a worker refuses to store a calibration the others cannot read."""
    import os

    import uvicorn

    from app.cli import main
    from app.settings import Settings

    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: None)
    monkeypatch.setenv("APP_WORKERS", "1")  # restored after the test
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "/nonexistent")  # leave the env unchanged
    assert main(["serve", "--workers", "3"]) == 0
    assert os.environ["APP_WORKERS"] == "3" and Settings().workers == 3


def _redis_flags(command: list[str]) -> dict[str, str]:
    """``--name value`` pairs of a redis-server command line."""
    return {
        command[i][2:]: command[i + 1]
        for i in range(1, len(command) - 1)
        if command[i].startswith("--")
    }


def _durable(command: list[str]) -> bool:
    """A Redis that keeps what it holds: an append-only file and no eviction."""
    flags = _redis_flags(command)
    return flags.get("appendonly") == "yes" and flags.get("maxmemory-policy") == "noeviction"


def test_compose_runs_scalable_sweep_workers_on_a_durable_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--scale worker=N``: the worker service has no fixed name or port; it and the API use
    the store service as the broker, a Redis that persists on a volume and never evicts,
    while the latency cache keeps its LRU."""
    services = compose()["services"]
    worker, store, cache = services["worker"], services["store"], services["redis"]
    assert worker["command"][:2] == ["chunkwise", "worker"]
    assert "container_name" not in worker and "ports" not in worker
    assert worker["healthcheck"] == {"disable": True}  # no HTTP to probe
    for name in ("redis", "store"):
        assert worker["depends_on"][name]["condition"] == "service_healthy"
        assert services["api"]["depends_on"][name]["condition"] == "service_healthy"
    assert _durable(store["command"])
    volume = store["volumes"][0].split(":")
    assert volume[1] == "/data" and volume[0] in compose()["volumes"]
    assert _redis_flags(store["command"])["dir"] == "/data"
    assert _redis_flags(cache["command"])["maxmemory-policy"] == "allkeys-lru"
    for service in ("api", "worker"):
        settings = settings_of(services[service]["environment"], monkeypatch)
        assert settings.sweep_broker == "redis://store:6379/0"
        assert settings.redis_url == "redis://redis:6379/0"


def kubernetes() -> dict[tuple[str, str], dict[str, Any]]:
    path = ROOT / "deploy" / "kubernetes" / "chunkwise.yaml"
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in documents}


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


def test_kubernetes_runs_the_api_workers_and_a_redis_with_a_volume() -> None:
    manifests = kubernetes()
    api = _container(manifests["Deployment", "chunkwise-api"])
    assert api["command"][:2] == ["chunkwise", "serve"]
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    port = api["ports"][0]
    assert port["containerPort"] == 8000 and api["readinessProbe"]["httpGet"]["port"] == "http"
    worker = _container(manifests["Deployment", "chunkwise-worker"])
    assert worker["command"][:2] == ["chunkwise", "worker"]
    assert "readinessProbe" not in worker and "ports" not in worker
    store = manifests["StatefulSet", "chunkwise-store"]
    redis = _container(store)
    assert _durable(redis["command"])
    (claim,) = store["spec"]["volumeClaimTemplates"]
    (mount,) = redis["volumeMounts"]
    assert mount["name"] == claim["metadata"]["name"] and mount["mountPath"] == "/data"
    assert _redis_flags(redis["command"])["dir"] == "/data"
    cache = _container(manifests["Deployment", "chunkwise-cache"])
    assert _redis_flags(cache["command"])["maxmemory-policy"] == "allkeys-lru"
    for name in ("chunkwise-api", "chunkwise-cache", "chunkwise-store"):
        service = manifests["Service", name]
        labels = manifests.get(("Deployment", name)) or manifests["StatefulSet", name]
        selector = labels["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"] == selector


def test_kubernetes_configuration_is_valid_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both workloads read the ConfigMap: known settings pointing at the two Redis Services."""
    manifests = kubernetes()
    for workload in ("chunkwise-api", "chunkwise-worker"):
        sources = _container(manifests["Deployment", workload])["envFrom"]
        assert {"configMapRef": {"name": "chunkwise-config"}} in sources
    settings = settings_of(manifests["ConfigMap", "chunkwise-config"]["data"], monkeypatch)
    assert settings.redis_url.startswith("redis://chunkwise-cache:")
    assert settings.sweep_broker.startswith("redis://chunkwise-store:")
