"""The built-in accelerator profiles (a data table): peaks, HBM, calibrated efficiencies,
launch costs and interconnect tiers per device.

Numbers come from ``data/hardware_specs.csv`` (vendor datasheets, AIConfigurator system files)
and, for Ascend, from msmodeling's ``tensor_cast/device.py`` profiles (same names). Efficiency
factors and launch costs are calibrated once per device (and per quantization path: 16-bit,
8-bit, 4-bit GEMMs) against ``data/published_points.csv``; never per model or per case. See
``bench/README.md`` for the calibration figures.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from app.core.catalog.hardware import (
    BYTES_PER_GB,
    BYTES_PER_GIB,
    BYTES_PER_MIB,
    Device,
    InterconnectTier,
    from_tib_s,
)

# -- interconnect presets ----------------------------------------------------------------------
_NODE = 8
_NVLINK_EFF = 0.8
_IB_EFF = 0.7
_PCIE_EFF = 0.7
_ASCEND_EFF = 0.7  # msmodeling's link efficiency for every Ascend tier
_IB_NDR_GB_S = 50.0  # 400 Gb/s NIC per GPU
_IB_HDR_GB_S = 25.0  # 200 Gb/s NIC per GPU
_IB_XDR_GB_S = 100.0  # 800 Gb/s NIC per GPU (ConnectX-8 on HGX B300 and GB300 racks)
_NVL72 = 72  # GPUs in one NVLink domain of a GB200 / GB300 NVL72 rack
_IB_LATENCY_US = 5.0
_NVLINK_LATENCY_US = 2.0
_PCIE_LATENCY_US = 5.0
_MAX_CLUSTER = 1024


def _nvlink_node(nvlink_gb_s: float, nic_gb_s: float) -> tuple[InterconnectTier, ...]:
    return (
        InterconnectTier(
            name="nvlink",
            max_devices=_NODE,
            bandwidth_gb_s=nvlink_gb_s,
            latency_us=_NVLINK_LATENCY_US,
            efficiency=_NVLINK_EFF,
            switched=True,
        ),
        InterconnectTier(
            name="infiniband",
            max_devices=_MAX_CLUSTER,
            bandwidth_gb_s=nic_gb_s,
            latency_us=_IB_LATENCY_US,
            efficiency=_IB_EFF,
        ),
    )


def _nvl72_rack(nic_gb_s: float) -> tuple[InterconnectTier, ...]:
    """A 72-GPU NVLink5 domain (NVL72 rack, 900 GB/s per GPU and direction), then the NICs."""
    return (
        InterconnectTier(
            name="nvlink_nvl72",
            max_devices=_NVL72,
            bandwidth_gb_s=900.0,
            latency_us=_NVLINK_LATENCY_US,
            efficiency=_NVLINK_EFF,
            switched=True,
        ),
        InterconnectTier(
            name="infiniband",
            max_devices=_MAX_CLUSTER * _NODE,
            bandwidth_gb_s=nic_gb_s,
            latency_us=_IB_LATENCY_US,
            efficiency=_IB_EFF,
        ),
    )


def _pcie_node(pcie_gb_s: float, nic_gb_s: float) -> tuple[InterconnectTier, ...]:
    return (
        InterconnectTier(
            name="pcie",
            max_devices=_NODE,
            bandwidth_gb_s=pcie_gb_s,
            latency_us=_PCIE_LATENCY_US,
            efficiency=_PCIE_EFF,
        ),
        InterconnectTier(
            name="ethernet",
            max_devices=_MAX_CLUSTER,
            bandwidth_gb_s=nic_gb_s,
            latency_us=_IB_LATENCY_US,
            efficiency=_IB_EFF,
        ),
    )


def _tier(
    name: str, max_devices: int, gb_s: float, latency_us: float, eff: float = _ASCEND_EFF
) -> InterconnectTier:
    return InterconnectTier(
        name=name,
        max_devices=max_devices,
        bandwidth_gb_s=gb_s,
        latency_us=latency_us,
        efficiency=eff,
    )


_A2_TIERS = (_tier("hccs", _NODE, 196.0, 0.5), _tier("roce", 1024, 25.0, 1.5))
_A2_PCIE_TIERS = (_tier("pcie", _NODE, 64.0, 0.2),)
_A3_TIERS = (
    _tier("sio", 2, 224.0, 0.2),
    _tier("hccs_1level", 16, 196.0, 0.5),
    _tier("hccs_2level", 768, 196.0, 5.5),
)
_A5_TIERS = (
    _tier("ub", 4, 159.0, 1.5, 0.85),
    _tier("pcie_inner", 8, 32.0, 3.0, 0.56),
    _tier("pcie_outer", 16, 24.0, 4.5, 0.525),
)
_TEST_TIERS = (_tier("full_mesh", _NODE, 196.0, 1.3), _tier("clos", 2048, 50.0, 10.0))

# -- efficiency presets --------------------------------------------------------------------------
# Ascend: msmodeling's efficiencies (compute 0.7, memory 0.6; its code marks them "need to
# calibrate") and no small-M GEMM ramp, for parity. The fixed cost per kernel is fitted on
# msmodeling's two decode fidelity baselines (data/msmodeling_forward_cases.csv): 12 µs, eager
# and graph alike (msmodeling charges 5 µs per op but models about twice as many ops per layer).
_ASCEND_KERNEL_US = 12.0
_ASCEND = {
    "gemm_efficiency_16bit": 0.7,
    "gemm_efficiency_8bit": 0.7,
    "gemm_efficiency_4bit": 0.7,
    "gemm_half_efficiency_tokens": 0.0,
    "attention_efficiency": 0.7,
    "memory_efficiency": 0.6,
    "kernel_launch_us": _ASCEND_KERNEL_US,
    "graph_kernel_launch_us": _ASCEND_KERNEL_US,
    "forward_overhead_us": 0.0,
}
_ASCEND_A5 = {
    **_ASCEND,
    "gemm_efficiency_16bit": 0.9,
    "gemm_efficiency_8bit": 0.9,
    "gemm_efficiency_4bit": 0.9,
    "attention_efficiency": 0.9,
    "memory_efficiency": 0.8,
}

# NVIDIA: fitted jointly on data/published_points.csv (ttft_bs1, TensorRT-LLM 0.9, 48 points;
# bench/README.md). Shared by every NVIDIA device (software-stack properties): the fixed cost
# per kernel, no extra per-forward cost at batch 1, and the small-M GEMM ramp. Per architecture:
# the GEMM efficiency of the measured path (FP8 on Hopper/Ada, FP16 on Ampere) and the HBM
# efficiency. Paths without data (Hopper 16-bit, every 4-bit path) are uncalibrated guesses.
# The fixed cost of a kernel inside a captured CUDA graph (decode only; ttft_bs1 is eager) is
# fitted on the serving TPOT rows (measured_agg_serving_cases.csv, 758 decode-dominated
# means, jointly with TensorRT-LLM's per-iteration host cost): 3 µs = graph-node launch plus
# the SM ramp-up / tail a tiny decode kernel cannot hide (best TPOT median APE over the step
# overhead: 2 / 3 / 4 µs -> 9.3 / 8.8 / 10.5 %; 2 µs leaves the DeepSeek-R1 EP1 group, ~20
# kernels per layer, above 25 %). bench/README.md has the grid.
_NVIDIA_STACK = {
    "kernel_launch_us": 10.0,
    "graph_kernel_launch_us": 3.0,
    "forward_overhead_us": 0.0,
    "gemm_half_efficiency_tokens": 120.0,
    "attention_efficiency": 0.5,
    "gemm_efficiency_4bit": 0.5,
}
_HOPPER = {
    **_NVIDIA_STACK,
    "gemm_efficiency_8bit": 0.61,  # fitted (H100 + H200 FP8)
    "gemm_efficiency_16bit": 0.7,  # uncalibrated
    "memory_efficiency": 0.83,  # fitted
}
_ADA = {
    **_NVIDIA_STACK,
    "gemm_efficiency_8bit": 0.67,  # fitted (L40S FP8)
    "gemm_efficiency_16bit": 0.7,  # uncalibrated
    "memory_efficiency": 0.81,  # fitted
}
_AMPERE = {
    **_NVIDIA_STACK,
    "gemm_efficiency_16bit": 0.75,  # fitted (A100 FP16)
    "gemm_efficiency_8bit": 0.65,  # uncalibrated (INT8 path)
    "memory_efficiency": 0.9,  # fitted value 0.95 capped at a plausible streaming efficiency
}
# Blackwell: Hopper's HBM efficiency; the GEMM efficiencies fitted on the B200 serving rows
# whose TTFT is prefill-dominated (measured_agg_serving_cases.csv, Llama-3.1-70B, 8192-token
# prompts, 24 FP8 + 24 NVFP4 rows; median APE 17.9 / 17.5 % with Hopper's factors): FP8
# 0.45 / 0.5 / 0.55 -> 12.0 / 9.3 / 13.4 %, NVFP4 0.35 / 0.4 / 0.45 -> 9.3 / 10.2 / 12.7 %.
# 0.5 / 0.4 taken (also the better TPOT: 4.5 / 9.2 % vs 5.9 / 12.0 %). Early Blackwell kernels
# reach a smaller share of the doubled peak than Hopper's 0.61.
_BLACKWELL = {**_HOPPER, "gemm_efficiency_8bit": 0.5, "gemm_efficiency_4bit": 0.4}
# Intel Xe2 (Arc Pro B60): uncalibrated GEMM guesses (Xe2 XMX kernels assumed as far from peak as
# the ROCm ones); HBM efficiency 0.5 from aiconfigurator-core 0.12.0 systems/b60.yaml
# (mem_bw_empirical_scaling_factor 0.5: its standalone kernel bench reached ~220 GB/s of the
# 456 GB/s spec on memory-bound ops).
_XE2 = {
    **_NVIDIA_STACK,
    "gemm_efficiency_16bit": 0.5,
    "gemm_efficiency_8bit": 0.45,
    "memory_efficiency": 0.5,
}
# AMD: uncalibrated, ROCm kernels assumed less efficient than the NVIDIA stack.
_CDNA3 = {
    **_NVIDIA_STACK,
    "gemm_efficiency_16bit": 0.5,
    "gemm_efficiency_8bit": 0.45,
    "memory_efficiency": 0.7,
}

_HW_SPECS = "data/hardware_specs.csv"
#: One memory rule for every device (README, "Units"): the total its runtime reports
#: (nvidia-smi's memory.total, rocm-smi's VRAM total), read from this file with its source per
#: device; a device whose runtime total no citable source gives has its vendor capacity in GiB
#: (``reported_by`` says which).
_DEVICE_MEMORY = Path(__file__).resolve().parent / "data" / "device_memory.csv"
_MEMORY_UNIT_BYTES = {"GiB": BYTES_PER_GIB, "MiB": BYTES_PER_MIB, "B": 1}


def _memory_rows() -> dict[str, dict[str, str]]:
    with _DEVICE_MEMORY.open(newline="", encoding="utf-8") as handle:
        return {row["device"]: row for row in csv.DictReader(handle)}


_MEMORY = _memory_rows()


def _memory_gb(name: str) -> float:
    """The device's memory total from ``data/device_memory.csv``, in decimal GB."""
    row = _MEMORY[name]
    return float(row["total"]) * _MEMORY_UNIT_BYTES[row["unit"]] / BYTES_PER_GB


#: Streaming multiprocessors per device, with the public spec each comes from: the SMs a GEMM's
#: output tiles are spread over (the fitted GEMM curves' wave term, app/core/runner/kernel_fit.py).
_DEVICE_SM_COUNTS = Path(__file__).resolve().parent / "data" / "device_sm_counts.csv"


def _sm_count_rows() -> dict[str, int]:
    with _DEVICE_SM_COUNTS.open(newline="", encoding="utf-8") as handle:
        return {row["device"]: int(row["sm_count"]) for row in csv.DictReader(handle)}


_SM_COUNTS = _sm_count_rows()


def sm_count(name: str) -> int | None:
    """The streaming multiprocessors of the built-in device ``name``
    (``data/device_sm_counts.csv``; None: the file has no count for it)."""
    return _SM_COUNTS.get(name)


_AIC_PCIE_NIC_GB_S = 25.0  # aiconfigurator-core 0.12.0 PCIe SKUs: 1:1 200 Gb/s fabric per GPU
_MSMODELING = "msmodeling tensor_cast/device.py (HEAD 84fec85)"

#: The Ascend 910B (Atlas A2) and 910C (Atlas A3, one die each) devices: the Da Vinci generation
#: on which vLLM-Ascend (its ``vllm_ascend/ops/triton/fla`` kernels, v0.11.2 to v0.19 at least)
#: and SGLang's NPU kernels (sgl-kernel-npu) run Gated DeltaNet's chunked prefill as the Triton
#: port of FLA's ``chunk_gated_delta_rule`` (six kernels, chunk 64). huawei-csl/megagdn-pto
#: measured those kernels on a 910B2 and states that the 910C runs the same kernel code
#: (``blog/mega_gdn_en.md``); the runner prices them with
#: :data:`NPU_TRITON_GDN_CHUNK_EFFICIENCY`. The 950 (A5) is not in it:
#: no measurement of these kernels on it was read.
TRITON_GDN_DEVICES: frozenset[str] = frozenset(
    {
        "ATLAS_800_A2_376T_64G",
        "ATLAS_800_A2_313T_64G",
        "ATLAS_800_A2_280T_64G",
        "ATLAS_800_A2_280T_64G_PCIE",
        "ATLAS_800_A2_280T_32G_PCIE",
        "ATLAS_800_A3_752T_128G_DIE",
        "ATLAS_800_A3_560T_128G_DIE",
    }
)
#: Share of the chunked delta rule's roofline (the device's attention rate and HBM bandwidth,
#: :func:`gdn_delta_rule_terms`) that the Triton port of FLA's ``chunk_gated_delta_rule`` reaches
#: on the 910B / 910C (:data:`TRITON_GDN_DEVICES`), from
#: huawei-csl/megagdn-pto ``outputs/data/kernel_bench_L8192.json`` (one 910B2, vLLM-Ascend's
#: Triton kernels at chunk 64, 16 sequences of 8,192 tokens, 16 key heads of 128): with 16 value
#: heads, the only width at which all six Triton stages ran, the stages take 1.03 (cumsum) +
#: 2.23 (kkt) + 12.18 (solve_tril) + 11.86 (wy_fast) + 15.60 (chunk_h) + 8.48 (chunk_o) =
#: 51.38 ms against the runner's 7.15 ms on ``ATLAS_800_A2_376T_64G`` (memory-bound): 0.139.
#: Checks (not fitted): 32 and 48 value heads, whose Triton ``solve_tril`` fails at that size
#: (taken at the 16-head time times the PTO kernel's own 32 / 48-head ratio, 2.14 / 3.22),
#: read 101 and 150 ms against 13.3 and 19.4 ms: 0.132 and 0.129.
NPU_TRITON_GDN_CHUNK_EFFICIENCY = 0.14


def _device(**kwargs: Any) -> Device:
    return Device(**kwargs)


BUILTIN_DEVICES: tuple[Device, ...] = (
    _device(
        name="TEST_DEVICE",
        vendor="test",
        description="msmodeling's generic test device (A2-class numbers)",
        peak_bf16_tflops=353.9,
        peak_fp8_tflops=707.8,
        peak_int8_tops=707.8,
        peak_fp4_tflops=1415.6,
        hbm_capacity_gb=_memory_gb("TEST_DEVICE"),
        hbm_bandwidth_gb_s=from_tib_s(1.6),
        interconnect=_TEST_TIERS,
        source=_MSMODELING,
        **_ASCEND,
    ),
    _device(
        name="ATLAS_800_A2_376T_64G",
        vendor="huawei",
        description="Atlas 800 A2, Ascend 910B2 (376T fp16), 64 GiB",
        peak_bf16_tflops=353.9,
        peak_int8_tops=752.0,
        hbm_capacity_gb=_memory_gb("ATLAS_800_A2_376T_64G"),
        hbm_bandwidth_gb_s=from_tib_s(1.6),
        interconnect=_A2_TIERS,
        source=_MSMODELING,
        **_ASCEND,
    ),
    _device(
        name="ATLAS_800_A2_313T_64G",
        vendor="huawei",
        description="Atlas 800 A2, Ascend 910B3 (313T fp16), 64 GiB",
        peak_bf16_tflops=294.9,
        peak_int8_tops=626.0,
        hbm_capacity_gb=_memory_gb("ATLAS_800_A2_313T_64G"),
        hbm_bandwidth_gb_s=from_tib_s(1.6),
        interconnect=_A2_TIERS,
        source=_MSMODELING,
        **_ASCEND,
    ),
    _device(
        name="ATLAS_800_A2_280T_64G",
        vendor="huawei",
        description="Atlas 800 A2, Ascend 910B4-class (280T fp16), 64 GiB",
        peak_bf16_tflops=245.8,
        peak_int8_tops=560.0,
        hbm_capacity_gb=_memory_gb("ATLAS_800_A2_280T_64G"),
        hbm_bandwidth_gb_s=from_tib_s(1.6),
        interconnect=_A2_TIERS,
        source=_MSMODELING,
        **_ASCEND,
    ),
    _device(
        name="ATLAS_800_A2_280T_64G_PCIE",
        vendor="huawei",
        description="Atlas 800I A2 PCIe card (280T fp16), 64 GiB",
        peak_bf16_tflops=245.8,
        peak_int8_tops=560.0,
        hbm_capacity_gb=_memory_gb("ATLAS_800_A2_280T_64G_PCIE"),
        hbm_bandwidth_gb_s=from_tib_s(1.6),
        interconnect=_A2_PCIE_TIERS,
        source=_MSMODELING,
        **_ASCEND,
    ),
    _device(
        name="ATLAS_800_A2_280T_32G_PCIE",
        vendor="huawei",
        description="Atlas 300I A2 PCIe card, Ascend 910B4 (280T fp16), 32 GiB",
        peak_bf16_tflops=245.8,
        peak_int8_tops=560.0,
        hbm_capacity_gb=_memory_gb("ATLAS_800_A2_280T_32G_PCIE"),
        hbm_bandwidth_gb_s=from_tib_s(0.8),
        interconnect=_A2_PCIE_TIERS,
        source=_MSMODELING,
        **_ASCEND,
    ),
    _device(
        name="ATLAS_800_A3_752T_128G_DIE",
        vendor="huawei",
        description="Atlas 800 A3 (Ascend 910C), one die of two: 376T fp16, 64 GiB",
        peak_bf16_tflops=353.9,
        peak_int8_tops=752.0,
        hbm_capacity_gb=_memory_gb("ATLAS_800_A3_752T_128G_DIE"),
        hbm_bandwidth_gb_s=from_tib_s(1.6),
        interconnect=_A3_TIERS,
        source=_MSMODELING,
        **_ASCEND,
    ),
    _device(
        name="ATLAS_800_A3_560T_128G_DIE",
        vendor="huawei",
        description="Atlas 800 A3 (560T SKU), one die of two: 280T fp16, 64 GiB",
        peak_bf16_tflops=245.8,
        peak_int8_tops=560.0,
        hbm_capacity_gb=_memory_gb("ATLAS_800_A3_560T_128G_DIE"),
        hbm_bandwidth_gb_s=from_tib_s(1.6),
        interconnect=_A3_TIERS,
        source=_MSMODELING,
        **_ASCEND,
    ),
    _device(
        name="ATLAS_350_425T_112G",
        vendor="huawei",
        description="Atlas 350 (Ascend A5), 112 GiB",
        peak_bf16_tflops=378.0,
        peak_fp8_tflops=756.0,
        peak_int8_tops=756.0,
        peak_fp4_tflops=1512.0,
        hbm_capacity_gb=_memory_gb("ATLAS_350_425T_112G"),
        hbm_bandwidth_gb_s=from_tib_s(1.4),
        interconnect=_A5_TIERS,
        source=_MSMODELING,
        **_ASCEND_A5,
    ),
    _device(
        name="NVIDIA_A100_SXM_80G",
        vendor="nvidia",
        description="A100 SXM4 80GB (Ampere, no FP8)",
        peak_bf16_tflops=312.0,
        peak_int8_tops=624.0,
        hbm_capacity_gb=_memory_gb("NVIDIA_A100_SXM_80G"),
        hbm_bandwidth_gb_s=2039.0,
        interconnect=_nvlink_node(300.0, _IB_HDR_GB_S),
        source=_HW_SPECS,
        **_AMPERE,
    ),
    # PCIe SKUs without NVLink (aiconfigurator-core 0.12.0 systems/*.yaml and the datasheets
    # cited in data/hardware_specs.csv); GEMM and HBM efficiencies are their architecture's.
    _device(
        name="NVIDIA_A100_PCIE_80G",
        vendor="nvidia",
        description="A100 PCIe 80GB (Ampere, no FP8, PCIe Gen4, no NVLink)",
        peak_bf16_tflops=312.0,
        peak_int8_tops=624.0,
        hbm_capacity_gb=_memory_gb("NVIDIA_A100_PCIE_80G"),
        hbm_bandwidth_gb_s=1935.0,
        interconnect=_pcie_node(32.0, _AIC_PCIE_NIC_GB_S),
        source=_HW_SPECS,
        **_AMPERE,
    ),
    _device(
        name="NVIDIA_A30_24G",
        vendor="nvidia",
        description="A30 24GB (Ampere, no FP8, HBM2, PCIe Gen4, no NVLink bridge)",
        peak_bf16_tflops=165.0,
        peak_int8_tops=330.0,
        hbm_capacity_gb=_memory_gb("NVIDIA_A30_24G"),
        hbm_bandwidth_gb_s=933.0,
        interconnect=_pcie_node(32.0, _AIC_PCIE_NIC_GB_S),
        source=_HW_SPECS,
        **_AMPERE,
    ),
    _device(
        name="NVIDIA_H100_SXM_80G",
        vendor="nvidia",
        description="H100 SXM5 80GB (Hopper)",
        peak_bf16_tflops=989.0,
        peak_fp8_tflops=1979.0,
        peak_int8_tops=1979.0,
        hbm_capacity_gb=_memory_gb("NVIDIA_H100_SXM_80G"),
        hbm_bandwidth_gb_s=3350.0,
        interconnect=_nvlink_node(450.0, _IB_NDR_GB_S),
        source=_HW_SPECS,
        **_HOPPER,
    ),
    _device(
        name="NVIDIA_H200_SXM_141G",
        vendor="nvidia",
        description="H200 SXM 141GB (Hopper, HBM3e)",
        peak_bf16_tflops=989.0,
        peak_fp8_tflops=1979.0,
        peak_int8_tops=1979.0,
        # "141 GB" is GiB-class like the other SKUs: nvidia-smi reports 143771 MiB (150.8 GB);
        # it was stored as 141 decimal GB, 9.8 GB short, which starved the KV pool.
        hbm_capacity_gb=_memory_gb("NVIDIA_H200_SXM_141G"),
        hbm_bandwidth_gb_s=4800.0,
        interconnect=_nvlink_node(450.0, _IB_NDR_GB_S),
        source=_HW_SPECS,
        **_HOPPER,
    ),
    _device(
        name="NVIDIA_H20_96G",
        vendor="nvidia",
        description="H20 96GB (Hopper, export SKU); FP8 assumed equal to INT8",
        peak_bf16_tflops=148.0,
        peak_fp8_tflops=296.0,
        peak_int8_tops=296.0,
        hbm_capacity_gb=_memory_gb("NVIDIA_H20_96G"),
        hbm_bandwidth_gb_s=4000.0,
        interconnect=_nvlink_node(450.0, _IB_NDR_GB_S),
        source=_HW_SPECS,
        **_HOPPER,
    ),
    _device(
        name="NVIDIA_L40S_48G",
        vendor="nvidia",
        description="L40S 48GB (Ada, GDDR6, PCIe Gen4, no NVLink)",
        peak_bf16_tflops=362.05,
        peak_fp8_tflops=733.0,
        peak_int8_tops=733.0,
        hbm_capacity_gb=_memory_gb("NVIDIA_L40S_48G"),
        hbm_bandwidth_gb_s=864.0,
        interconnect=_pcie_node(32.0, _IB_HDR_GB_S),
        source=_HW_SPECS,
        **_ADA,
    ),
    _device(
        name="NVIDIA_H100_PCIE_80G",
        vendor="nvidia",
        description="H100 PCIe 80GB (Hopper, HBM2e, PCIe Gen5, no NVLink bridge)",
        peak_bf16_tflops=756.5,
        peak_fp8_tflops=1513.0,
        peak_int8_tops=1513.0,
        hbm_capacity_gb=_memory_gb("NVIDIA_H100_PCIE_80G"),
        hbm_bandwidth_gb_s=2000.0,
        interconnect=_pcie_node(64.0, _IB_NDR_GB_S),
        source=_HW_SPECS,
        **_HOPPER,
    ),
    _device(
        name="NVIDIA_L4_24G",
        vendor="nvidia",
        description="L4 24GB (Ada, GDDR6, PCIe Gen4, no NVLink)",
        peak_bf16_tflops=121.0,
        peak_fp8_tflops=242.0,
        peak_int8_tops=242.0,
        hbm_capacity_gb=_memory_gb("NVIDIA_L4_24G"),
        hbm_bandwidth_gb_s=300.0,
        interconnect=_pcie_node(32.0, _AIC_PCIE_NIC_GB_S),
        source=_HW_SPECS,
        **_ADA,
    ),
    # Blackwell workstation silicon (SM 12.0, GDDR7): the B200's efficiencies, uncalibrated.
    _device(
        name="NVIDIA_RTX_PRO_6000_SERVER_96G",
        vendor="nvidia",
        description="RTX PRO 6000 Blackwell Server Edition 96GB (GDDR7, PCIe Gen5, no NVLink)",
        peak_bf16_tflops=467.8,
        peak_fp8_tflops=935.6,
        peak_int8_tops=935.6,
        peak_fp4_tflops=1871.2,
        hbm_capacity_gb=_memory_gb("NVIDIA_RTX_PRO_6000_SERVER_96G"),
        hbm_bandwidth_gb_s=1792.0,
        interconnect=_pcie_node(64.0, _IB_NDR_GB_S),
        source=_HW_SPECS,
        **_BLACKWELL,
    ),
    _device(
        name="NVIDIA_B200_SXM_180G",
        vendor="nvidia",
        description="B200 SXM 180GB (Blackwell, NVLink5)",
        peak_bf16_tflops=2250.0,
        peak_fp8_tflops=4500.0,
        peak_int8_tops=4500.0,
        peak_fp4_tflops=9000.0,
        hbm_capacity_gb=_memory_gb("NVIDIA_B200_SXM_180G"),
        hbm_bandwidth_gb_s=7700.0,
        interconnect=_nvlink_node(900.0, _IB_NDR_GB_S),
        source=_HW_SPECS,
        **_BLACKWELL,
    ),
    _device(
        name="NVIDIA_GB200_186G",
        vendor="nvidia",
        description="GB200 per GPU (NVL72 domain of 72 GPUs)",
        peak_bf16_tflops=2500.0,
        peak_fp8_tflops=5000.0,
        peak_int8_tops=5000.0,
        peak_fp4_tflops=10000.0,
        hbm_capacity_gb=_memory_gb("NVIDIA_GB200_186G"),
        hbm_bandwidth_gb_s=8000.0,
        interconnect=_nvl72_rack(_IB_NDR_GB_S),
        source=_HW_SPECS,
        **_BLACKWELL,
    ),
    # Blackwell Ultra: the B200's kernel efficiencies (same SM architecture and software stack;
    # no B300 measurement calibrates them yet). INT8 dense throughput was cut to 153.5 / 165
    # TOPS, so INT8 GEMMs run far below FP8 here. Capacities are what nvidia-smi reports.
    _device(
        name="NVIDIA_B300_SXM_288G",
        vendor="nvidia",
        description="B300 SXM 288GB (Blackwell Ultra, HGX node of 8, NVLink5, CX8 800 Gb/s)",
        peak_bf16_tflops=2250.0,
        peak_fp8_tflops=4500.0,
        peak_int8_tops=153.5,
        peak_fp4_tflops=14000.0,
        hbm_capacity_gb=_memory_gb("NVIDIA_B300_SXM_288G"),
        hbm_bandwidth_gb_s=7750.0,
        interconnect=_nvlink_node(900.0, _IB_XDR_GB_S),
        source=_HW_SPECS,
        **_BLACKWELL,
    ),
    _device(
        name="NVIDIA_GB300_288G",
        vendor="nvidia",
        description="GB300 per GPU (Blackwell Ultra, NVL72 domain of 72 GPUs, 800 Gb/s IB)",
        peak_bf16_tflops=2500.0,
        peak_fp8_tflops=5000.0,
        peak_int8_tops=165.0,
        peak_fp4_tflops=15000.0,
        hbm_capacity_gb=_memory_gb("NVIDIA_GB300_288G"),
        hbm_bandwidth_gb_s=8000.0,
        interconnect=_nvl72_rack(_IB_XDR_GB_S),
        source=_HW_SPECS,
        **_BLACKWELL,
    ),
    # No FP8 matrix path: its FP8 GEMMs run at the BF16 rate (aiconfigurator-core's b60.yaml sets
    # fp8 = bf16), stated here so the INT8 fallback does not apply. PCIe 5.0 x8 between cards.
    _device(
        name="INTEL_ARC_PRO_B60_24G",
        vendor="intel",
        description="Intel Arc Pro B60 24GB (Xe2, GDDR6, PCIe 5.0 x8, no FP8 matrix path)",
        peak_bf16_tflops=98.3,
        peak_fp8_tflops=98.3,
        peak_int8_tops=197.0,
        hbm_capacity_gb=_memory_gb("INTEL_ARC_PRO_B60_24G"),
        hbm_bandwidth_gb_s=456.0,
        interconnect=_pcie_node(28.4, _IB_NDR_GB_S),
        source=_HW_SPECS,
        **_XE2,
    ),
    _device(
        name="AMD_MI300X_192G",
        vendor="amd",
        description="AMD Instinct MI300X 192GB (Infinity Fabric, 448 GB/s per direction)",
        peak_bf16_tflops=1307.4,
        peak_fp8_tflops=2614.9,
        peak_int8_tops=2614.9,
        hbm_capacity_gb=_memory_gb("AMD_MI300X_192G"),
        hbm_bandwidth_gb_s=5300.0,
        interconnect=_nvlink_node(448.0, _IB_NDR_GB_S),
        source=_HW_SPECS,
        **_CDNA3,
    ),
)
