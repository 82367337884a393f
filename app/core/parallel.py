"""Parallel layouts of one deployment, and how requests spread over data-parallel replicas."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.chunking import require_int
from app.core.errors import InvalidParameterError


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class ParallelLayout:
    """Tensor, data, expert and pipeline parallel sizes.

    ``tp * dp * pp`` devices serve; ``ep`` splits MoE experts over ``ep`` of those devices
    (``ep <= tp * dp``). Each data-parallel replica runs its own engine instance.
    ``moe_over_dp`` (with ``ep`` 1): the ``dp`` replicas run attention apart but the MoE
    together, every expert tensor-parallel over all ``tp * dp`` ranks (TensorRT-LLM's
    ``enable_attention_dp`` with ``moe_expert_parallel_size: 1``, SGLang's
    ``--enable-dp-attention`` without ``--ep``): the ranks gather every replica's tokens before
    the experts and reduce-scatter after them.
    """

    tp: int = 1
    dp: int = 1
    ep: int = 1
    pp: int = 1
    moe_over_dp: bool = False

    def __post_init__(self) -> None:
        for name in ("tp", "dp", "ep", "pp"):
            require_int(name, getattr(self, name), 1, None)
        if self.ep > self.num_devices:
            raise InvalidParameterError("ep", self.ep, f"<= tp * dp * pp = {self.num_devices}")
        if self.moe_over_dp and self.ep != 1:
            raise InvalidParameterError(
                "moe_over_dp", self.moe_over_dp, "only without expert parallelism (ep = 1)"
            )

    @property
    def num_devices(self) -> int:
        return self.tp * self.dp * self.pp

    @property
    def label(self) -> str:
        """Human-readable label, e.g. ``TP4 DP2`` or ``TP8 DP1 EP8``."""
        parts = [f"TP{self.tp}", f"DP{self.dp}"]
        if self.pp > 1:
            parts.insert(1, f"PP{self.pp}")
        if self.ep > 1:
            parts.append(f"EP{self.ep}")
        if self.moe_over_dp and self.dp > 1:
            parts.append(f"MoE-TP{self.tp * self.dp}")
        return " ".join(parts)


def split_over_replicas(total: int, replicas: int) -> list[tuple[int, int]]:
    """``total`` requests (or clients) spread over ``replicas`` as evenly as integers allow.

    Returns ``[(per replica, how many replicas), ...]``, larger shares first, without empty
    entries: 10 over 4 -> ``[(3, 2), (2, 2)]``; 8 over 4 -> ``[(2, 4)]``; 2 over 4 ->
    ``[(1, 2)]`` (two replicas idle).
    """
    base, extra = divmod(total, replicas)
    return [(size, n) for size, n in ((base + 1, extra), (base, replicas - extra)) if size and n]
