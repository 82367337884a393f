"""Catalog devices and quantization formats."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from app.core.catalog import (
    DType,
    LinearQuantAction,
    device_from_dict,
    device_names,
    get_device,
    list_devices,
    parse_quantization,
)
from app.core.catalog.device_table import sm_count
from app.core.errors import InvalidParameterError, UnknownDeviceError

ISSUE_DEVICE_NAMES = [
    "TEST_DEVICE",
    "ATLAS_800_A2_376T_64G",
    "ATLAS_800_A2_313T_64G",
    "ATLAS_800_A2_280T_64G",
    "ATLAS_800_A2_280T_64G_PCIE",
    "ATLAS_800_A2_280T_32G_PCIE",
    "ATLAS_800_A3_752T_128G_DIE",
    "ATLAS_800_A3_560T_128G_DIE",
    "ATLAS_350_425T_112G",
    "NVIDIA_A100_SXM_80G",
    "NVIDIA_A100_PCIE_80G",
    "NVIDIA_A30_24G",
    "NVIDIA_H100_SXM_80G",
    "NVIDIA_H200_SXM_141G",
    "NVIDIA_H20_96G",
    "NVIDIA_L40S_48G",
    "NVIDIA_H100_PCIE_80G",
    "NVIDIA_L4_24G",
    "NVIDIA_RTX_PRO_6000_SERVER_96G",
    "NVIDIA_B200_SXM_180G",
    "NVIDIA_GB200_186G",
    "NVIDIA_B300_SXM_288G",
    "NVIDIA_GB300_288G",
    "INTEL_ARC_PRO_B60_24G",
    "AMD_MI300X_192G",
]


def test_catalog_has_the_issue_devices() -> None:
    assert device_names() == ISSUE_DEVICE_NAMES


@pytest.mark.parametrize("name", ISSUE_DEVICE_NAMES)
def test_every_device_loads_and_round_trips(name: str) -> None:
    device = get_device(name.lower())
    assert device.name == name
    assert device.peak_bf16_tflops > 0 and device.hbm_bandwidth_gb_s > 0
    assert device_from_dict(device.to_dict()) == device


def test_hardware_numbers_follow_the_sources() -> None:
    h100 = get_device("NVIDIA_H100_SXM_80G")
    assert (h100.peak_bf16_tflops, h100.peak_fp8_tflops, h100.hbm_bandwidth_gb_s) == (
        989.0,
        1979.0,
        3350.0,
    )
    a2 = get_device("ATLAS_800_A2_376T_64G")
    # msmodeling: 1.6 TiB/s and 64 GiB, in decimal units.
    assert a2.hbm_bandwidth_gb_s == pytest.approx(1759.2, rel=1e-4)
    assert a2.hbm_capacity_gb == pytest.approx(68.72, rel=1e-3)
    assert len(list_devices()) == len(ISSUE_DEVICE_NAMES)


def test_unknown_device_lists_valid_names() -> None:
    with pytest.raises(UnknownDeviceError) as info:
        get_device("TPU_V9")
    assert "NVIDIA_H100_SXM_80G" in str(info.value)
    assert "\n" not in str(info.value)


def test_custom_device_from_base() -> None:
    device = device_from_dict(
        {"base": "NVIDIA_H100_SXM_80G", "name": "H100_96G", "hbm_capacity_gb": 96}
    )
    assert device.name == "H100_96G" and device.hbm_capacity_gb == 96
    assert device.peak_fp8_tflops == 1979.0


def test_custom_device_rejects_bad_values() -> None:
    with pytest.raises(InvalidParameterError):
        device_from_dict({"base": "NVIDIA_H100_SXM_80G", "memory_efficiency": 1.5})
    with pytest.raises(InvalidParameterError):
        device_from_dict({"base": "NVIDIA_H100_SXM_80G", "warp_drive": True})
    with pytest.raises(InvalidParameterError):
        device_from_dict({"name": "X"})


def test_compute_fallback() -> None:
    a100 = get_device("NVIDIA_A100_SXM_80G")
    assert a100.compute_path(DType.FP8) is DType.INT8
    assert a100.compute_path(DType.FP4) is DType.INT8
    assert get_device("NVIDIA_H100_SXM_80G").compute_path(DType.FP4) is DType.FP8
    assert get_device("NVIDIA_B200_SXM_180G").compute_path(DType.FP4) is DType.FP4


def test_quantization_names() -> None:
    quant = parse_quantization("w8a8_dynamic", "int8")
    assert quant.linear is LinearQuantAction.W8A8_DYNAMIC
    assert quant.kv_bytes_per_element == 1.0
    assert parse_quantization().linear_format.weight_bytes_per_param == 2.0
    with pytest.raises(InvalidParameterError) as info:
        parse_quantization("W3A7")
    assert "NVFP4" in str(info.value)


def test_every_device_states_its_memory_total_and_its_source() -> None:
    """One rule (README, "Units"): the runtime's reported total, or the vendor's GiB where no
    citable source gives it; data/device_memory.csv has one sourced row per built-in device."""
    path = Path(__file__).resolve().parents[3] / "app/core/catalog/data/device_memory.csv"
    with path.open(newline="", encoding="utf-8") as handle:
        rows = {row["device"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {device.name for device in list_devices()}
    for name, row in rows.items():
        assert row["source"].strip(), name
        assert row["reported_by"] in {"nvidia-smi", "rocm-smi", "vendor capacity"}, name
        assert (row["unit"] == "GiB") == (row["reported_by"] == "vendor capacity"), name


def test_sm_counts_are_sourced_and_name_built_in_devices() -> None:
    """data/device_sm_counts.csv: one sourced row per device it names, each a built-in device
    (the fitted GEMM curves' wave term reads it; app/core/runner/kernel_fit.py)."""
    path = Path(__file__).resolve().parents[3] / "app/core/catalog/data/device_sm_counts.csv"
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    names = [row["device"] for row in rows]
    assert len(names) == len(set(names))
    assert set(names) <= {device.name for device in list_devices()}
    for row in rows:
        assert row["source"].strip(), row["device"]
        assert sm_count(row["device"]) == int(row["sm_count"]) > 0
    assert (sm_count("NVIDIA_H100_SXM_80G"), sm_count("NVIDIA_B200_SXM_180G")) == (132, 148)
    assert sm_count("TEST_DEVICE") is None


@pytest.mark.parametrize(
    ("name", "total_bytes"),
    [
        # Stored in decimal GB before (96, 186, 192 GB): 7 % below what the runtime reports.
        ("NVIDIA_H20_96G", 97871 * 2**20),
        ("NVIDIA_GB200_186G", 189471 * 2**20),
        ("AMD_MI300X_192G", 206141652992),
        # "288G" both, and both the driver's totals: B300 275040 MiB, GB300 284208 MiB.
        ("NVIDIA_B300_SXM_288G", 275040 * 2**20),
        ("NVIDIA_GB300_288G", 284208 * 2**20),
        ("NVIDIA_H100_SXM_80G", 81559 * 2**20),
    ],
)
def test_memory_is_the_runtimes_total(name: str, total_bytes: int) -> None:
    assert get_device(name).hbm_capacity_gb == pytest.approx(total_bytes / 1e9, rel=1e-12)
