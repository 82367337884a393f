"""Dependencies point one way, between the top-level layers of ``app`` and inside ``app.core``.

An AST walk over every module under ``app`` enforces both tables, so a stray import (a local one
inside a function or under ``TYPE_CHECKING`` included) fails CI.

Top level (:data:`ALLOWED`)::

    core  <-  models  <-  services, cache  <-  api, cli  <-  main
    settings (pydantic-settings, over the plain service_settings) is a leaf beside core; web holds
    static assets; nothing imports api, cli or main.

Inside core (:data:`CORE_ALLOWED`), an arrow reads "may import"::

    validation ──► anything in core
        │
        ▼
    optimizer ──► workload ──► engine ──► scheduler
        │            │           │            │
        ▼            ▼           ▼            ▼
      cost, basics (errors, limits, chunking, spec, parallel)
        ▲
        │
    runner ──► catalog ──► basics

The engine's loop asks the scheduler interface, so the engine may import ``scheduler``; the
engine and the runner see the latency model only through the cost protocols (``app.core.cost``).
Nothing in ``app.core`` but ``validation`` itself imports ``app.core.validation``; outside core,
only the layers that run a validation (services, cli, api) do.

No module of ``app`` reaches itself through its imports (:func:`test_no_import_cycles`): two
modules that need each other share a piece that belongs to a third, below both.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"

# Which first-party layers each layer may import (besides itself).
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "models": {"core"},
    # The settings' fields (pydantic only) and, above them, their reading by pydantic-settings.
    "service_settings": set(),
    "settings": {"service_settings"},
    "services": {"core", "models", "cache", "settings", "service_settings"},
    "cache": {"core", "models", "service_settings"},
    "api": {"core", "models", "services", "cache", "settings", "service_settings"},
    "cli": {"core", "models", "services", "cache", "settings", "service_settings"},
    "main": {"core", "models", "services", "cache", "settings", "service_settings", "api"},
    "web": set(),
}

#: The basic modules of core: values, bounds and checks every other unit builds on.
BASICS = {"errors", "limits", "chunking", "spec", "parallel"}

# Which units of app.core each unit may import (besides itself). A unit is a module directly
# under app/core (``spec``) or a package there (``engine``, with every module inside it).
CORE_ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "limits": set(),
    "chunking": BASICS,
    # The spec builds the representative decode shape (a cost.ForwardShape value).
    "spec": BASICS | {"cost"},
    "parallel": BASICS,
    "cost": BASICS,
    "catalog": BASICS,
    "scheduler": BASICS | {"cost"},
    "engine": BASICS | {"cost", "scheduler"},
    # Engine profiles: values over the step policies (which policy, with which running cap).
    "profiles": BASICS | {"scheduler"},
    # The serving adapter builds a deployment's runner as an engine profile runs it.
    "runner": BASICS | {"cost", "catalog", "profiles"},
    "workload": BASICS | {"cost", "scheduler", "engine"},
    # Calibration: fitted values of device and engine-profile parameters, and intervals.
    "calibration": BASICS | {"catalog", "profiles"},
    "optimizer": BASICS | {"cost", "scheduler", "engine", "workload"},
    # The resolved question: core values of every unit a request resolves to (the deployment,
    # its runner, the workload spec, the scheduler, the run's parameters), evaluated above it.
    "scenario": BASICS
    | {
        "cost",
        "catalog",
        "calibration",
        "profiles",
        "runner",
        "scheduler",
        "workload",
        "optimizer",
    },
    # A sweep spec expanded into request bodies (the services validate and resolve them).
    "sweep": {"errors", "limits"},
    # Launch configurations: a row's engine command line from the engine profile's values.
    "deploy": BASICS | {"profiles"},
    "validation": {
        *BASICS,
        "cost",
        "catalog",
        "scheduler",
        "engine",
        "runner",
        "workload",
        "optimizer",
        "profiles",
        "calibration",
    },
}

#: The only top-level layers that may import ``app.core.validation``.
VALIDATION_USERS = {"services", "cli", "api"}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _core_unit(module: str) -> str:
    """``app.core.engine.simulation`` -> ``engine``; ``app.core`` itself -> ``""``."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else ""


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(APP.rglob("*.py")):
        rel = path.relative_to(APP.parent).with_suffix("")
        name = ".".join(rel.parts)
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        out.append((name, path))
    return out


_MODULE_NAMES = {name for name, _ in _modules()}


def _core_modules() -> list[tuple[str, Path]]:
    return [(m, p) for m, p in _modules() if m.startswith("app.core.")]


def _from_target(node: ast.ImportFrom, path: Path, module: str) -> str:
    """The module a ``from ... import`` names, relative imports resolved against ``module``."""
    if not node.level:
        return node.module or ""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _imports(path: Path, module: str) -> list[str]:
    """Every module ``path`` imports; ``from X import name`` also yields ``X.name`` when that is a
    module of ``app`` (a submodule reached as ``from app.core import engine`` counts)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _from_target(node, path, module)
            names.append(target)
            names.extend(
                f"{target}.{alias.name}"
                for alias in node.names
                if f"{target}.{alias.name}" in _MODULE_NAMES
            )
    return names


def _cycle_edges(path: Path, module: str) -> set[str]:
    """The modules of ``app`` that ``module`` needs loaded, for the cycle check: as
    :func:`_imports`, except that ``from <ancestor package> import <submodules>`` is no edge to
    the ancestor (a package is always set up before its modules run, and reaching a submodule
    through it needs nothing of its ``__init__``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    edges: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            edges.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _from_target(node, path, module)
            modules = {f"{target}.{a.name}" for a in node.names} & _MODULE_NAMES
            edges.update(modules)
            ancestor = module.startswith(f"{target}.")
            if not (ancestor and len(modules) == len(node.names)):
                edges.add(target)
    return {edge for edge in edges if edge in _MODULE_NAMES and edge != module}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan's algorithm, iterative
    so a long chain never reaches the recursion limit), each sorted; sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    cycles.append(sorted(group))
    return sorted(cycles)


def core_violations(module: str, targets: Iterable[str]) -> list[str]:
    """The imports of core module ``module`` that :data:`CORE_ALLOWED` forbids."""
    unit = _core_unit(module)
    out = []
    for target in targets:
        if not target.startswith("app.core."):
            continue
        target_unit = _core_unit(target)
        if target_unit in ("", unit):
            continue
        if target_unit not in CORE_ALLOWED.get(unit, set()):
            out.append(f"{module} ({unit}) imports {target} ({target_unit})")
    return out


@pytest.mark.parametrize(("module", "path"), _modules(), ids=str)
def test_imports_follow_the_layers(module: str, path: Path) -> None:
    layer = _layer(module)
    if layer in {"", "__main__"}:
        return
    assert layer in ALLOWED, f"{module}: layer {layer!r} missing from the layering table"
    for target in _imports(path, module):
        root = target.split(".")[0]
        if root == "app":
            target_layer = _layer(target)
            if target_layer in ("", layer):
                continue
            assert target_layer in ALLOWED[layer], f"{module} imports {target} ({target_layer})"
        elif layer == "core":
            assert root in sys.stdlib_module_names, f"core module {module} imports {target}"


@pytest.mark.parametrize(("module", "path"), _core_modules(), ids=str)
def test_core_imports_follow_the_core_layers(module: str, path: Path) -> None:
    unit = _core_unit(module)
    assert unit in CORE_ALLOWED, f"{module}: core unit {unit!r} missing from CORE_ALLOWED"
    assert core_violations(module, _imports(path, module)) == []


@pytest.mark.parametrize(("module", "path"), _modules(), ids=str)
def test_only_services_cli_and_api_import_validation(module: str, path: Path) -> None:
    if _layer(module) in VALIDATION_USERS or _core_unit(module) == "validation":
        return
    offenders = [t for t in _imports(path, module) if _core_unit(t) == "validation"]
    assert offenders == [], f"{module} imports {offenders}"


def test_no_import_cycles() -> None:
    # Local imports and those under TYPE_CHECKING count: a cycle hidden in a function is still
    # two modules that need each other.
    graph = {module: _cycle_edges(path, module) for module, path in _modules()}
    assert import_cycles(graph) == []


def test_the_cycle_check_bites(tmp_path: Path) -> None:
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []
    # The two circles this check was written for, as they were.
    windows = tmp_path / "windows.py"
    windows.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from app.core.workload.metrics import ServingPlan\n",
        encoding="utf-8",
    )
    assert "app.core.workload.metrics" in _cycle_edges(windows, "app.core.workload.windows")
    local = tmp_path / "disagg.py"
    local.write_text("def f() -> None:\n    from app.services.simulate import x\n", "utf-8")
    assert "app.services.simulate" in _cycle_edges(local, "app.services.disagg_simulate")
    # A module reaching its siblings through its own package is no edge to the package ...
    sibling = tmp_path / "commands.py"
    sibling.write_text("from app.cli import emit, render\n", encoding="utf-8")
    assert _cycle_edges(sibling, "app.cli.commands") == {"app.cli.emit", "app.cli.render"}
    # ... but a name of the package's own is.
    sibling.write_text("from app.cli import main\n", encoding="utf-8")
    assert _cycle_edges(sibling, "app.cli.commands") == {"app.cli"}


def test_every_core_unit_on_disk_is_in_the_table() -> None:
    on_disk = {_core_unit(m) for m, _ in _core_modules()}
    assert on_disk == set(CORE_ALLOWED)


@pytest.mark.parametrize(
    ("module", "target"),
    [
        ("app.core.engine.simulation", "app.core.runner.runner"),
        ("app.core.engine.simulation", "app.core.workload"),
        ("app.core.runner.layers", "app.core.optimizer.common"),
        ("app.core.workload.serving", "app.core.optimizer"),
        ("app.core.optimizer.agg", "app.core.runner"),
        ("app.core.optimizer.agg", "app.core.validation.replay"),
        ("app.core.scheduler.policies", "app.core.engine"),
        ("app.core.chunking", "app.core.cost"),
    ],
)
def test_the_core_table_rejects_upward_imports(module: str, target: str) -> None:
    # The checker itself must bite: each of these imports points up the graph.
    assert core_violations(module, [target]) != []


def test_the_core_table_accepts_the_drawn_edges() -> None:
    assert (
        core_violations("app.core.engine.simulation", ["app.core.scheduler", "app.core.cost"]) == []
    )
    assert core_violations("app.core.runner.layers", ["app.core.catalog.models"]) == []
    assert core_violations("app.core.validation.replay", ["app.core.optimizer.common"]) == []


def test_local_and_package_imports_are_seen(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from app.core.runner import ModelRunner\n"
        "def f() -> None:\n"
        "    from app.core import validation\n"
        "    from . import decode_queue\n",
        encoding="utf-8",
    )
    targets = _imports(source, "app.core.engine.probe")
    assert {"app.core.runner", "app.core.validation", "app.core.engine.decode_queue"} <= set(
        targets
    )
    assert len(core_violations("app.core.engine.probe", targets)) == 2
