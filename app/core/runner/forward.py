"""Name-based construction of a runner and of one forward (what the CLI and services share)."""

from __future__ import annotations

from typing import Any

from app.core.catalog.architecture import ModelArchitecture
from app.core.catalog.devices import get_device
from app.core.catalog.hardware import Device
from app.core.catalog.models import get_model
from app.core.catalog.quantization import parse_quantization
from app.core.cost import ForwardShape
from app.core.errors import InvalidParameterError
from app.core.parallel import ParallelLayout
from app.core.runner.runner import ForwardResult, ModelRunner


def parallel_layout(
    *,
    num_devices: int | None = None,
    tp: int | None = None,
    ep: int = 1,
    pp: int = 1,
) -> ParallelLayout:
    """msmodeling-style sizes: ``num_devices = tp * dp * pp`` (tp defaults to all devices)."""
    if num_devices is None:
        return ParallelLayout(tp=tp or 1, ep=ep, pp=pp)
    if isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 1:
        raise InvalidParameterError("num_devices", num_devices, "an integer >= 1")
    if tp is None and num_devices % pp:
        raise InvalidParameterError("num_devices", num_devices, f"a multiple of pp = {pp}")
    tp = tp or num_devices // pp
    if num_devices % (tp * pp):
        raise InvalidParameterError(
            "num_devices", num_devices, f"a multiple of tp * pp = {tp * pp}"
        )
    return ParallelLayout(tp=tp, dp=num_devices // (tp * pp), ep=ep, pp=pp)


def build_runner(
    model: str | ModelArchitecture,
    device: str | Device,
    *,
    parallel: ParallelLayout | None = None,
    quantize_linear_action: str | None = None,
    quantize_attention_action: str | None = None,
    num_mtp_tokens: int = 0,
    reserved_memory_gb: float | None = None,
) -> ModelRunner:
    """A runner from catalog names (or objects); raises the catalog's domain errors."""
    return ModelRunner(
        model if isinstance(model, ModelArchitecture) else get_model(model),
        device if isinstance(device, Device) else get_device(device),
        parallel,
        parse_quantization(quantize_linear_action, quantize_attention_action),
        reserved_memory_gb=reserved_memory_gb,
        num_mtp_tokens=num_mtp_tokens,
    )


def forward_request(
    *,
    num_queries: int,
    query_length: int,
    context_length: int = 0,
    decode: bool = False,
    num_mtp_tokens: int = 0,
) -> ForwardShape:
    """``num_queries`` requests of ``query_length`` new tokens on ``context_length`` cached ones.

    A decode step with MTP verifies ``1 + num_mtp_tokens`` tokens per request (the query length
    is raised to that); a runner built with ``num_mtp_tokens`` adds the draft passes to it.
    """
    if isinstance(context_length, bool) or not isinstance(context_length, int):
        raise InvalidParameterError("context_length", context_length, "an integer >= 0")
    if context_length < 0:
        raise InvalidParameterError("context_length", context_length, "an integer >= 0")
    query = max(query_length, 1 + num_mtp_tokens) if decode else query_length
    return ForwardShape(
        is_decode=decode, concurrency=num_queries, query_len=query, seq_len=context_length + query
    )


def forward_to_dict(runner: ModelRunner, result: ForwardResult) -> dict[str, Any]:
    """The JSON document of ``chunkwise forward`` (and the API's forward response body)."""
    p = runner.parallel
    return {
        "model": runner.model.name,
        "device": runner.device.name,
        "parallel": {"tp": p.tp, "dp": p.dp, "ep": p.ep, "pp": p.pp, "label": p.label},
        "quantization": runner.quantization.to_dict(),
        "identity": runner.identity(),
        **result.to_dict(),
    }
