"""POST /v1/deploy: the engine launch configuration of a result row."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, create_model
from pydantic.fields import FieldInfo

from app.core import limits
from app.core.deploy import DEFAULT_PORT, LAUNCH_ENGINES, MAX_PORT
from app.models.workload import DeviceRef, EngineOptions, Name, ParallelSize, StrictModel

if TYPE_CHECKING:
    LaunchEngineName = str
else:  # the launchable engines, in their order (the schema's enum)
    LaunchEngineName = Literal[LAUNCH_ENGINES]


class DeployRequest(StrictModel):
    """A result row of POST /v1/optimize (its field names) and the engine to launch it with."""

    engine: LaunchEngineName = Field(
        description=f"the engine to emit the launch for: {', '.join(LAUNCH_ENGINES)}; its "
        "profile's values (memory fraction, overlap, graphs) fill what the row does not say",
        examples=["vllm"],
    )
    model: Name = Field(
        description="the Hugging Face id (or path inside the container) the engine serves",
        examples=["Qwen/Qwen3-32B"],
    )
    device: DeviceRef
    num_devices: int = Field(
        strict=True,
        ge=1,
        le=limits.MAX_NUM_DEVICES,
        description="devices of every replica together (the row's num_devices)",
        examples=[8],
    )
    tp: ParallelSize = Field(default=1, description="tensor parallel size of one replica")
    dp: ParallelSize = Field(
        default=1,
        description="data-parallel ranks: replicas, or one instance's DP-attention ranks when "
        "the MoE experts span them (ep > tp)",
    )
    ep: ParallelSize = Field(default=1, description="expert parallel size (MoE), devices")
    pp: ParallelSize = Field(default=1, description="pipeline parallel stages")
    max_batched_tokens: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=limits.MAX_BATCHED_TOKENS,
        description="token budget of one step of one data-parallel rank (the row's); omitted: "
        "the engine profile's default for the device",
    )
    batch_size: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=limits.MAX_SEARCH_BATCH_SIZE,
        description="requests per data-parallel rank at the row's optimum; the running cap "
        "emitted is the smaller of it and the profile's cap (omitted: concurrency spread over "
        "the ranks, else the profile's cap)",
    )
    concurrency: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=limits.MAX_SEARCH_BATCH_SIZE * limits.MAX_PARALLEL_SIZE,
        description="requests of the whole row (used when batch_size is omitted)",
    )
    quantize_linear_action: Name = Field(
        default="DISABLED",
        description="the row's linear quantization: FP8 emits the engines' fp8 quantization; "
        "other formats need a checkpoint quantized that way",
        examples=["FP8"],
    )
    quantize_attention_action: Name | None = Field(
        default=None,
        description="the KV cache: FP8 emits an FP8 KV cache; omitted: the engine profile's "
        "rule for the checkpoint",
    )
    num_mtp_tokens: int = Field(
        default=0,
        strict=True,
        ge=0,
        le=limits.MAX_MTP_TOKENS,
        description="MTP draft tokens per step (speculative settings)",
    )
    engine_options: EngineOptions | None = Field(
        default=None, description="override values of the engine profile (as in optimize)"
    )
    port: int = Field(
        default=DEFAULT_PORT, strict=True, ge=1, le=MAX_PORT, description="the server's TCP port"
    )
    image: Name | None = Field(
        default=None, description="container image (default: the engine's public image)"
    )
    name: Name | None = Field(
        default=None, description="Kubernetes / compose name (default: model and engine)"
    )


#: Fields of the POST body a query string cannot carry (a JSON object).
_BODY_ONLY = ("engine_options",)


def _query_field(info: FieldInfo) -> FieldInfo:
    """``info`` without strictness: query values arrive as text ("8" is the number 8)."""
    loose = copy.copy(info)
    loose.metadata = [m for m in info.metadata if not isinstance(m, Strict)]
    return loose


_QUERY_FIELDS: dict[str, Any] = {
    name: (Name if name == "device" else info.annotation, _query_field(info))
    for name, info in DeployRequest.model_fields.items()
    if name not in _BODY_ONLY
}


class _QueryModel(StrictModel):
    """Unknown parameters are an error; values arrive as text ("8" is the number 8)."""

    model_config = ConfigDict(extra="forbid", strict=False)


#: GET /v1/deploy's query parameters: the POST body's fields (same names, bounds, defaults and
#: descriptions) but a catalog device name only and no engine_options.
if TYPE_CHECKING:

    class DeployQuery(_QueryModel):
        """Built at run time from DeployRequest's fields (below)."""

else:
    DeployQuery = create_model("DeployQuery", __base__=_QueryModel, **_QUERY_FIELDS)


class DeployCommand(BaseModel):
    text: str = Field(description="the command line, shell-quoted")
    argv: list[str] = Field(description="the command as an argument vector")


class DeployResponse(BaseModel):
    """The launch of one row: command, config files, replicas and manifests."""

    engine: str = Field(description="the engine launched")
    command: DeployCommand = Field(description="the engine's launch command for one replica")
    files: dict[str, str] = Field(
        description="config files by name (TensorRT-LLM's extra-options YAML), mounted at "
        "/config in the manifests"
    )
    replicas: int = Field(description="engine instances: num_devices / devices_per_replica")
    devices_per_replica: int = Field(description="GPUs of one instance (nvidia.com/gpu)")
    num_devices: int = Field(description="devices of all replicas")
    kubernetes: str = Field(description="a Deployment and a Service (and a ConfigMap) as YAML")
    compose: str = Field(description="a docker-compose service as YAML")
    settings: dict[str, str] = Field(
        description="each emitted flag and its value (docs/deploy.md maps them to the profile)"
    )
    notes: list[str] = Field(description="what the engine cannot express exactly, and why")
    source: str = Field(description="where the engine's documented option list comes from")
