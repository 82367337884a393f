"""Collective communication time on a tiered interconnect.

A collective over ``n`` devices runs on the innermost tier that holds all of them (the
bottleneck link). Bandwidth term (ring): all-reduce moves ``2 (n-1)/n`` of the message per
device; all-gather, reduce-scatter and all-to-all move ``(n-1)/n``. Latency term: a ring pays
``n-1`` link latencies per phase (two phases for all-reduce); beyond ``RING_MAX_DEVICES`` (one
node) libraries switch to tree / hierarchical algorithms, modelled as ``ceil(log2 n)`` latencies
per phase. On a switched tier (NVSwitch) every rank reaches every peer in one hop, and the
engines' one-shot / two-shot kernels (TensorRT-LLM custom all-reduce, NCCL NVLS) synchronise
the ranks in ``ceil(log2 n)`` latencies per phase at any ``n``. Bandwidth is per device and
direction, scaled by the tier's efficiency.

Across switched nodes (``node`` given: the NVSwitch tier inside one node, here smaller than the
group), every device has its own link of the outer tier (one NIC per GPU, as on DGX/HGX nodes)
and the collective libraries use all of them at once (NCCL's hierarchical all-reduce, one
channel per NIC): an all-reduce is a reduce-scatter inside each node, an all-reduce of each device's
``1/g`` share across the ``k`` nodes over its own link, and an all-gather inside the node; an
all-to-all sends the ``(n - g) / n`` of its buffer bound for other nodes over its own link
while the rest crosses the node's fabric. Unswitched node tiers (the Ascend HCCS / SIO levels
of msmodeling's device profiles) keep the bottleneck-tier ring, for msmodeling parity.
"""

from __future__ import annotations

import enum
import math

from app.core.catalog.hardware import BYTES_PER_GB, InterconnectTier

S_PER_US = 1e-6
ALL_REDUCE_PHASES = 2  # reduce-scatter + all-gather
RING_MAX_DEVICES = 8  # larger groups use tree-like latency (NCCL tree / hierarchical rings)


class Collective(enum.StrEnum):
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    SEND_RECV = "send_recv"


def collective_time_s(
    kind: Collective,
    message_bytes: float,
    group_size: int,
    tier: InterconnectTier,
    *,
    node: InterconnectTier | None = None,
) -> float:
    """Seconds for one collective; ``message_bytes`` is the full buffer one device holds;
    ``node``: the tier inside one node, for a group spanning nodes (see the module doc)."""
    if group_size <= 1 or message_bytes <= 0:
        return 0.0
    per_node = node.max_devices if node is not None else group_size
    if node is not None and node.switched and node is not tier and 1 < per_node < group_size:
        if kind is Collective.ALL_REDUCE:
            nodes = math.ceil(group_size / per_node)
            return (
                collective_time_s(Collective.REDUCE_SCATTER, message_bytes, per_node, node)
                + collective_time_s(Collective.ALL_REDUCE, message_bytes / per_node, nodes, tier)
                + collective_time_s(Collective.ALL_GATHER, message_bytes, per_node, node)
            )
        if kind is Collective.ALL_TO_ALL:
            remote = (group_size - per_node) / group_size * message_bytes
            local = (per_node - 1) / group_size * message_bytes
            steps = math.ceil(math.log2(group_size))
            return (
                max(
                    remote / (tier.bandwidth_gb_s * BYTES_PER_GB * tier.efficiency),
                    local / (node.bandwidth_gb_s * BYTES_PER_GB * node.efficiency),
                )
                + steps * tier.latency_us * S_PER_US
            )
    bandwidth = tier.bandwidth_gb_s * BYTES_PER_GB * tier.efficiency
    latency = tier.latency_us * S_PER_US
    n = group_size
    if kind is Collective.SEND_RECV:
        return message_bytes / bandwidth + latency
    share = (n - 1) / n
    ring = n <= RING_MAX_DEVICES and not tier.switched
    steps = n - 1 if ring else math.ceil(math.log2(n))
    if kind is Collective.ALL_REDUCE:
        share *= ALL_REDUCE_PHASES
        steps *= ALL_REDUCE_PHASES
    return share * message_bytes / bandwidth + steps * latency
