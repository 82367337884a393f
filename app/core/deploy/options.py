"""The engines' documented launch options, shipped as data (what a launch command may use).

Each table lists the options Chunkwise emits, every one checked against the engine's own
definition of its command line (read through the project's search tool, facts only):

- vLLM ``vllm serve``: ``vllm/engine/arg_utils.py`` (``EngineArgs.add_cli_args``: the
  ``ParallelConfig``, ``CacheConfig``, ``SchedulerConfig`` and ``VllmConfig`` groups,
  vllm-project/vllm) and the ``vllm serve`` usage of docs.vllm.ai "Engine Arguments"
  (``--host``, ``--port``, ``--quantization``, ``--trust-remote-code``, the
  ``--kv-cache-dtype`` choices).
- SGLang ``python3 -m sglang.launch_server``: ``python/sglang/srt/server_args.py``
  (``ServerArgs``: a field ``tp_size`` is the flag ``--tp-size``, aliases as declared;
  sgl-project/sglang@001067f).
- TensorRT-LLM ``trtllm-serve``: ``tensorrt_llm/commands/serve.py`` (the click options of
  ``serve``; NVIDIA/TensorRT-LLM@00209af) and, for the ``--extra_llm_api_options`` YAML,
  ``tensorrt_llm/llmapi/llm_args.py`` (``TorchLlmArgs``, ``KvCacheConfig``,
  ``CudaGraphConfig``, ``MTPDecodingConfig``) with the curated configs of the TensorRT-LLM docs.

Tests build an ``argparse`` parser from each table and parse every emitted command with it,
so a flag that is not listed here (and so not documented) cannot be emitted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineOption:
    """One documented option: its spellings, whether it takes a value, the allowed values."""

    names: tuple[str, ...]
    takes_value: bool = True
    choices: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineCli:
    """An engine's launch program, how it takes the model, and its documented options."""

    engine: str
    program: tuple[str, ...]
    #: The model is the first positional argument (else the ``--model-path`` style option).
    positional_model: bool
    options: tuple[EngineOption, ...]
    source: str
    image: str
    health_path: str

    def option(self, name: str) -> EngineOption:
        """The option spelled ``name`` (any of its documented spellings)."""
        for opt in self.options:
            if name in opt.names:
                return opt
        raise KeyError(name)


def _flag(*names: str) -> EngineOption:
    return EngineOption(names=names, takes_value=False)


def _value(*names: str, choices: tuple[str, ...] | None = None) -> EngineOption:
    return EngineOption(names=names, choices=choices)


VLLM_KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
SGLANG_KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16")
TRTLLM_BACKENDS = ("pytorch", "tensorrt", "_autodeploy", "trt")

VLLM_CLI = EngineCli(
    engine="vllm",
    program=("vllm", "serve"),
    positional_model=True,
    options=(
        _value("--host"),
        _value("--port"),
        _value("--tensor-parallel-size", "-tp"),
        _value("--pipeline-parallel-size", "-pp"),
        _value("--data-parallel-size", "-dp"),
        _flag("--enable-expert-parallel"),
        _value("--max-num-batched-tokens"),
        _value("--max-num-seqs"),
        _value("--gpu-memory-utilization"),
        _value("--kv-cache-dtype", choices=VLLM_KV_CACHE_DTYPES),
        _value("--quantization", "-q"),
        _value("--speculative-config"),
        _flag("--trust-remote-code"),
        _flag("--async-scheduling"),
        # ModelConfig.enforce_eager: no graphs, every operator launched from the host
        _flag("--enforce-eager"),
        # VllmConfig's compilation config as JSON (vLLM-Ascend's tutorials launch with
        # --compilation-config '{"cudagraph_mode": "FULL_DECODE_ONLY"}')
        _value("--compilation-config"),
    ),
    source="vllm-project/vllm vllm/engine/arg_utils.py (EngineArgs.add_cli_args); "
    "docs.vllm.ai Engine Arguments (vllm serve usage)",
    image="vllm/vllm-openai:latest",
    health_path="/health",
)

SGLANG_CLI = EngineCli(
    engine="sglang",
    program=("python3", "-m", "sglang.launch_server"),
    positional_model=False,
    options=(
        _value("--model-path", "--model"),
        _value("--host"),
        _value("--port"),
        _value("--tp-size", "--tensor-parallel-size"),
        _value("--pp-size", "--pipeline-parallel-size"),
        _value("--dp-size", "--data-parallel-size"),
        _flag("--enable-dp-attention"),
        _value("--ep-size", "--expert-parallel-size", "--ep"),
        _value("--ep-num-redundant-experts"),
        _value("--chunked-prefill-size"),
        _value("--max-running-requests"),
        _value("--mem-fraction-static"),
        _value("--kv-cache-dtype", choices=SGLANG_KV_CACHE_DTYPES),
        _value("--quantization"),
        _value("--speculative-algorithm"),
        _value("--speculative-num-steps"),
        _value("--speculative-eagle-topk"),
        _value("--speculative-num-draft-tokens"),
        _flag("--disable-overlap-schedule"),
        _flag("--trust-remote-code"),
        # The NPU backend's: ServerArgs.device ("npu") and attention_backend ("ascend"),
        # as every launch of SGLang's Ascend NPU docs passes them.
        _value("--device"),
        _value("--attention-backend"),
    ),
    source="sgl-project/sglang@001067f python/sglang/srt/server_args.py (ServerArgs); "
    "docs.sglang.io Ascend NPUs (launch examples)",
    image="lmsysorg/sglang:latest",
    health_path="/health",
)

TRTLLM_CLI = EngineCli(
    engine="trtllm",
    program=("trtllm-serve",),
    positional_model=True,
    options=(
        _value("--host"),
        _value("--port"),
        _value("--backend", choices=TRTLLM_BACKENDS),
        _value("--max_batch_size"),
        _value("--max_num_tokens"),
        _value("--max_seq_len"),
        _value("--tensor_parallel_size", "--tp_size"),
        _value("--pipeline_parallel_size", "--pp_size"),
        _value("--moe_expert_parallel_size", "--ep_size"),
        _value("--free_gpu_memory_fraction", "--kv_cache_free_gpu_memory_fraction"),
        _value("--config", "--extra_llm_api_options"),
        _flag("--trust_remote_code"),
    ),
    source="NVIDIA/TensorRT-LLM@00209af tensorrt_llm/commands/serve.py (trtllm-serve serve)",
    image="nvcr.io/nvidia/tensorrt-llm/release:latest",
    health_path="/health",
)

#: The documented keys of TensorRT-LLM's ``--extra_llm_api_options`` YAML that Chunkwise
#: writes, by section (``""``: top level). Source: ``tensorrt_llm/llmapi/llm_args.py``.
TRTLLM_EXTRA_OPTION_KEYS: Mapping[str, frozenset[str]] = {
    "": frozenset(
        {
            "enable_attention_dp",
            "disable_overlap_scheduler",
            "kv_cache_config",
            "cuda_graph_config",
            "speculative_config",
        }
    ),
    "kv_cache_config": frozenset({"dtype", "free_gpu_memory_fraction"}),
    "cuda_graph_config": frozenset({"enable_padding", "max_batch_size"}),
    "speculative_config": frozenset({"decoding_type", "num_nextn_predict_layers"}),
}

ENGINE_CLIS: Mapping[str, EngineCli] = {
    cli.engine: cli for cli in (VLLM_CLI, SGLANG_CLI, TRTLLM_CLI)
}
#: The engines a launch configuration can be emitted for (``msmodeling`` is a model, not an
#: engine one can launch).
LAUNCH_ENGINES: tuple[str, ...] = tuple(ENGINE_CLIS)
