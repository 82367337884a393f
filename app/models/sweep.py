"""Wire schemas of ``/v1/sweeps``: a sweep spec (a grid document or CSV rows), a sweep's
progress (:mod:`app.services.sweep_jobs`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.core import limits

#: The longest CSV text a spec may carry (the body limit bounds it too).
MAX_CSV_CHARS = 1_000_000
#: The formats ``GET /v1/sweeps/{id}/results`` answers in.
ResultFormat = Literal["csv", "json", "parquet"]
SweepState = Literal["running", "done", "cancelled"]


class SweepRequest(BaseModel):
    """A sweep spec: ``operation``, ``base`` (one request body) and ``grid`` (field -> values:
    their cross product over the base, minus the ``exclude`` rules), or ``csv`` (a header of
    request fields and an ``operation`` column, one scenario a row). Every scenario is
    validated like the request it is before anything is queued (422 naming the scenario and
    the field); at most ``MAX_SWEEP_SCENARIOS`` (100,000) scenarios."""

    model_config = ConfigDict(extra="forbid")

    operation: limits.SweepOperation | None = Field(
        default=None, description="the request every grid point is: simulate, optimize or plan"
    )
    base: dict[str, Any] | None = Field(
        default=None, description="one request body of that operation, the grid's defaults"
    )
    grid: dict[str, list[Any]] | None = Field(
        default=None,
        description="request field (dotted for a nested one: engine_options.arrival_spread) "
        "-> the values it takes; the scenarios are the cross product",
    )
    exclude: list[dict[str, Any]] | None = Field(
        default=None, description="grid points to leave out: each rule's fields all match"
    )
    csv: str | None = Field(
        default=None,
        max_length=MAX_CSV_CHARS,
        description="instead of a grid: CSV text, a header naming request fields and an "
        "operation column, one scenario a row",
    )

    @model_validator(mode="after")
    def _one_spelling(self) -> SweepRequest:
        if (self.csv is None) == (self.grid is None):
            raise ValueError("give exactly one of grid (with operation and base) and csv")
        return self

    def grid_document(self) -> dict[str, Any]:
        """The grid document (:func:`app.core.sweep.expand_grid`), the fields given."""
        return self.model_dump(exclude_none=True, exclude={"csv"})


class SweepStatus(BaseModel):
    """A sweep's progress: scenarios done (rows written, errors included), failed (rows with
    an error), total; the rate so far and the time left at that rate."""

    id: str = Field(description="the sweep's id (swp- and 32 hex digits)")
    state: SweepState = Field(description="running, done (every scenario has its row) or cancelled")
    total: int = Field(description="scenarios in the sweep (distinct Scenarios)")
    done: int = Field(description="scenarios with a row (their figures or their error)")
    failed: int = Field(description="rows with an error")
    rate_scenarios_s: float | None = Field(
        description="scenarios per second since the sweep was created (null before a row)"
    )
    eta_s: float | None = Field(description="seconds left at that rate (null: unknown or over)")
    created_at_s: float = Field(description="when the sweep was created (Unix time, s)")
    results: str = Field(description="the path of its rows (GET; ?format=csv|json|parquet)")
    executor: Literal["celery", "local"] = Field(
        description="celery: queued to `chunkwise worker`s on the broker; local: the API's "
        "own process pool (no broker configured: kept in memory until the API stops)"
    )
