"""Wire schemas shared by every resource: problem details and health."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

#: What ``backend`` names in the cache status and counters.
_BACKEND = "the latency cache: memory (in-process) or redis"
#: The API's own documents build their validators on first use (pydantic's defer_build), not
#: at import: a CLI command imports this module for CacheCounters alone.
_ON_FIRST_USE = ConfigDict(defer_build=True)


class ProblemFieldError(BaseModel):
    """One invalid field of a request (``loc`` as in pydantic: ``["body", "model"]``)."""

    model_config = _ON_FIRST_USE

    loc: list[str | int] = Field(
        description="where the invalid value is: 'body', then the field names and list indices"
    )
    msg: str = Field(description="what is wrong with it")
    type: str = Field(default="value_error", description="the error kind (pydantic's type)")


class Problem(BaseModel):
    """RFC 9457 problem details (``application/problem+json``)."""

    model_config = ConfigDict(extra="allow", defer_build=True)

    type: str = Field(default="about:blank", description="URI identifying the problem type")
    title: str = Field(description="short summary of the problem type")
    status: int = Field(description="the HTTP status code of the response")
    detail: str = Field(default="", description="what went wrong with this request")
    instance: str | None = Field(default=None, description="the request's path")
    errors: list[ProblemFieldError] | None = Field(
        default=None,
        description="the invalid fields of a 422 (the first ones, when there are many)",
    )
    valid: list[str] | None = Field(
        default=None, description="Valid names, when a catalog name was not recognised"
    )
    request_id: str | None = Field(
        default=None, description="the request's id, as in the X-Request-ID header"
    )


class Health(BaseModel):
    model_config = _ON_FIRST_USE

    status: Literal["ok"] = Field(default="ok", description="ok: the process answers")


class CacheStatus(BaseModel):
    model_config = _ON_FIRST_USE

    backend: str = Field(description=_BACKEND)
    reachable: bool = Field(description="whether the backend answered the probe")
    detail: str = Field(default="", description="the backend's answer or error, when any")
    writable: bool = Field(
        default=True, description="false while the backend answers but refuses writes (full)"
    )


class Readiness(BaseModel):
    model_config = _ON_FIRST_USE

    status: Literal["ready", "unavailable"] = Field(
        description="ready: the cache backend answers and accepts writes (else a 503 problem)"
    )
    cache: CacheStatus = Field(description="the cache backend's state")


class CacheCounters(BaseModel):
    """Cache activity attributed to one request."""

    backend: str = Field(description=_BACKEND)
    hits: int = Field(default=0, description="forward shapes found in the cache")
    misses: int = Field(default=0, description="forward shapes not in the cache (computed)")
    round_trips: int = Field(default=0, description="batched cache reads (one MGET each)")
    response_cache_hit: bool = Field(
        default=False, description="the whole response came from the response cache"
    )


def problem_dict(**fields: Any) -> dict[str, Any]:
    """A problem document without the ``None`` fields."""
    return Problem(**fields).model_dump(exclude_none=True)
