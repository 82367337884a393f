"""The physical parameters a calibration may fit, and how a fitted set applies to a device and
an engine profile.

Each parameter is a knob the latency or serving model already has, so a calibrated estimate is
the same mechanism with measured numbers instead of catalog ones:

========================  ===========================================  =======================
parameter                 what it is                                   moves mostly
========================  ===========================================  =======================
memory_efficiency         share of HBM bandwidth weight and KV reads   TPOT (decode streams
                          reach (the device's ``memory_efficiency``)   weights and KV)
gemm_efficiency_scale     multiplier of the device's GEMM efficiencies TTFT (prefill GEMMs
                          (every quantization path; capped so none     are compute-bound)
                          exceeds 1)
request_frontend_ms       per-request time outside the forwards        TTFT of short prompts
                          (HTTP, tokenisation, detokenisation)
step_host_ms              per-iteration host time the accelerator      TPOT at small batches
                          waits for (scheduling, sampling, output)
arrival_spread            share of a closed loop's re-submissions      TTFT across
                          reaching the engine a step late              concurrencies
attention_efficiency      share of peak the attention kernels reach    TTFT of long prompts
========================  ===========================================  =======================

They are listed in the order a fit frees them (:data:`PARAMETERS`): the first two set the two
levels every measurement pins (decode streaming and prefill compute), the next two the fixed
costs that need the measurements to vary (prompt work, batch size), then the arrival spread
(how a wave of clients spreads over steps: it needs the concurrency to vary, and it moves TTFT
in whole requests, so it is chosen from a grid, :attr:`ParameterSpec.grid`), the last the
context length dependence. On the held-out protocol (bench/README.md) the spread before the
attention efficiency gave a calibrated TTFT of 22.1 %, after it 22.4 %. Bounds keep every fit
physical: efficiencies in ``(0, 1]`` (never above the peak), times non-negative and below what
any engine spends.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.core import limits
from app.core.catalog.hardware import Device
from app.core.errors import InvalidParameterError
from app.core.profiles import EngineProfile


@dataclass(frozen=True, slots=True, kw_only=True)
class ParameterSpec:
    """One fittable parameter: its bounds, whether it acts multiplicatively (fitted on a log
    scale) and, for additive ones, the step it is fitted in."""

    name: str
    unit: str
    low: float
    high: float
    log_scale: bool
    #: Additive parameters: the size of one internal unit (the fit's finite-difference step
    #: and prior width are stated in it).
    step: float
    description: str
    #: A parameter whose effect moves in whole requests (no slope to follow) is chosen from
    #: these values, the others fitted at each; empty: fitted continuously.
    grid: tuple[float, ...] = ()


MEMORY_EFFICIENCY = "memory_efficiency"
GEMM_EFFICIENCY_SCALE = "gemm_efficiency_scale"
REQUEST_FRONTEND_MS = "request_frontend_ms"
STEP_HOST_MS = "step_host_ms"
ATTENTION_EFFICIENCY = "attention_efficiency"
ARRIVAL_SPREAD = "arrival_spread"

#: The arrival spread's grid step: 0, 0.125, ... up to its bound (one request in eight).
ARRIVAL_SPREAD_STEP = 0.125

#: The fittable parameters, in the order a fit frees them.
PARAMETERS: tuple[ParameterSpec, ...] = (
    ParameterSpec(
        name=MEMORY_EFFICIENCY,
        unit="",
        low=0.2,
        high=1.0,
        log_scale=True,
        step=1.0,
        description="share of HBM bandwidth the decode's weight and KV reads reach",
    ),
    ParameterSpec(
        name=GEMM_EFFICIENCY_SCALE,
        unit="",
        # 0.2-5 x the catalog's efficiencies, and never an efficiency above 1 (see ``bounds``).
        low=0.2,
        high=5.0,
        log_scale=True,
        step=1.0,
        description="multiplier of the device's GEMM efficiencies (every quantization path)",
    ),
    ParameterSpec(
        name=REQUEST_FRONTEND_MS,
        unit="ms",
        low=0.0,
        high=2000.0,
        log_scale=False,
        step=10.0,
        description="per-request time outside the forwards, added to TTFT",
    ),
    ParameterSpec(
        name=STEP_HOST_MS,
        unit="ms",
        low=0.0,
        high=50.0,
        log_scale=False,
        step=0.5,
        description="per-iteration host time the accelerator waits for",
    ),
    ParameterSpec(
        name=ARRIVAL_SPREAD,
        unit="",
        low=0.0,
        high=limits.MAX_ARRIVAL_SPREAD,
        log_scale=False,
        step=ARRIVAL_SPREAD_STEP,
        description="share of a closed loop's re-submissions that reach the engine a step late",
        grid=tuple(
            k * ARRIVAL_SPREAD_STEP
            for k in range(round(limits.MAX_ARRIVAL_SPREAD / ARRIVAL_SPREAD_STEP) + 1)
        ),
    ),
    ParameterSpec(
        name=ATTENTION_EFFICIENCY,
        unit="",
        low=0.05,
        high=1.0,
        log_scale=True,
        step=1.0,
        description="share of peak the attention kernels reach",
    ),
)
PARAMETER_NAMES: tuple[str, ...] = tuple(p.name for p in PARAMETERS)
SPECS: Mapping[str, ParameterSpec] = {p.name: p for p in PARAMETERS}


def _max_gemm_efficiency(device: Device) -> float:
    return max(
        device.gemm_efficiency_16bit, device.gemm_efficiency_8bit, device.gemm_efficiency_4bit
    )


def defaults(device: Device, profile: EngineProfile) -> dict[str, float]:
    """Every parameter's value as the catalog device and the engine profile set it."""
    return {
        MEMORY_EFFICIENCY: device.memory_efficiency,
        GEMM_EFFICIENCY_SCALE: 1.0,
        REQUEST_FRONTEND_MS: profile.request_frontend_ms,
        STEP_HOST_MS: exposed_step_host_ms(profile),
        ATTENTION_EFFICIENCY: device.attention_efficiency,
        ARRIVAL_SPREAD: profile.arrival_spread,
    }


#: How far below the catalog value a fitted efficiency may go (a kernel 4x slower than the
#: catalog's calibrated one is a bug to report, not a parameter).
MAX_EFFICIENCY_DROP = 4.0


def bounds(name: str, device: Device) -> tuple[float, float]:
    """A parameter's bounds on ``device``: efficiencies between a quarter of the catalog's and
    1 (the GEMM scale stops where an efficiency hits 1)."""
    spec = SPECS[name]
    if name == GEMM_EFFICIENCY_SCALE:
        high = min(spec.high, 1.0 / _max_gemm_efficiency(device))
        return max(spec.low, 1.0 / MAX_EFFICIENCY_DROP), high
    if name in (MEMORY_EFFICIENCY, ATTENTION_EFFICIENCY):
        catalog = getattr(device, name)
        return max(spec.low, min(catalog, spec.high) / MAX_EFFICIENCY_DROP), spec.high
    return spec.low, spec.high


def exposed_step_host_ms(profile: EngineProfile) -> float:
    """The host time of one iteration the accelerator waits for under ``profile``: the sync
    it always waits for, and the iteration's own host work unless overlap scheduling hides it."""
    hidden = profile.overlap_scheduling
    return profile.step_sync_ms + (0.0 if hidden else profile.step_host_ms)


def check_values(values: Mapping[str, float], field: str = "parameters") -> dict[str, float]:
    """Known names with finite values inside their static bounds (domain errors otherwise)."""
    out: dict[str, float] = {}
    for name, value in values.items():
        spec = SPECS.get(name)
        if spec is None:
            raise InvalidParameterError(f"{field}.{name}", name, f"one of {', '.join(SPECS)}")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidParameterError(f"{field}.{name}", value, "a number")
        if not spec.low <= value <= spec.high:  # NaN fails both comparisons
            raise InvalidParameterError(
                f"{field}.{name}", value, f"a number in [{spec.low:g}, {spec.high:g}]"
            )
        out[name] = float(value)
    return out


def apply_to_device(device: Device, values: Mapping[str, float]) -> Device:
    """``device`` with the fitted efficiencies (parameters not in ``values`` keep the catalog's)."""
    changes: dict[str, Any] = {}
    if MEMORY_EFFICIENCY in values:
        changes["memory_efficiency"] = values[MEMORY_EFFICIENCY]
    if ATTENTION_EFFICIENCY in values:
        changes["attention_efficiency"] = values[ATTENTION_EFFICIENCY]
    if GEMM_EFFICIENCY_SCALE in values:
        scale = min(values[GEMM_EFFICIENCY_SCALE], bounds(GEMM_EFFICIENCY_SCALE, device)[1])
        for field in ("gemm_efficiency_16bit", "gemm_efficiency_8bit", "gemm_efficiency_4bit"):
            changes[field] = min(1.0, getattr(device, field) * scale)
    return dataclasses.replace(device, **changes) if changes else device


def apply_to_profile(profile: EngineProfile, values: Mapping[str, float]) -> EngineProfile:
    """``profile`` with the fitted host and front-end times and arrival spread. A fitted
    ``step_host_ms`` is the exposed time: it becomes the always-waited sync, and an unhidden
    host share is folded in."""
    changes: dict[str, object] = {}
    if REQUEST_FRONTEND_MS in values:
        changes["request_frontend_ms"] = values[REQUEST_FRONTEND_MS]
    if ARRIVAL_SPREAD in values:
        changes["arrival_spread"] = values[ARRIVAL_SPREAD]
    if STEP_HOST_MS in values:
        changes["step_sync_ms"] = values[STEP_HOST_MS]
        if not profile.overlap_scheduling:
            changes["step_host_ms"] = 0.0
    return dataclasses.replace(profile, **changes) if changes else profile  # type: ignore[arg-type]
