"""Coupled data-parallel ranks: attention data parallelism with expert-parallel MoE.

With attention DP, each rank runs its own requests' attention, but the MoE layers exchange
tokens among all ranks (the expert-parallel all-to-all) in every layer of every step, so no rank
can start its next step before the slowest finished this one (engines pad idle ranks with dummy
batches for the same reason). Simulating the ranks as independent replicas misses that a prefill
chunk on one rank stalls every rank's decodes.

The coupled ranks run as ONE engine: all clients, ``dp`` budgets of tokens per step (the chunk
plan stays one rank's), the running cap of all ranks; the requests of a step are spread evenly
over the ranks (round-robin dispatch), so a step costs the forward of the busiest rank's share,
``ceil(n / dp)`` of each part (:class:`BusiestRank`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from app.core.cost import AnyShape, ForwardShape, LatencyModel, MixedShape
from app.core.engine import evaluate_shapes
from app.core.parallel import ParallelLayout


def busiest_share(shape: ForwardShape, ranks: int) -> ForwardShape:
    """The part of ``shape`` the busiest of ``ranks`` evenly loaded ranks runs."""
    return ForwardShape(
        is_decode=shape.is_decode,
        concurrency=math.ceil(shape.concurrency / ranks),
        query_len=shape.query_len,
        seq_len=shape.seq_len,
    )


class BusiestRank:
    """A latency model over the step shapes of ``ranks`` coupled ranks: each shape costs the
    busiest rank's share on the wrapped (one-rank) model."""

    __slots__ = ("model", "ranks")

    def __init__(self, model: LatencyModel, ranks: int) -> None:
        self.model = model
        self.ranks = ranks

    def _share(self, shape: AnyShape) -> AnyShape:
        if isinstance(shape, MixedShape):
            return MixedShape(
                prefill=busiest_share(shape.prefill, self.ranks),
                decode=busiest_share(shape.decode, self.ranks),
            )
        return busiest_share(shape, self.ranks)

    def forward_latencies_ms(self, shapes: Sequence[AnyShape]) -> Mapping[AnyShape, float]:
        shares = {shape: self._share(shape) for shape in shapes}
        found = evaluate_shapes(tuple(dict.fromkeys(shares.values())), self.model)
        return {shape: found[share] for shape, share in shares.items()}

    def prefill_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        shape = ForwardShape(
            is_decode=False, concurrency=concurrency, query_len=query_len, seq_len=seq_len
        )
        return self.forward_latencies_ms((shape,))[shape]

    def decode_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        shape = ForwardShape(
            is_decode=True, concurrency=concurrency, query_len=query_len, seq_len=seq_len
        )
        return self.forward_latencies_ms((shape,))[shape]


def ranks_are_coupled(is_moe: bool, layout: ParallelLayout) -> bool:
    """Whether the layout's ``dp`` replicas of ``tp`` ranks step together: a MoE model whose
    experts are spread over more ranks than one replica has (``ep > tp``, or every expert
    tensor-parallel over all replicas' ranks, ``moe_over_dp``), so its all-to-all (or
    all-gather and reduce-scatter) spans the data-parallel ranks."""
    return is_moe and layout.dp > 1 and (layout.ep > layout.tp or layout.moe_over_dp)
