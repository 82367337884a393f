"""A sweep worker's memory stays bounded: what a process keeps from one scenario to the next is
a bounded cache (the latency LRU, the plan cache, the runner memo) or a table read once, never
an entry per scenario (docs/sweeps.md, "Memory")."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from typing import Any

import app
from app.cache import MemoryLatencyCache
from app.core.sweep import expand_grid
from app.services import sweep
from app.services.context import create_context
from app.settings import Settings

#: functools caches without a ``maxsize`` whose keys come from a fixed, packaged set, each with
#: why (a cache keyed by anything a request or a scenario chooses must have a ``maxsize``).
FIXED_KEYS = {
    "app.core.catalog.models._load_builtin": "a built-in model id (BUILTIN_MODEL_FILES)",
    "app.core.validation.disagg_recipes.disagg_recipe_table": "the packaged recipe table's path",
}


def _optimize_grid(limits_ms: list[int]) -> dict[str, Any]:
    return {
        "operation": "optimize",
        "base": {
            "engine": "msmodeling",
            "model": "Qwen/Qwen3-0.6B",
            "device": "TEST_DEVICE",
            "input_length": 256,
            "output_length": 32,
            "num_devices": 1,
        },
        "grid": {"tpot_limit_ms": limits_ms},
    }


def test_optimize_scenarios_leave_only_forward_records_in_an_in_process_cache() -> None:
    """Each optimize scenario is a distinct search; the in-process cache keeps the forwards
    they share and nothing per search (a manifest saves a round trip only on a shared cache:
    one per scenario grew a sweep worker by ~3 KB a scenario)."""
    context = create_context(Settings(cache_backend="memory"))
    try:
        tasks = sweep.prepare(context, expand_grid(_optimize_grid([10, 20, 50, 100])))
        rows = sweep.evaluate_tasks(context, tasks)
        assert len(rows) == 4 and all(row["error"] is None for row in rows)
        cache = context.cache
        assert isinstance(cache, MemoryLatencyCache) and not cache.shared
        kinds = {key.split(":")[2] for key in cache._data}
        assert kinds == {"lat"}
    finally:
        context.close()


def test_a_workers_context_keeps_only_bounded_caches() -> None:
    """The caches a worker's context holds across scenarios all have a bound."""
    context = create_context(Settings(cache_backend="memory"))
    try:
        assert isinstance(context.cache, MemoryLatencyCache)
        assert context.cache.max_entries == Settings().cache_max_entries
        assert context.cache.max_bytes == Settings().cache_max_bytes
        assert context.plans.max_plans >= 1 and context.plans.max_items >= 0
        assert context.runners._max_entries >= 1
    finally:
        context.close()


def _app_modules() -> Iterator[Any]:
    for info in pkgutil.walk_packages(app.__path__, "app."):
        if not info.name.endswith(".__main__"):  # running it is the CLI
            yield importlib.import_module(info.name)


def test_every_functools_cache_is_bounded_or_keyed_by_a_fixed_set() -> None:
    """A ``@cache`` keyed by what a scenario chooses grows by one entry per scenario for the
    life of a worker: every unbounded one takes no argument or is listed in FIXED_KEYS."""
    unbounded: list[str] = []
    found = 0
    for module in _app_modules():
        for name, value in vars(module).items():
            if not callable(value) or not hasattr(value, "cache_parameters"):
                continue
            if getattr(value, "__module__", None) != module.__name__:
                continue  # imported from elsewhere: checked where it is defined
            found += 1
            if value.cache_parameters()["maxsize"] is not None:
                continue
            where = f"{module.__name__}.{name}"
            takes = inspect.signature(value.__wrapped__).parameters
            if takes and where not in FIXED_KEYS:
                unbounded.append(where)
    assert found >= len(FIXED_KEYS)
    assert unbounded == []
