"""Collective times on one interconnect tier (hand-computed)."""

from __future__ import annotations

import dataclasses

import pytest

from app.core.catalog import InterconnectTier
from app.core.runner.comm import Collective, collective_time_s

TIER = InterconnectTier(
    name="link", max_devices=1024, bandwidth_gb_s=100.0, latency_us=2.0, efficiency=0.5
)
BW = 100e9 * 0.5  # bytes/s after efficiency
LAT = 2e-6


def test_single_device_costs_nothing() -> None:
    assert collective_time_s(Collective.ALL_REDUCE, 1e6, 1, TIER) == 0.0


def test_ring_all_reduce_within_a_node() -> None:
    # 2 (n-1)/n of the message over the link, 2 (n-1) latencies.
    expected = 2 * 3 / 4 * 8e6 / BW + 2 * 3 * LAT
    assert collective_time_s(Collective.ALL_REDUCE, 8e6, 4, TIER) == pytest.approx(expected)


def test_all_gather_and_all_to_all_move_one_share() -> None:
    expected = 7 / 8 * 8e6 / BW + 7 * LAT
    assert collective_time_s(Collective.ALL_GATHER, 8e6, 8, TIER) == pytest.approx(expected)
    assert collective_time_s(Collective.ALL_TO_ALL, 8e6, 8, TIER) == pytest.approx(expected)


def test_large_groups_pay_logarithmic_latency() -> None:
    # 64 devices: ring bandwidth share, tree-like 2 * log2(64) = 12 latencies.
    expected = 2 * 63 / 64 * 1e3 / BW + 12 * LAT
    assert collective_time_s(Collective.ALL_REDUCE, 1e3, 64, TIER) == pytest.approx(expected)


def test_switched_tier_pays_logarithmic_latency_inside_a_node() -> None:
    # NVSwitch: one-/two-shot kernels, 2 * log2(8) = 6 latencies instead of the ring's 14.
    switched = dataclasses.replace(TIER, switched=True)
    expected = 2 * 7 / 8 * 64e3 / BW + 6 * LAT
    assert collective_time_s(Collective.ALL_REDUCE, 64e3, 8, switched) == pytest.approx(expected)
    assert collective_time_s(Collective.ALL_REDUCE, 64e3, 8, switched) < collective_time_s(
        Collective.ALL_REDUCE, 64e3, 8, TIER
    )


def test_nvidia_nvlink_tiers_are_switched() -> None:
    from app.core.catalog.devices import get_device

    assert get_device("NVIDIA_H100_SXM_80G").interconnect[0].switched
    assert not get_device("NVIDIA_H100_SXM_80G").interconnect[1].switched
    assert not get_device("ATLAS_800_A2_376T_64G").interconnect[0].switched


def test_a_collective_across_switched_nodes_uses_every_devices_own_link() -> None:
    """Two 8-GPU NVSwitch nodes: the all-reduce is reduce-scatter in the node, an all-reduce of
    each GPU's eighth over its own NIC, all-gather in the node (NCCL's hierarchical
    algorithm), far below a flat ring through one 50 GB/s link."""
    from app.core.catalog import get_device
    from app.core.runner.comm import Collective, collective_time_s

    tiers = get_device("NVIDIA_B200_SXM_180G").interconnect
    node, network = tiers[0], tiers[1]
    message = 64e6
    flat = collective_time_s(Collective.ALL_REDUCE, message, 16, network)
    staged = collective_time_s(Collective.ALL_REDUCE, message, 16, network, node=node)
    expected = (
        collective_time_s(Collective.REDUCE_SCATTER, message, 8, node)
        + collective_time_s(Collective.ALL_REDUCE, message / 8, 2, network)
        + collective_time_s(Collective.ALL_GATHER, message, 8, node)
    )
    assert staged == expected and staged < flat / 5
    # Within one node nothing changes.
    assert collective_time_s(Collective.ALL_REDUCE, message, 8, node, node=node) == (
        collective_time_s(Collective.ALL_REDUCE, message, 8, node)
    )
    # All-to-all: only the share bound for the other node crosses the NICs.
    a2a = collective_time_s(Collective.ALL_TO_ALL, message, 16, network, node=node)
    assert a2a < collective_time_s(Collective.ALL_TO_ALL, message, 16, network)
    assert a2a >= 0.5 * message / (network.bandwidth_gb_s * 1e9 * network.efficiency)


def test_unswitched_node_tiers_keep_the_bottleneck_ring() -> None:
    """Ascend HCCS levels (msmodeling's profiles) are not staged: msmodeling parity."""
    from app.core.catalog import get_device
    from app.core.runner.comm import Collective, collective_time_s

    tiers = get_device("ATLAS_800_A2_376T_64G").interconnect
    for kind in (Collective.ALL_REDUCE, Collective.ALL_TO_ALL):
        assert collective_time_s(kind, 64e6, 16, tiers[1], node=tiers[0]) == (
            collective_time_s(kind, 64e6, 16, tiers[1])
        )
