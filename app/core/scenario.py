"""The resolved question: a :class:`Scenario` holds everything an evaluation needs, as core
values, resolved once at the service boundary (``app/services/scenario.py``).

A request names things (a model id, a device name, an engine, "the profile's default"); a
Scenario holds what they resolved to: the model architecture, the device(s), the quantization
the engine runs, the engine profile with its overrides, defaults and calibration applied, the
workload spec (lengths, token budget, limits), the step scheduler with every option, the
layout (simulate) or the search space (optimize), and the serving run's parameters. Nothing
below the resolver reads the request again.

A Scenario is frozen and hashable, and :meth:`Scenario.to_dict` is plain JSON (dataclasses as
objects, enums as their values, sets sorted); :attr:`Scenario.key` is the SHA-256 of its
canonical JSON (sorted keys, no spaces), stable across processes and runs: two requests that
resolve to the same question share a key (``"engine": null`` and ``"engine": "vllm"`` do).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from app.core.calibration import CalibrationProfile
from app.core.catalog import Device, ModelArchitecture, Quantization
from app.core.errors import InvalidParameterError
from app.core.limits import Mode
from app.core.optimizer import Deployment
from app.core.optimizer.capacity import Sla
from app.core.parallel import ParallelLayout
from app.core.profiles import MSMODELING, EngineProfile
from app.core.runner import ModelRunner, RunnerServingModel
from app.core.runner.serving import engine_runner
from app.core.scheduler import Scheduler, make_scheduler, scheduler_options
from app.core.spec import WorkloadSpec
from app.core.workload import Window, Workload

JSONValue = None | bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"]
Operation = Literal["simulate", "optimize", "plan"]


def canonical(value: object) -> JSONValue:
    """``value`` as plain JSON: a dataclass as an object of its fields, an enum as its value,
    a tuple or list as a list, a set sorted, a mapping with string keys."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return canonical(value.value)
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, frozenset | set):
        return sorted((canonical(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"{type(value).__name__} is not a scenario value")


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedDeployment:
    """The catalog objects a request names, and the knobs that change a forward's cost."""

    model: ModelArchitecture
    device: Device
    quantization: Quantization
    reserved_memory_gb: float | None
    num_mtp_tokens: int
    mtp_acceptance_rates: tuple[float, ...]
    profile: EngineProfile = MSMODELING
    #: The calibration whose fitted values ``device`` and ``profile`` carry (none: catalog's).
    calibration: CalibrationProfile | None = None

    @property
    def label(self) -> Deployment:
        return Deployment(
            model=self.model.name, device=self.device.name, quantization=self.quantization.label
        )

    def runner(self, layout: ParallelLayout) -> ModelRunner:
        """The layout's runner as the profile's engine runs it (reserve, graph limit)."""
        return engine_runner(
            self.profile,
            self.model,
            self.device,
            layout,
            self.quantization,
            reserved_memory_gb=self.reserved_memory_gb,
            num_mtp_tokens=self.num_mtp_tokens,
        )

    def running_cap(self) -> int | None:
        """The engine profile's running cap on the device (``None``: only the KV pool)."""
        return self.profile.running_cap(self.device.hbm_capacity_gb, self.device.name)


def build_serving_model(
    deployment: ResolvedDeployment, layout: ParallelLayout
) -> RunnerServingModel:
    """The runner's serving adapter (MTP folded into decode latency) for one layout."""
    return RunnerServingModel(
        deployment.runner(layout),
        num_mtp_tokens=deployment.num_mtp_tokens,
        mtp_acceptance_rates=deployment.mtp_acceptance_rates,
        profile=deployment.profile,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerChoice:
    """A step policy by name with every option it runs with (defaults applied)."""

    name: str
    options: tuple[tuple[str, str | int | float | None], ...]

    @classmethod
    def of(cls, scheduler: Scheduler) -> SchedulerChoice:
        described = scheduler_options(scheduler)
        return cls(
            name=scheduler.name,
            options=tuple(
                (k, v)  # type: ignore[misc]  # describe() holds str / int / float / None
                for k, v in described.items()
                if k != "name"
            ),
        )

    def build(self) -> Scheduler:
        return make_scheduler(self.name, **dict(self.options))  # type: ignore[arg-type]

    def as_options(self) -> dict[str, object]:
        """The wire's scheduler options (``name`` and the policy's own options)."""
        return {"name": self.name, **dict(self.options)}


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingRun:
    """How the requests arrive and what is measured: a burst of ``concurrency`` requests, a
    closed loop of ``concurrency`` clients sending ``requests_per_client`` each, or Poisson
    arrivals at ``request_rate`` (``num_requests`` of them, at most ``max_concurrency`` in
    flight); totals over the replicas."""

    workload: Workload
    window: Window
    concurrency: int | None = None
    requests_per_client: int = 1
    request_rate: float | None = None
    num_requests: int | None = None
    max_concurrency: int | None = None
    seed: int = 0
    include_timeline: bool = False
    force_simulation: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchSpace:
    """What an aggregated-family optimize searches: the devices of the searched instance, the
    layout sizes, the batch cap, and what the answer keeps (``top_k`` rows, probes or not)."""

    mode: Mode
    num_devices: int
    tp_sizes: tuple[int, ...] | None
    ep_sizes: tuple[int, ...] | None
    max_batch_size: int
    prefill_devices_per_instance: int | None = None
    decode_devices_per_instance: int | None = None
    serving_overhead_ms: float = 0.0
    top_k: int = 10
    include_probes: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class DisaggSearchSpace:
    """What a disaggregated optimize searches: worker layouts of each pool within
    ``num_devices``, at most ``max_workers`` workers per pool and ``max_clients`` closed-loop
    clients, and what the answer keeps."""

    num_devices: int
    prefill_layouts: tuple[ParallelLayout, ...]
    decode_layouts: tuple[ParallelLayout, ...]
    max_workers: int
    max_clients: int
    top_k: int = 10
    include_probes: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolLink:
    """A stated link between the pools: bandwidth per device and a fixed time per transfer."""

    name: str
    bandwidth_gb_s: float
    fixed_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class DisaggPools:
    """A disaggregated deployment: ``prefill_workers`` workers of ``prefill_layout`` and
    ``decode_workers`` of ``decode_layout``; the decode pool on ``decode_deployment`` when it
    runs on another device (``None``: the scenario's), the KV crossing ``link`` (``None``:
    the interconnect tier holding both pools)."""

    prefill_workers: int
    prefill_layout: ParallelLayout
    decode_workers: int
    decode_layout: ParallelLayout
    decode_deployment: ResolvedDeployment | None = None
    link: PoolLink | None = None

    @property
    def num_devices(self) -> int:
        return (
            self.prefill_workers * self.prefill_layout.num_devices
            + self.decode_workers * self.decode_layout.num_devices
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityTarget:
    """What a capacity plan sizes replicas for: ``request_rate`` requests/s (before the
    headroom) under ``sla``, with ``headroom`` spare and an optional device price."""

    request_rate: float
    sla: Sla
    headroom: float
    price_per_device_hour: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """One resolved question (see the module docstring): a simulation of ``layout`` (one
    layout, or two disaggregated pools) or a search over ``search`` (aggregated family or
    disaggregated), of ``deployment`` under ``spec`` and ``serving``, stepped by ``scheduler``
    (``None``: the mode runs no step scheduler); a capacity plan sizes replicas of ``layout``
    for ``target``."""

    operation: Operation
    deployment: ResolvedDeployment
    spec: WorkloadSpec
    serving: ServingRun
    scheduler: SchedulerChoice | None
    layout: ParallelLayout | DisaggPools | None = None
    search: SearchSpace | DisaggSearchSpace | None = None
    target: CapacityTarget | None = None

    def __post_init__(self) -> None:
        if (self.layout is None) == (self.search is None):
            raise InvalidParameterError(
                "scenario", self.operation, "a layout (simulate, plan) or a search space (optimize)"
            )
        if (self.target is None) == (self.operation == "plan"):
            raise InvalidParameterError(
                "scenario", self.operation, "a capacity target exactly when it is a plan"
            )

    def to_dict(self) -> dict[str, JSONValue]:
        out = canonical(self)
        assert isinstance(out, dict)
        return out

    @property
    def key(self) -> str:
        """``scenario:`` and the SHA-256 of the canonical JSON."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False)
        return "scenario:" + hashlib.sha256(text.encode()).hexdigest()
