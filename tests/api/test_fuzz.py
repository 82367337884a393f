"""Schemathesis against ``/openapi.json``: every operation, bounded examples, no 500, and every
response conforms to the schema (status code documented, body valid, content type declared).

The app runs in-process through its ASGI interface with the lifespan running (schemathesis
starts it once per app), with the in-process cache. Examples per operation are bounded so the
whole module stays within a minute or two on a 2-core machine.
"""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, settings

from app.main import create_app
from app.settings import Settings

APP = create_app(Settings(cache_backend="memory", log_level="critical", request_deadline_s=10))
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@schema.parametrize()
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
    database=None,
)
def test_every_operation_conforms(case: schemathesis.Case) -> None:
    case.call_and_validate()
