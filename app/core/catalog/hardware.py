"""What the latency model knows of an accelerator: the :class:`Device` and its interconnect tiers.

Units are in the field names. ``hbm_capacity_gb`` is decimal GB (1e9 bytes): for a built-in
device, the total its runtime reports (nvidia-smi, rocm-smi), converted from MiB or bytes, or its
vendor capacity in GiB where no citable source gives that total (``data/device_memory.csv``
names the source per device). The built-in devices are in :mod:`app.core.catalog.device_table`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from app.core.catalog.quantization import COMPUTE_FALLBACKS, DType
from app.core.errors import InvalidParameterError

BYTES_PER_GIB = 1024**3
BYTES_PER_MIB = 1024**2
BYTES_PER_GB = 1e9
BYTES_PER_TIB = 1024**4
BYTES_PER_TB = 1e12


def from_tib_s(tib_per_s: float) -> float:
    """TiB/s (msmodeling's unit) -> decimal GB/s."""
    return tib_per_s * BYTES_PER_TIB / BYTES_PER_GB


@dataclass(frozen=True, slots=True, kw_only=True)
class InterconnectTier:
    """One level of the interconnect, innermost first.

    ``max_devices`` is how many devices a collective can span while staying inside this tier
    (cumulative: a node of 8 GPUs has ``max_devices=8``). Bandwidth is per device and direction.
    ``switched``: every device reaches every other in one hop through a switch (NVSwitch), so
    small collectives run as one-/two-shot kernels (each rank reads or writes its peers' buffers
    directly) that pay one link latency per phase instead of ``n - 1`` ring steps.
    """

    name: str
    max_devices: int
    bandwidth_gb_s: float
    latency_us: float
    efficiency: float
    switched: bool = False

    def __post_init__(self) -> None:
        require_text("interconnect.name", self.name)
        if isinstance(self.max_devices, bool) or not isinstance(self.max_devices, int):
            raise InvalidParameterError("interconnect.max_devices", self.max_devices, "an integer")
        require_positive("interconnect.max_devices", self.max_devices)
        require_positive("interconnect.bandwidth_gb_s", self.bandwidth_gb_s)
        require_non_negative("interconnect.latency_us", self.latency_us)
        require_fraction("interconnect.efficiency", self.efficiency)
        if not isinstance(self.switched, bool):
            raise InvalidParameterError("interconnect.switched", self.switched, "true or false")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class Device:
    """An accelerator as the latency model sees it (one die for multi-die Ascend A3)."""

    name: str
    vendor: str
    description: str
    peak_bf16_tflops: float
    peak_fp8_tflops: float | None = None
    peak_int8_tops: float | None = None
    peak_fp4_tflops: float | None = None
    hbm_capacity_gb: float
    hbm_bandwidth_gb_s: float
    # Calibrated fractions of peak (per quantization path for GEMMs).
    gemm_efficiency_16bit: float
    gemm_efficiency_8bit: float
    gemm_efficiency_4bit: float
    # GEMM efficiency ramps with the rows a weight is multiplied by: eff * m / (m + this).
    gemm_half_efficiency_tokens: float
    attention_efficiency: float
    memory_efficiency: float
    # Fixed costs: per kernel (eager / captured graph) and per forward (host, sampling, sync).
    kernel_launch_us: float
    graph_kernel_launch_us: float
    forward_overhead_us: float
    interconnect: tuple[InterconnectTier, ...]
    source: str = ""

    def __post_init__(self) -> None:
        for field in ("name", "vendor", "description", "source"):
            require_text(field, getattr(self, field), empty=field != "name")
        require_positive("peak_bf16_tflops", self.peak_bf16_tflops)
        for field in ("peak_fp8_tflops", "peak_int8_tops", "peak_fp4_tflops"):
            value = getattr(self, field)
            if value is not None:
                require_positive(field, value)
        require_positive("hbm_capacity_gb", self.hbm_capacity_gb)
        require_positive("hbm_bandwidth_gb_s", self.hbm_bandwidth_gb_s)
        for field in (
            "gemm_efficiency_16bit",
            "gemm_efficiency_8bit",
            "gemm_efficiency_4bit",
            "attention_efficiency",
            "memory_efficiency",
        ):
            require_fraction(field, getattr(self, field))
        for field in (
            "kernel_launch_us",
            "graph_kernel_launch_us",
            "forward_overhead_us",
            "gemm_half_efficiency_tokens",
        ):
            require_non_negative(field, getattr(self, field))
        if (
            not isinstance(self.interconnect, tuple)
            or not self.interconnect
            or not all(isinstance(tier, InterconnectTier) for tier in self.interconnect)
        ):
            raise InvalidParameterError(
                "interconnect", self.interconnect, "a non-empty list of interconnect tiers"
            )
        sizes = [tier.max_devices for tier in self.interconnect]
        if sizes != sorted(sizes):
            raise InvalidParameterError(
                "interconnect", sizes, "tiers ordered innermost first (max_devices ascending)"
            )

    # -- peaks ---------------------------------------------------------------------------
    def peak_tflops(self, dtype: DType) -> float | None:
        """Dense matrix peak for a compute dtype (None when the device lacks that path)."""
        if dtype is DType.BF16:
            return self.peak_bf16_tflops
        if dtype is DType.FP8:
            return self.peak_fp8_tflops
        if dtype is DType.INT8:
            return self.peak_int8_tops
        if dtype is DType.FP4:
            return self.peak_fp4_tflops
        return None  # no device computes in int4: W4 paths compute in int8 or bf16

    def compute_path(self, requested: DType) -> DType:
        """The dtype the device actually computes ``requested`` in (nearest supported)."""
        if self.peak_tflops(requested) is not None:
            return requested
        for candidate in COMPUTE_FALLBACKS[requested]:
            if self.peak_tflops(candidate) is not None:
                return candidate
        return DType.BF16

    def gemm_efficiency(self, dtype: DType) -> float:
        if dtype is DType.BF16:
            return self.gemm_efficiency_16bit
        if dtype in (DType.FP8, DType.INT8):
            return self.gemm_efficiency_8bit
        return self.gemm_efficiency_4bit

    @property
    def max_devices(self) -> int:
        return self.interconnect[-1].max_devices

    def tier_for(self, group_size: int) -> InterconnectTier:
        """The innermost tier a collective over ``group_size`` devices fits in."""
        for tier in self.interconnect:
            if group_size <= tier.max_devices:
                return tier
        raise InvalidParameterError(
            "num_devices", group_size, f"<= {self.max_devices} for device {self.name}"
        )

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["interconnect"] = [tier.to_dict() for tier in self.interconnect]
        return out


#: Physical floors and ceilings of a device's numbers (custom devices included). Rates and
#: capacities (TFLOPS, GB, GB/s, devices) lie in [MIN_RATE, MAX_RATE] and efficiencies in
#: [MIN_EFFICIENCY, 1], so every product of a rate and an efficiency is at least 1e-6 and no
#: latency (bytes / (GB/s x 1e9 x efficiency), at most ~1e13 bytes a forward) can overflow to
#: infinity or divide by an underflowed zero; fixed costs (µs) lie in [0, MAX_RATE].
MIN_RATE = 1e-3
MAX_RATE = 1e9
MIN_EFFICIENCY = 1e-3
#: Longest name, vendor, description or source string of a device.
MAX_DEVICE_TEXT = 1000


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def require_positive(field: str, value: float) -> None:
    """A rate or capacity: a number in ``[MIN_RATE, MAX_RATE]``."""
    if not _is_number(value) or not MIN_RATE <= value <= MAX_RATE:
        raise InvalidParameterError(field, value, f"a number in [{MIN_RATE:g}, {MAX_RATE:g}]")


def require_non_negative(field: str, value: float) -> None:
    """A fixed cost: a number in ``[0, MAX_RATE]``."""
    if not _is_number(value) or not 0 <= value <= MAX_RATE:
        raise InvalidParameterError(field, value, f"a number in [0, {MAX_RATE:g}]")


def require_fraction(field: str, value: float) -> None:
    """An efficiency: a number in ``[MIN_EFFICIENCY, 1]``."""
    if not _is_number(value) or not MIN_EFFICIENCY <= value <= 1:
        raise InvalidParameterError(field, value, f"a number in [{MIN_EFFICIENCY:g}, 1]")


def require_text(field: str, value: object, *, empty: bool = False) -> None:
    """A name or description: a string of at most ``MAX_DEVICE_TEXT`` characters."""
    if not isinstance(value, str) or len(value) > MAX_DEVICE_TEXT or not (value or empty):
        size = "a" if empty else "a non-empty"
        raise InvalidParameterError(
            field, value, f"{size} string of at most {MAX_DEVICE_TEXT} characters"
        )
