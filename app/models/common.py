"""Wire schemas shared by every resource: problem details and health."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ProblemFieldError(BaseModel):
    """One invalid field of a request (``loc`` as in pydantic: ``["body", "model"]``)."""

    loc: list[str | int]
    msg: str
    type: str = "value_error"


class Problem(BaseModel):
    """RFC 9457 problem details (``application/problem+json``)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(default="about:blank", description="URI identifying the problem type")
    title: str
    status: int
    detail: str = ""
    instance: str | None = None
    errors: list[ProblemFieldError] | None = None
    valid: list[str] | None = Field(
        default=None, description="Valid names, when a catalog name was not recognised"
    )
    request_id: str | None = None


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class CacheStatus(BaseModel):
    backend: str
    reachable: bool
    detail: str = ""
    writable: bool = Field(
        default=True, description="false while the backend answers but refuses writes (full)"
    )


class Readiness(BaseModel):
    status: Literal["ready", "unavailable"]
    cache: CacheStatus


class CacheCounters(BaseModel):
    """Cache activity attributed to one request."""

    backend: str
    hits: int = 0
    misses: int = 0
    round_trips: int = Field(default=0, description="batched cache reads (one MGET each)")
    response_cache_hit: bool = False


def problem_dict(**fields: Any) -> dict[str, Any]:
    """A problem document without the ``None`` fields."""
    return Problem(**fields).model_dump(exclude_none=True)
