"""Suite-wide hooks.

The coverage gate (``scripts/check`` runs pytest with ``--cov=app.core --cov-fail-under=90``)
traces every line the pytest process runs, which makes the core about 3.5x slower. The
schemathesis module (``tests/api/test_fuzz.py``) serves its generated requests under a 2-second
request deadline, so a traced search can turn a 200 into a 504 on a loaded machine: its tests
run with coverage paused (pytest-cov's ``no_cover`` marker). The unit tests cover the core on
their own; the servers that integration and e2e tests start in subprocesses are not traced.

Property tests (hypothesis) run derandomized, so a run is reproducible and CI never turns red
on a new random example; ``CHUNKWISE_HYPOTHESIS=explore`` runs them with fresh random examples
(what a developer does to look for counter-examples). The reproducible profile has no per-example
deadline: an example's time says nothing about its correctness, and on a loaded two-core machine
(CI, or several suites at once) hypothesis's 200 ms default turned a passing property into a
``DeadlineExceeded`` / ``Flaky`` failure. Speed is measured in ``bench/``, not here.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("reproducible", derandomize=True, database=None, deadline=None)
settings.register_profile("explore")
settings.load_profile(
    "explore" if os.environ.get("CHUNKWISE_HYPOTHESIS") == "explore" else "reproducible"
)

#: Test modules that run with coverage paused, and why.
UNTRACED = {
    Path(__file__).parent / "api" / "test_fuzz.py": "requests under a 2 s deadline",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("_cov") or config.getoption("no_cov", default=False):
        return  # pytest-cov absent or disabled (-p no:cov, --no-cov): nothing is traced
    for item in items:
        if item.path in UNTRACED:
            item.add_marker(pytest.mark.no_cover)
