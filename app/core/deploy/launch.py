"""A result row's engine launch: the command line, its config file and the replica count.

A Chunkwise layout ``tp x dp x pp`` (``ep`` experts ways) runs ``dp`` independent engine
instances of ``tp * pp`` devices each, unless its data-parallel ranks are coupled (a MoE model
whose experts span more ranks than one replica has, ``ep > tp``): then the ``dp`` ranks are one
engine instance with data-parallel attention and expert parallelism over all ``tp * dp * pp``
devices. Replicas are the row's devices over the devices of one instance.

Per-rank values (the row's token budget and batch size are per data-parallel rank) are spelled
as each engine reads them: vLLM and TensorRT-LLM take them per rank, SGLang with DP attention
takes ``--chunked-prefill-size`` and ``--max-running-requests`` for the whole instance and
divides them by ``--dp-size`` (``ServerArgs._handle_data_parallelism``).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from app.core.deploy.manifests import CONFIG_DIR, compose_text, kubernetes_text, resource_name
from app.core.deploy.options import ENGINE_CLIS, LAUNCH_ENGINES, EngineCli
from app.core.deploy.platforms import CUDA, Platform
from app.core.errors import InvalidParameterError, UnknownEngineError
from app.core.parallel import ParallelLayout

KvDtype = Literal["auto", "fp8"]
#: The port every emitted server listens on unless the request says otherwise (vLLM's and
#: trtllm-serve's default; SGLang's own default 30000 is overridden so all three match).
DEFAULT_PORT = 8000
MAX_PORT = 65535
#: The host every emitted server binds (inside a container: every interface).
BIND_HOST = "0.0.0.0"
TRTLLM_EXTRA_OPTIONS_FILE = "extra-llm-api-options.yaml"
#: vLLM's speculative method for a model's own MTP layers (``--speculative-config``).
VLLM_MTP_METHOD = "mtp"
#: SGLang runs a model's MTP layers through its EAGLE worker (``--speculative-algorithm``),
#: one draft token per step along a single chain (top-k 1).
SGLANG_MTP_ALGORITHM = "EAGLE"
SGLANG_MTP_TOPK = 1
TRTLLM_MTP_DECODING = "MTP"
#: SGLang's FP8 KV-cache spelling (it has no bare ``fp8``).
SGLANG_FP8_KV = "fp8_e4m3"
#: SGLang's device and attention backend on an Ascend NPU (``ServerArgs.device``,
#: ``attention_backend``; every launch in SGLang's Ascend NPU docs passes both).
SGLANG_NPU_DEVICE = "npu"
SGLANG_NPU_ATTENTION_BACKEND = "ascend"
#: What a model id or path may not look like: an option (``--trust-remote-code``) or text with
#: whitespace or control characters, which no Hugging Face id or sane path has.
_NOT_A_MODEL_ID = re.compile(r"^-|[\s\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchSpec:
    """Everything a launch needs, resolved (the service fills it from a row and a profile)."""

    engine: str
    model: str
    layout: ParallelLayout
    #: The ``dp`` ranks are one instance (DP attention + EP), not ``dp`` replicas.
    coupled: bool
    num_devices: int
    #: Token budget of one step of one data-parallel rank.
    max_batched_tokens: int
    #: Requests one data-parallel rank runs at once (``None``: the engine's own rule).
    max_running_requests: int | None
    #: vLLM ``gpu_memory_utilization`` / SGLang ``mem_fraction_static`` / TensorRT-LLM
    #: ``free_gpu_memory_fraction``, as the engine's profile sizes its KV pool.
    memory_fraction: float
    kv_cache_dtype: KvDtype = "auto"
    #: The engines' ``--quantization`` value (``None``: the checkpoint's own).
    weight_quantization: str | None = None
    num_mtp_tokens: int = 0
    overlap_scheduling: bool = False
    #: Largest decode batch captured as a CUDA graph (TensorRT-LLM's ``cuda_graph_config``).
    cuda_graph_max_batch: int | None = None
    #: vLLM-Ascend's ACL graph mode (``npu_graph_mode``; None: the image's default).
    npu_graph_mode: str | None = None
    #: MoE expert slots beyond the routed experts (``redundant_experts``; SGLang's
    #: ``--ep-num-redundant-experts``, the only engine Chunkwise emits them for).
    redundant_experts: int = 0
    port: int = DEFAULT_PORT
    image: str | None = None
    name: str | None = None
    #: The accelerator platform (image, device plugin, mounts, environment).
    platform: Platform = CUDA

    def __post_init__(self) -> None:
        if self.engine not in ENGINE_CLIS:
            raise UnknownEngineError(self.engine, LAUNCH_ENGINES)
        if not self.model.strip() or _NOT_A_MODEL_ID.search(self.model):
            raise InvalidParameterError(
                "model",
                self.model,
                "a model id or path to serve (not starting with '-', no whitespace)",
            )
        for name in ("num_devices", "max_batched_tokens", "max_running_requests"):
            value = getattr(self, name)
            if value is None and name == "max_running_requests":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidParameterError(name, value, "an integer >= 1")
        if not 0.0 < self.memory_fraction <= 1.0:
            raise InvalidParameterError("memory_fraction", self.memory_fraction, "in (0, 1]")
        if self.num_mtp_tokens < 0:
            raise InvalidParameterError("num_mtp_tokens", self.num_mtp_tokens, ">= 0")
        if self.redundant_experts and self.engine != "sglang":
            raise InvalidParameterError(
                "engine_options.redundant_experts",
                self.redundant_experts,
                f"0 for {self.engine}: redundant expert slots are emitted for sglang only "
                "(--ep-num-redundant-experts)",
            )
        if not 1 <= self.port <= MAX_PORT:
            raise InvalidParameterError("port", self.port, f"in [1, {MAX_PORT}]")
        per_instance = self.devices_per_instance
        if self.num_devices % per_instance:
            raise InvalidParameterError(
                "num_devices",
                self.num_devices,
                f"a multiple of the {per_instance} devices of one engine instance "
                f"({self.layout.label})",
            )

    @property
    def devices_per_instance(self) -> int:
        layout = self.layout
        return layout.num_devices if self.coupled else layout.tp * layout.pp

    @property
    def replicas(self) -> int:
        return self.num_devices // self.devices_per_instance

    @property
    def instance_dp(self) -> int:
        """Data-parallel ranks inside one instance (1 unless coupled)."""
        return self.layout.dp if self.coupled else 1


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchConfig:
    """An engine launch for one row: the command, its files, replicas and manifests."""

    engine: str
    argv: tuple[str, ...]
    files: Mapping[str, str]
    replicas: int
    devices_per_replica: int
    kubernetes: str
    compose: str
    #: Each emitted setting and the value it carries (flag or YAML key -> value).
    settings: Mapping[str, str]
    notes: tuple[str, ...] = field(default=())
    source: str = ""

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


@dataclass(slots=True)
class _Emit:
    """A command line under construction, with the settings it carries and notes."""

    argv: list[str]
    settings: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, flag: str, value: object | None = None) -> None:
        self.argv.append(flag)
        if value is None:
            self.settings[flag] = "true"
            return
        text = _text(value)
        self.argv.append(text)
        self.settings[flag] = text


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _start(cli: EngineCli, spec: LaunchSpec) -> _Emit:
    emit = _Emit(argv=list(cli.program))
    if cli.positional_model:
        emit.argv.append(spec.model)
    else:
        emit.add("--model-path", spec.model)
    emit.add("--host", BIND_HOST)
    emit.add("--port", spec.port)
    return emit


def _vllm(spec: LaunchSpec) -> tuple[_Emit, dict[str, str]]:
    layout = spec.layout
    emit = _start(ENGINE_CLIS["vllm"], spec)
    emit.add("--tensor-parallel-size", layout.tp)
    emit.add("--pipeline-parallel-size", layout.pp)
    if spec.coupled:
        emit.add("--data-parallel-size", layout.dp)
    if layout.ep > 1:
        emit.add("--enable-expert-parallel")
        experts_ways = layout.tp * spec.instance_dp
        if layout.ep != experts_ways:
            emit.notes.append(
                f"vLLM splits the experts over tensor x data parallel ranks ({experts_ways}), "
                f"the row assumed EP{layout.ep}"
            )
    emit.add("--max-num-batched-tokens", spec.max_batched_tokens)
    if spec.max_running_requests is not None:
        emit.add("--max-num-seqs", spec.max_running_requests)
    emit.add("--gpu-memory-utilization", spec.memory_fraction)
    emit.add("--kv-cache-dtype", spec.kv_cache_dtype)
    if spec.weight_quantization is not None:
        emit.add("--quantization", spec.weight_quantization)
    if spec.num_mtp_tokens:
        config = {"method": VLLM_MTP_METHOD, "num_speculative_tokens": spec.num_mtp_tokens}
        emit.add("--speculative-config", json.dumps(config, separators=(",", ":")))
    if spec.overlap_scheduling:
        emit.add("--async-scheduling")
    if spec.npu_graph_mode == "eager":
        emit.add("--enforce-eager")
    elif spec.npu_graph_mode is not None:
        config = {"cudagraph_mode": spec.npu_graph_mode.upper()}
        emit.add("--compilation-config", json.dumps(config, separators=(",", ":")))
    return emit, {}


def _sglang(spec: LaunchSpec) -> tuple[_Emit, dict[str, str]]:
    layout = spec.layout
    dp = spec.instance_dp
    emit = _start(ENGINE_CLIS["sglang"], spec)
    if spec.platform.is_npu:
        emit.add("--device", SGLANG_NPU_DEVICE)
        emit.add("--attention-backend", SGLANG_NPU_ATTENTION_BACKEND)
    # With DP attention SGLang's --tp-size counts every rank of the instance.
    emit.add("--tp-size", layout.tp * dp)
    emit.add("--pp-size", layout.pp)
    if spec.coupled:
        emit.add("--dp-size", dp)
        emit.add("--enable-dp-attention")
    if layout.ep > 1:
        emit.add("--ep-size", layout.ep)
    if spec.redundant_experts:
        emit.add("--ep-num-redundant-experts", spec.redundant_experts)
    # Instance-wide with DP attention (SGLang divides both by --dp-size).
    emit.add("--chunked-prefill-size", spec.max_batched_tokens * dp)
    if spec.max_running_requests is not None:
        emit.add("--max-running-requests", spec.max_running_requests * dp)
    emit.add("--mem-fraction-static", spec.memory_fraction)
    emit.add("--kv-cache-dtype", SGLANG_FP8_KV if spec.kv_cache_dtype == "fp8" else "auto")
    if spec.weight_quantization is not None:
        emit.add("--quantization", spec.weight_quantization)
    if spec.num_mtp_tokens:
        emit.add("--speculative-algorithm", SGLANG_MTP_ALGORITHM)
        emit.add("--speculative-num-steps", spec.num_mtp_tokens)
        emit.add("--speculative-eagle-topk", SGLANG_MTP_TOPK)
        emit.add("--speculative-num-draft-tokens", spec.num_mtp_tokens + 1)
    if not spec.overlap_scheduling:
        emit.add("--disable-overlap-schedule")
    return emit, {}


def trtllm_extra_options(spec: LaunchSpec) -> str:
    """TensorRT-LLM's ``--extra_llm_api_options`` YAML for ``spec`` (written by hand)."""
    caps = [c for c in (spec.max_running_requests, spec.cuda_graph_max_batch) if c is not None]
    graph_batch = min(caps) if caps else None
    lines = [
        f"enable_attention_dp: {_text(spec.coupled)}",
        f"disable_overlap_scheduler: {_text(not spec.overlap_scheduling)}",
        "kv_cache_config:",
        f"  dtype: {spec.kv_cache_dtype}",
        f"  free_gpu_memory_fraction: {_text(spec.memory_fraction)}",
    ]
    if graph_batch is None:  # the engine's default graph batch sizes
        pass
    elif graph_batch > 0:
        lines += [
            "cuda_graph_config:",
            "  enable_padding: true",
            f"  max_batch_size: {graph_batch}",
        ]
    else:  # the profile runs every decode batch eagerly
        lines.append("cuda_graph_config: null")
    if spec.num_mtp_tokens:
        lines += [
            "speculative_config:",
            f"  decoding_type: {TRTLLM_MTP_DECODING}",
            f"  num_nextn_predict_layers: {spec.num_mtp_tokens}",
        ]
    return "\n".join(lines) + "\n"


def _trtllm(spec: LaunchSpec) -> tuple[_Emit, dict[str, str]]:
    layout = spec.layout
    emit = _start(ENGINE_CLIS["trtllm"], spec)
    emit.add("--backend", "pytorch")
    # With attention DP, TensorRT-LLM's tensor-parallel size counts every rank.
    emit.add("--tp_size", layout.tp * spec.instance_dp)
    emit.add("--pp_size", layout.pp)
    emit.add("--ep_size", layout.ep)
    if spec.max_running_requests is not None:
        emit.add("--max_batch_size", spec.max_running_requests)
    emit.add("--max_num_tokens", spec.max_batched_tokens)
    emit.add("--kv_cache_free_gpu_memory_fraction", spec.memory_fraction)
    emit.add("--extra_llm_api_options", f"{CONFIG_DIR}/{TRTLLM_EXTRA_OPTIONS_FILE}")
    if spec.weight_quantization is not None:
        emit.notes.append(
            "TensorRT-LLM reads the quantization from the checkpoint: serve a pre-quantized "
            f"({spec.weight_quantization}) checkpoint"
        )
    return emit, {TRTLLM_EXTRA_OPTIONS_FILE: trtllm_extra_options(spec)}


_BUILDERS = {"vllm": _vllm, "sglang": _sglang, "trtllm": _trtllm}


def build_launch_config(spec: LaunchSpec, *, notes: tuple[str, ...] = ()) -> LaunchConfig:
    """The launch configuration of ``spec``: argv, files, replicas and the manifests."""
    cli = ENGINE_CLIS[spec.engine]
    emit, files = _BUILDERS[spec.engine](spec)
    argv = tuple(emit.argv)
    name = resource_name(spec.name or f"{spec.model}-{spec.engine}")
    platform = spec.platform
    image = spec.image or platform.images.get(spec.engine, cli.image)
    env = platform.environment(spec.layout.ep > 1)
    return LaunchConfig(
        engine=spec.engine,
        argv=argv,
        files=files,
        replicas=spec.replicas,
        devices_per_replica=spec.devices_per_instance,
        kubernetes=kubernetes_text(
            name=name,
            image=image,
            argv=argv,
            port=spec.port,
            devices=spec.devices_per_instance,
            replicas=spec.replicas,
            health_path=cli.health_path,
            files=files,
            platform=platform,
            env=env,
        ),
        compose=compose_text(
            name=name,
            image=image,
            argv=argv,
            port=spec.port,
            devices=spec.devices_per_instance,
            replicas=spec.replicas,
            files=files,
            platform=platform,
            env=env,
        ),
        settings=emit.settings,
        notes=(*notes, *emit.notes, *platform.notes),
        source=cli.source,
    )
