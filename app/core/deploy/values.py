"""The engine-profile values a launch carries (the same rules the estimate ran with)."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.parallel import ParallelLayout
from app.core.profiles import VLLM_GPU_MEMORY_UTILIZATION, EngineProfile


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileValues:
    """A profile's launch values on one device and layout."""

    #: ``max_batched_tokens`` when the row does not give one.
    token_budget: int
    #: ``max_num_seqs`` / ``max_running_requests`` / ``max_batch_size`` (``None``: none).
    running_cap: int | None
    #: The KV-pool memory fraction in the engine's own meaning.
    memory_fraction: float
    overlap_scheduling: bool
    cuda_graph_max_batch: int | None
    #: vLLM-Ascend's ``cudagraph_mode`` when the request set one (None: the image's default).
    npu_graph_mode: str | None = None


def profile_values(
    profile: EngineProfile,
    *,
    hbm_capacity_gb: float,
    device_name: str,
    vendor: str,
    layout: ParallelLayout,
) -> ProfileValues:
    """``profile``'s values for ``layout`` on a device: vLLM's ``gpu_memory_utilization`` (of
    total memory), SGLang's ``mem_fraction_static`` (derived from the device exactly as the
    runner's reserve is: ranks ``tp * pp``, ``dp`` attention ranks) and TensorRT-LLM's
    ``free_gpu_memory_fraction`` (of the memory left after weights and activations)."""
    if profile.kv_pool == "static_fraction":
        fraction = profile.static_fraction(
            hbm_capacity_gb, vendor, layout.tp * layout.pp, layout.dp
        )
    elif profile.kv_pool == "free_fraction":
        fraction = profile.kv_pool_fraction()
    elif profile.memory_fraction is not None:
        fraction = profile.memory_fraction
    else:
        fraction = VLLM_GPU_MEMORY_UTILIZATION
    return ProfileValues(
        token_budget=profile.token_budget(hbm_capacity_gb, device_name, vendor),
        running_cap=profile.running_cap(hbm_capacity_gb, device_name),
        memory_fraction=fraction,
        overlap_scheduling=profile.overlap_scheduling,
        cuda_graph_max_batch=profile.graph_max_batch(hbm_capacity_gb, vendor, layout.tp),
        npu_graph_mode=profile.npu_graph_mode,
    )
