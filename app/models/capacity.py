"""Wire schemas of ``POST /v1/plan``: the replicas and devices a target traffic needs under an
SLA, and what they cost (:mod:`app.core.optimizer.capacity`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_validator

from app.core import limits
from app.core.workload.poisson import DEFAULT_POISSON_REQUESTS, DEFAULT_POISSON_SEED, MAX_SEED
from app.models import texts
from app.models.workload import DeploymentMixin, ParallelSize, WorkloadMixin

#: Default headroom: plan for 1.25 x the target (replicas at most 80 % of their sustainable rate).
DEFAULT_HEADROOM = 1.25
MAX_HEADROOM = 100.0
MAX_PRICE_PER_DEVICE_HOUR = 1e6


class PlanRequest(DeploymentMixin, WorkloadMixin):
    """A replica layout, a target traffic and its SLA."""

    tp_size: ParallelSize = Field(default=1, description=texts.TP_SIZE)
    ep_size: ParallelSize = Field(default=1, description=texts.EP_SIZE)
    dp_size: ParallelSize = Field(
        default=1,
        description="data-parallel ranks of one replica (one load balancer spreads over them)",
    )
    request_rate: float | None = Field(
        default=None,
        gt=0,
        le=limits.MAX_REQUEST_RATE,
        description="target traffic in requests/s (or give output_token_rate)",
    )
    output_token_rate: float | None = Field(
        default=None,
        gt=0,
        le=limits.MAX_REQUEST_RATE * limits.MAX_OUTPUT_LENGTH,
        description="target traffic in output tokens/s (request_rate = this / output_length)",
    )
    ttft_limit_ms: float | None = Field(default=None, gt=0, description="TTFT limit (ms)")
    tpot_limit_ms: float | None = Field(default=None, gt=0, description="TPOT limit (ms)")
    percentile: float | None = Field(
        default=None,
        gt=0,
        lt=100,
        description="the limits hold for this percentile of requests (Poisson arrivals); "
        "omitted: for the means",
    )
    headroom: float = Field(
        default=DEFAULT_HEADROOM,
        ge=1,
        le=MAX_HEADROOM,
        description="a multiplier: plan for headroom x the target (1.25: replicas run at most "
        "80 % of their "
        "sustainable rate)",
    )
    price_per_device_hour: float | None = Field(
        default=None,
        ge=0,
        le=MAX_PRICE_PER_DEVICE_HOUR,
        description="price of one device for one hour (any currency); gives the costs",
    )
    num_requests: int = Field(
        default=DEFAULT_POISSON_REQUESTS,
        strict=True,
        ge=1,
        le=limits.MAX_POISSON_REQUESTS,
        description="requests of each Poisson probe of a replica",
    )
    seed: int = Field(
        default=DEFAULT_POISSON_SEED,
        strict=True,
        ge=0,
        le=MAX_SEED,
        description="seed of the Poisson probes' arrival times (same seed, same result)",
    )

    @model_validator(mode="after")
    def _one_target(self) -> PlanRequest:
        if (self.request_rate is None) == (self.output_token_rate is None):
            raise ValueError("give exactly one of request_rate and output_token_rate")
        if self.ttft_limit_ms is None and self.tpot_limit_ms is None:
            raise ValueError("give ttft_limit_ms, tpot_limit_ms or both")
        return self


class PlanResponse(BaseModel):
    input: PlanRequest = Field(description=texts.REQUEST_ECHO)
    engine: dict[str, Any] = Field(description="the engine profile used and its values")
    parallel: str = Field(description="one replica's layout")
    devices_per_replica: int = Field(description="devices of one replica: tp_size x dp_size")
    target_request_rate: float = Field(description="requests/s, before the headroom")
    sustainable_request_rate: float = Field(
        description="requests/s one replica serves within the SLA (0: none)"
    )
    saturated_request_rate: float = Field(
        description="requests/s one replica completes at its running cap (closed loop)"
    )
    replicas: int = Field(description="replicas needed (0: the SLA cannot be met)")
    devices: int = Field(description="replicas x devices per replica")
    utilisation: float = Field(
        description="fraction of the replicas' sustainable rate the target uses: target / "
        "(replicas x sustainable rate)"
    )
    ttft_ms: float | None = Field(
        description="one replica at its sustainable rate: the SLA's statistic of TTFT, ms"
    )
    tpot_ms: float | None = Field(
        description="one replica at its sustainable rate: the SLA's statistic of TPOT, ms"
    )
    statistic: str = Field(description="mean, or pNN")
    cost_per_hour: float | None = Field(
        description="devices x price_per_device_hour, in its currency per hour"
    )
    cost_per_million_output_tokens: float | None = Field(
        description="cost_per_hour / output tokens per hour of the target x 1e6"
    )
    feasible: bool = Field(description="whether a replica count meets the SLA (replicas > 0)")
    reason: str | None = Field(default=None, description="why the SLA cannot be met")
