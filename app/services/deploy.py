"""``POST /v1/deploy`` and ``chunkwise optimize --emit``: a result row's engine launch.

The row gives the layout, the token budget and the batch size; the emitted engine's profile
(with ``engine_options``) gives what the row does not: the KV-pool memory fraction, the running
cap, overlap scheduling and CUDA graphs, exactly the values the estimate ran with.
"""

from __future__ import annotations

import math

from app.core.catalog import (
    AttentionQuantAction,
    LinearQuantAction,
    parse_quantization,
    resolve_model_name,
)
from app.core.deploy import LaunchSpec, build_launch_config, platform_for, profile_values
from app.core.parallel import ParallelLayout
from app.core.profiles import (
    DEFAULT_ENGINE,
    check_engine_runs_on,
    check_npu_options,
    get_profile,
)
from app.core.runner.serving import engine_quantization
from app.core.workload import ranks_are_coupled
from app.models.deploy import DeployCommand, DeployRequest, DeployResponse
from app.models.optimize import OptimizeRequest, ResultRowOut
from app.services.resolve import resolve_device

#: The ``--quantization`` value of a linear format both vLLM and SGLang quantize online.
_ENGINE_QUANTIZATION = {LinearQuantAction.FP8: "fp8"}
#: On an Ascend NPU, the ``--quantization`` that loads a W8A8 (msModelSlim) checkpoint:
#: vLLM-Ascend's ``ascend``, SGLang's ``modelslim`` (their Ascend tutorials).
_NPU_QUANTIZATION = {
    LinearQuantAction.W8A8_DYNAMIC: {"vllm": "ascend", "sglang": "modelslim"},
    LinearQuantAction.W8A8_STATIC: {"vllm": "ascend", "sglang": "modelslim"},
}


def _running_cap(request: DeployRequest, profile_cap: int | None) -> int | None:
    per_rank = request.batch_size
    if per_rank is None and request.concurrency is not None:
        per_rank = math.ceil(request.concurrency / request.dp)
    caps = [cap for cap in (per_rank, profile_cap) if cap is not None]
    return min(caps) if caps else None


def deploy(request: DeployRequest) -> DeployResponse:
    """The launch configuration of ``request``'s row for its engine."""
    profile = get_profile(request.engine)
    if request.engine_options is not None:
        profile = profile.with_overrides(request.engine_options.model_dump(exclude_none=True))
    device = resolve_device(request.device)
    check_engine_runs_on(request.engine, vendor=device.vendor, device_name=device.name)
    check_npu_options(profile, vendor=device.vendor, device_name=device.name)
    layout = ParallelLayout(tp=request.tp, dp=request.dp, ep=request.ep, pp=request.pp)
    values = profile_values(
        profile,
        hbm_capacity_gb=device.hbm_capacity_gb,
        device_name=device.name,
        vendor=device.vendor,
        layout=layout,
    )
    quantization = parse_quantization(
        request.quantize_linear_action, request.quantize_attention_action
    )
    if request.quantize_attention_action is None:
        quantization = engine_quantization(profile, quantization)
    notes: list[str] = []
    platform = platform_for(device.vendor, device.name)
    if platform.is_npu:
        weight_quantization = _NPU_QUANTIZATION.get(quantization.linear, {}).get(request.engine)
    else:
        weight_quantization = _ENGINE_QUANTIZATION.get(quantization.linear)
    if weight_quantization is None and quantization.linear != LinearQuantAction.DISABLED:
        notes.append(
            f"serve a checkpoint quantized as {quantization.linear.value}: the engine reads "
            "that quantization from the checkpoint's config"
        )
    if quantization.attention == AttentionQuantAction.INT8:
        notes.append("no engine flag for an INT8 KV cache: the model's dtype (auto) is emitted")
    spec = LaunchSpec(
        engine=request.engine,
        model=request.model,
        layout=layout,
        coupled=ranks_are_coupled(layout.ep > 1, layout),
        num_devices=request.num_devices,
        max_batched_tokens=request.max_batched_tokens or values.token_budget,
        max_running_requests=_running_cap(request, values.running_cap),
        memory_fraction=values.memory_fraction,
        kv_cache_dtype="fp8" if quantization.attention == AttentionQuantAction.FP8 else "auto",
        weight_quantization=weight_quantization,
        num_mtp_tokens=request.num_mtp_tokens,
        overlap_scheduling=values.overlap_scheduling,
        cuda_graph_max_batch=values.cuda_graph_max_batch,
        npu_graph_mode=values.npu_graph_mode,
        redundant_experts=profile.redundant_experts,
        port=request.port,
        image=request.image,
        name=request.name,
        platform=platform,
    )
    config = build_launch_config(spec, notes=tuple(notes))
    return DeployResponse(
        engine=config.engine,
        command=DeployCommand(text=config.command, argv=list(config.argv)),
        files=dict(config.files),
        replicas=config.replicas,
        devices_per_replica=config.devices_per_replica,
        num_devices=request.num_devices,
        kubernetes=config.kubernetes,
        compose=config.compose,
        settings=dict(config.settings),
        notes=list(config.notes),
        source=config.source,
    )


def served_model(request: OptimizeRequest, row: ResultRowOut) -> str:
    """What the engine serves: the request's model as given (a Hugging Face id keeps its
    variant, e.g. ``-FP8``), a catalog alias as its Hugging Face id, an inline config by the
    row's label."""
    if not isinstance(request.model, str):
        return row.model
    if "/" not in request.model:
        return resolve_model_name(request.model) or request.model
    return request.model


def deploy_request_for_row(
    engine: str, request: OptimizeRequest, row: ResultRowOut
) -> DeployRequest:
    """The deploy request of an optimize row: its layout, budget and batch size, the optimize
    request's model, device, quantization and MTP; ``engine_options`` carry over when the
    row was estimated with the engine emitted for."""
    same_engine = (request.engine or DEFAULT_ENGINE) == engine
    return DeployRequest(
        engine=engine,
        model=served_model(request, row),
        device=request.device,
        num_devices=row.num_devices,
        tp=row.tp,
        dp=row.dp,
        ep=row.ep,
        pp=row.pp,
        max_batched_tokens=row.max_batched_tokens,
        batch_size=row.batch_size,
        quantize_linear_action=request.quantize_linear_action or LinearQuantAction.DISABLED.value,
        quantize_attention_action=request.quantize_attention_action,  # null: the engine's rule
        num_mtp_tokens=request.num_mtp_tokens,
        engine_options=request.engine_options if same_engine else None,
    )
