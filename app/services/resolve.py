"""Resolving what a request names: model (catalog, HF id or inline config.json), device
(catalog or custom), quantization, and the scheduler (:class:`ResolvedDeployment`, a core value
of :mod:`app.core.scenario`, is re-exported here).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TypeVar

from app.core import limits
from app.core.catalog import (
    Device,
    ModelArchitecture,
    Quantization,
    device_from_dict,
    get_device,
    get_model,
    model_from_config,
    model_names,
    parse_quantization,
    resolve_model_name,
)
from app.core.errors import ChunkwiseError, InvalidParameterError, UnknownModelError
from app.core.profiles import (
    DEFAULT_ENGINE,
    MSMODELING,
    EngineProfile,
    check_engine_runs_on,
    check_npu_options,
    device_profile,
    get_profile,
)
from app.core.runner.serving import engine_quantization
from app.core.scenario import ResolvedDeployment
from app.core.scheduler import Scheduler, scheduler_options
from app.core.scheduler import make_scheduler as core_make_scheduler
from app.models.workload import (
    CustomDevice,
    DeploymentMixin,
    InlineModel,
    SchedulerOptions,
    WorkloadMixin,
)
from app.services.context_length import check_context_length

__all__ = [
    "ResolvedDeployment",
    "check_inline_parts",
    "derived_quantization",
    "make_scheduler",
    "request_scheduler",
    "resolve_deployment",
    "resolve_device",
    "resolve_model",
    "resolve_profile",
    "resolved_echo",
]

#: What a hostile inline config.json or custom device can make the catalog raise besides its
#: domain errors (a string where a number belongs, a list where a mapping belongs, ...).
_MALFORMED = (ValueError, TypeError, AttributeError, LookupError, ArithmeticError)
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "num_nextn_predict_layers")


def _check_inline_numbers(field: str, value: object) -> None:
    """An inline object (a config.json, a custom device) is bounded before anything reads it:
    at most ``MAX_INLINE_DEPTH`` levels of nesting and ``MAX_INLINE_NODES`` values, every
    number finite and at most ``MAX_INLINE_NUMBER`` (a 422 naming the path otherwise). The
    walk is iterative, so no depth reaches the interpreter's recursion limit."""
    stack: list[tuple[object, str, int]] = [(value, "", 0)]
    seen = 0
    while stack:
        item, path, depth = stack.pop()
        seen += 1
        if seen > limits.MAX_INLINE_NODES:
            raise InvalidParameterError(
                field, f"more than {limits.MAX_INLINE_NODES} values", "a smaller object"
            )
        if isinstance(item, Mapping | list | tuple) and depth >= limits.MAX_INLINE_DEPTH:
            raise InvalidParameterError(
                f"{field}.{path}" if path else field,
                f"nested deeper than {limits.MAX_INLINE_DEPTH} levels",
                f"at most {limits.MAX_INLINE_DEPTH} levels of objects and lists",
            )
        if isinstance(item, Mapping):
            stack.extend(
                (child, f"{path}.{key}" if path else str(key), depth + 1)
                for key, child in item.items()
            )
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{path}[{i}]", depth + 1) for i, child in enumerate(item))
        elif (
            isinstance(item, int | float)
            and not isinstance(item, bool)
            and not (math.isfinite(item) and abs(item) <= limits.MAX_INLINE_NUMBER)
        ):
            raise InvalidParameterError(
                f"{field}.{path}", item, f"a finite number of at most {limits.MAX_INLINE_NUMBER}"
            )


def check_inline_parts(request: DeploymentMixin) -> None:
    """The request's inline objects (a config.json, a custom device) bounded before anything
    reads or serialises the request (a response-cache key is its JSON, which a value nested
    past the serialiser's depth breaks): a 422 naming the path. The first step of every
    resolution."""
    if isinstance(request.model, InlineModel):
        _check_inline_numbers("model.config", request.model.config)
    if isinstance(request.device, CustomDevice):
        _check_inline_numbers("device", request.device.model_dump(exclude_none=True))
    decode_device = getattr(request, "decode_device", None)
    if isinstance(decode_device, CustomDevice):
        _check_inline_numbers("decode_device", decode_device.model_dump(exclude_none=True))


def _inline_model(ref: InlineModel) -> ModelArchitecture:
    """``model_from_config`` on a client's config.json: bounded, and any failure is a 422."""
    _check_inline_numbers("model.config", ref.config)
    for key in _LAYER_KEYS:
        layers = ref.config.get(key)
        if isinstance(layers, int | float) and layers > limits.MAX_INLINE_LAYERS:
            raise InvalidParameterError(
                f"model.config.{key}", layers, f"at most {limits.MAX_INLINE_LAYERS}"
            )
    try:
        return model_from_config(ref.config, name=ref.name or "inline")
    except ChunkwiseError:
        raise
    except _MALFORMED as exc:
        raise InvalidParameterError(
            "model.config", "<inline config.json>", f"a well-formed config.json ({exc})"
        ) from exc


def resolve_model(ref: str | InlineModel, *, allow_paths: bool = False) -> ModelArchitecture:
    """A catalog name / HF id, or an inline config. Local paths only when ``allow_paths``."""
    if isinstance(ref, InlineModel):
        return _inline_model(ref)
    hf_id = resolve_model_name(ref)
    if hf_id is not None:
        return get_model(hf_id)
    if allow_paths:
        return get_model(ref)  # a directory or config.json path (CLI only)
    raise UnknownModelError(ref, model_names())


def resolve_device(ref: str | CustomDevice) -> Device:
    if isinstance(ref, CustomDevice):
        fields = ref.model_dump(exclude_none=True)
        _check_inline_numbers("device", fields)
        try:
            return device_from_dict(fields)
        except ChunkwiseError:
            raise
        except _MALFORMED as exc:
            raise InvalidParameterError(
                "device", ref.name, f"a well-formed custom device ({exc})"
            ) from exc
    return get_device(ref)


def resolve_deployment(
    request: DeploymentMixin,
    *,
    allow_paths: bool = False,
    profile: EngineProfile = MSMODELING,
) -> ResolvedDeployment:
    """The catalog objects of a request, run as ``profile``'s engine runs them (the RFC's
    runner by default): the profile's KV-cache dtype applies when ``quantize_attention_action``
    is null (derived); a null ``quantize_linear_action`` is DISABLED here (the resolver fills
    in the engine profile's first, :func:`~app.services.sizing.with_engine_defaults`)."""
    num_mtp_tokens = int(getattr(request, "num_mtp_tokens", 0))
    rates = tuple(float(r) for r in getattr(request, "mtp_acceptance_rates", ()))
    quantization = parse_quantization(
        request.quantize_linear_action, request.quantize_attention_action
    )
    if request.quantize_attention_action is None:  # null: derived
        quantization = engine_quantization(profile, quantization)
    device = resolve_device(request.device)
    check_engine_runs_on(profile.name, vendor=device.vendor, device_name=device.name)
    model = resolve_model(request.model, allow_paths=allow_paths)
    check_context_length(request, model)
    return ResolvedDeployment(
        model=model,
        device=device,
        quantization=quantization,
        reserved_memory_gb=request.reserved_memory_gb,
        num_mtp_tokens=num_mtp_tokens,
        mtp_acceptance_rates=rates,
        profile=profile,
    )


def resolve_profile(request: WorkloadMixin) -> EngineProfile:
    """The request's engine profile (default ``vllm``) as its engine runs on the request's
    device, with its ``engine_options``."""
    name = request.engine or DEFAULT_ENGINE
    device = getattr(request, "device", None)
    if device is None:
        profile = get_profile(name)
    else:
        resolved = resolve_device(device)
        profile = device_profile(name, vendor=resolved.vendor, device_name=resolved.name)
    options = request.engine_options
    if options is not None:
        profile = profile.with_overrides(options.model_dump(exclude_none=True))
        if device is not None:
            check_npu_options(profile, vendor=resolved.vendor, device_name=resolved.name)
    return profile


def request_scheduler(request: WorkloadMixin, profile: EngineProfile, device: Device) -> Scheduler:
    """The request's step policy, or the engine profile's when ``scheduler`` is omitted."""
    if "scheduler" in request.model_fields_set:
        return make_scheduler(request.scheduler)
    return profile.scheduler_for(device.hbm_capacity_gb, device.name)


def make_scheduler(options: SchedulerOptions) -> Scheduler:
    return core_make_scheduler(
        options.name,
        max_num_seqs=options.max_num_seqs,
        mixed_latency=options.mixed_latency,
        slack_ratio=options.slack_ratio,
        prefill_order=options.prefill_order,
    )


EchoT = TypeVar("EchoT", bound=WorkloadMixin)


def derived_quantization(request: object, quantization: Quantization) -> dict[str, str]:
    """The quantization actions ``request`` left null (derived), as ``quantization`` runs them:
    what its echo shows, so that re-sending the echo asks the same question."""
    return {
        name: value
        for name, value in quantization.to_dict().items()
        if getattr(request, name) is None
    }


def resolved_echo(
    request: EchoT,
    deployment: ResolvedDeployment,
    scheduler: Scheduler | None,
    **resolved: object,
) -> EchoT:
    """``request`` as it ran, the echo of its answer: the quantization it ran where the request
    left it null (the attention action the engine's KV-cache rule chose), the step
    ``scheduler`` with every option it ran with (the engine's own policy and running cap when
    the request named none; ``None``: the mode runs no step scheduler and the echo leaves it
    out), and the other ``resolved`` values
    (a search's batch cap). Re-sending the echo asks the same question: every value is given."""
    update = {**derived_quantization(request, deployment.quantization), **resolved}
    if scheduler is not None:
        update["scheduler"] = SchedulerOptions.model_validate(scheduler_options(scheduler))
    return request.model_copy(update=update)
