"""Dependencies point one way: core <- models <- services/cache <- api/cli <- main.

An AST walk over every module under ``app`` enforces it, so a stray import fails CI.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"

# Which first-party layers each layer may import (besides itself).
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "models": {"core"},
    "settings": set(),
    "services": {"core", "models", "cache", "settings"},
    "cache": {"core", "models", "settings"},
    "api": {"core", "models", "services", "cache", "settings"},
    "cli": {"core", "models", "services", "cache", "settings"},
    "main": {"core", "models", "services", "cache", "settings", "api"},
    "web": set(),
}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(APP.rglob("*.py")):
        rel = path.relative_to(APP.parent).with_suffix("")
        name = ".".join(rel.parts)
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        out.append((name, path))
    return out


def _imports(path: Path, module: str) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: list[str] = []
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            names.append(target)
    return names


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
