"""KV-cache admission: how many requests one replica runs at once.

``max_running`` caps the requests in prefill or decode at once (the KV blocks of
``input_length + output_length`` tokens each must fit, a length range's means); the others
queue, and their wait is
part of their TTFT. A latency model that knows its KV capacity
(:class:`~app.core.cost.KvAdmissionModel`, e.g. the runner adapter) sets the cap.
"""

from __future__ import annotations

from app.core.chunking import require_int
from app.core.cost import KvAdmissionModel, LatencyModel
from app.core.errors import InfeasibleError
from app.core.scheduler import Scheduler
from app.core.spec import WorkloadSpec
from app.core.workload.metrics import MAX_REQUESTS


def kv_capacity(spec: WorkloadSpec, model: object) -> int | None:
    """Requests whose KV cache fits one replica (``None``: the model does not know)."""
    if not isinstance(model, KvAdmissionModel):
        return None
    context = spec.mean_input_length + spec.mean_output_length
    return model.kv_capacity_requests(context, spec.max_batched_tokens)


def running_cap(
    spec: WorkloadSpec, latency: LatencyModel, scheduler: Scheduler, max_num_seqs: int | None
) -> int | None:
    """Requests one replica runs at once: ``max_num_seqs``, the policy's cap, and the KV cache
    (when the latency model knows its capacity); ``None`` when nothing caps them."""
    if max_num_seqs is not None:
        require_int("max_num_seqs", max_num_seqs, 1, MAX_REQUESTS)
    caps = [c for c in (max_num_seqs, scheduler.max_running) if c is not None]
    max_running = min(caps) if caps else None
    kv_cap = kv_capacity(spec, latency)
    if kv_cap is not None:
        if kv_cap < 1:
            context = spec.mean_input_length + spec.mean_output_length
            raise InfeasibleError(
                f"the KV cache of one request ({context} tokens) does not fit next to the "
                "weights, the reserve and the activations"
            )
        max_running = kv_cap if max_running is None else min(max_running, kv_cap)
    return max_running
