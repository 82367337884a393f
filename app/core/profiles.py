"""Engine profiles: the serving engine's defaults that move the numbers, by name.

A profile says how an engine (vLLM, SGLang, TensorRT-LLM) runs a deployment when the user does
not say otherwise: its step policy, token budget and running cap, how its KV pool is sized, the
KV-cache dtype it picks for an FP8/FP4 checkpoint, CUDA-graph decode, overlap scheduling, the
host time of an engine iteration and the front-end time of a request. ``msmodeling`` is the
RFC's semantics exactly (burst workload, ``DecodeFirstWithSlack``, a fixed 10 GB reserve, no
host or front-end time).

Every default is documented with its source in ``docs/engine_defaults.md`` (the engines' code
and docs); the fitted ones (host and front-end time) say what they were fitted on. Any value
can be overridden per request (:meth:`EngineProfile.with_overrides`), bounds in
:data:`OVERRIDE_BOUNDS`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypedDict, get_args

from app.core import limits
from app.core.errors import InvalidParameterError, UnknownEngineError
from app.core.scheduler import SCHEDULERS, EnginePolicy, Scheduler, make_scheduler
from app.core.spec import STREAM_FIRST_TOKEN_RULES, StreamFirstToken

KvPoolRule = Literal["total_fraction", "static_fraction", "free_fraction", "reserve"]
KV_POOL_RULES: tuple[KvPoolRule, ...] = (
    "total_fraction",
    "static_fraction",
    "free_fraction",
    "reserve",
)
KvCacheDtype = Literal["auto", "fp8"]
KV_CACHE_DTYPES: tuple[KvCacheDtype, ...] = ("auto", "fp8")
BudgetRule = Literal["vllm", "sglang", "fixed"]
#: The activations an engine's MXFP4 (OCP MX, weight-only 4-bit) GEMMs run with, which sets
#: their matrix rate: ``fp4`` the device's FP4 path (the RFC's reading of an FP4 format),
#: ``fp8`` MXFP8 activations on a block-scaled FP8 x FP4 matrix unit (a device with an FP4
#: peak; one without, such as Hopper, dequantizes to BF16 instead), ``bf16`` weights dequantized
#: into BF16 matrix operations on every device.
Mxfp4Activation = Literal["fp4", "fp8", "bf16"]
MXFP4_ACTIVATIONS: tuple[Mxfp4Activation, ...] = ("fp4", "fp8", "bf16")
#: The kernel MXFP4 MoE experts run on: ``default`` the engine's own choice for the device (the
#: measured MXFP4 table of its activations), ``marlin`` Marlin's weight-only kernel with BF16
#: activations (vLLM's ``VLLM_MXFP4_USE_MARLIN=1``; its own measured curve, about 3x slower per
#: flop at large M than the OAI Triton kernel vLLM picks on Hopper otherwise).
Mxfp4MoeKernel = Literal["default", "marlin"]
MXFP4_MOE_KERNELS: tuple[Mxfp4MoeKernel, ...] = ("default", "marlin")
#: vLLM-Ascend's ACL graph modes (its ``cudagraph_mode``): ``full_and_piecewise`` replays a
#: decode-only step as one full graph and a step with a prefill as graph pieces split at
#: attention (the default since v0.21.0rc1); ``piecewise`` splits every step at attention (the
#: default of v0.11.0 to v0.20); ``full_decode_only`` a full graph for decode-only steps and
#: eager execution for the others (the tutorials' tuned launches); ``eager`` runs every step
#: eagerly (``--enforce-eager``, and every release before v0.9.0rc1).
NpuGraphMode = Literal["full_and_piecewise", "piecewise", "full_decode_only", "eager"]
NPU_GRAPH_MODES: tuple[NpuGraphMode, ...] = get_args(NpuGraphMode)

GIB_BYTES = 2**30
GB_BYTES = 1e9
MIB_PER_GIB = 1024.0

#: vLLM's OpenAI-server batch defaults (``EngineArgs.get_batch_defaults``): devices with at
#: least 70 GiB other than the A100 get 8192 tokens / 1024 sequences, the others 2048 / 256.
VLLM_LARGE_DEVICE_BYTES = 70 * GIB_BYTES
VLLM_LARGE_BUDGET_TOKENS = 8192
VLLM_SMALL_BUDGET_TOKENS = 2048
VLLM_LARGE_MAX_NUM_SEQS = 1024
VLLM_SMALL_MAX_NUM_SEQS = 256
#: vLLM captures decode CUDA graphs up to ``min(2 * max_num_seqs, 512)`` sequences
#: (``set_cudagraph_sizes``); larger decode batches run eagerly.
VLLM_MAX_GRAPH_BATCH = 512
#: vLLM's ``gpu_memory_utilization`` default: the share of TOTAL device memory the instance
#: may use (weights, activations and graphs come out of it, the rest is the KV pool).
VLLM_GPU_MEMORY_UTILIZATION = 0.9

#: SGLang memory-dependent defaults (``ServerArgs._handle_gpu_memory_settings``): per device
#: memory upper bound (GiB) -> (``chunked_prefill_size``, ``cuda_graph_max_bs`` at TP < 4,
#: at TP >= 4). The last row is every larger device (B200, B300, MI300).
SGLANG_MEMORY_TABLE: tuple[tuple[float, int, int, int], ...] = (
    (20.0, 2048, 8, 8),
    (35.0, 2048, 24, 80),
    (60.0, 4096, 32, 160),
    (90.0, 8192, 256, 512),
    (160.0, 8192, 256, 512),
    (math.inf, 16384, 512, 512),
)
#: Device vendors SGLang runs through its NPU (Ascend) backend.
NPU_VENDORS = frozenset({"huawei", "ascend"})
#: SGLang's NPU backend defaults (``hardware_backend/npu/utils.py``,
#: ``set_default_server_args``, sgl-project/sglang@019f013): NPU memory upper bound (GiB,
#: inclusive: ``npu_mem <= 64 * 1024``) -> (``chunked_prefill_size``, decode graph
#: ``max_bs`` at TP < 4, at TP >= 4). They are set before the memory settings, so the same
#: reserve formula below then runs with them; a larger NPU takes the GPU table.
SGLANG_NPU_MEMORY_TABLE: tuple[tuple[float, int, int, int], ...] = (
    (32.0, 4096, 16, 64),
    (64.0, 8192, 64, 256),
)
#: Rounding of a device's memory in GiB before an inclusive bound is compared (a catalog
#: 64 GiB device is 64 GiB, not 64 GiB plus a float's last bit).
_GIB_DIGITS = 6
#: SGLang's reserve for activations and graphs when ``mem_fraction_static`` is not given:
#: ``512 + max(chunked_prefill_size, 2048) * 1.5 + cuda_graph_max_bs * 2 + tp * pp / 8 * 1024``
#: MiB, plus ``cuda_graph_max_bs * dp * 3`` with DP attention, at least 10 GiB on devices over
#: 60 GiB; the static fraction is ``(memory - reserve) / memory``.
SGLANG_BASE_RESERVE_MIB = 512.0
SGLANG_PREFILL_RESERVE_PER_TOKEN_MIB = 1.5
SGLANG_MIN_PREFILL_RESERVE_TOKENS = 2048
SGLANG_GRAPH_RESERVE_PER_BS_MIB = 2.0
SGLANG_DP_GRAPH_RESERVE_PER_BS_MIB = 3.0
SGLANG_TP_RESERVE_MIB_PER_8_RANKS = 1024.0
SGLANG_LARGE_DEVICE_GIB = 60.0
SGLANG_LARGE_DEVICE_MIN_RESERVE_MIB = 10 * 1024.0

#: TensorRT-LLM's defaults (``llm_args``): ``max_num_tokens`` 8192, ``max_batch_size`` 2048,
#: the KV pool ``free_gpu_memory_fraction`` 0.9 of the memory left after the weights and the
#: activations.
TRTLLM_MAX_NUM_TOKENS = 8192
TRTLLM_MAX_BATCH_SIZE = 2048
TRTLLM_KV_FREE_MEMORY_FRACTION = 0.9
#: Device memory an engine process holds outside weights, activations and KV blocks: the CUDA
#: context, NCCL and cuBLAS workspaces and captured CUDA graphs (~3 GB per device).
RUNTIME_MEMORY_GB = 3.0
#: msmodeling's fixed reserve per device (the RFC runner's default).
MSMODELING_RESERVED_MEMORY_GB = 10.0
#: msmodeling's throughput optimizer defaults (``cli/inference/throughput_optimizer.py``):
#: ``--quantize-linear-action W8A8_DYNAMIC`` and ``--max-prefill-tokens 8192``
#: (``serving_cast/service/utils.py``: ``HISTORICAL_DEFAULT_MAX_BATCHED_TOKENS = 8192``).
MSMODELING_LINEAR_QUANTIZATION = "W8A8_DYNAMIC"
MSMODELING_MAX_BATCHED_TOKENS = 8192

#: Host time of one TensorRT-LLM (PyTorch backend) iteration that the GPU waits for even with
#: the overlap scheduler (sampled tokens copied back, stop checks, response handling). Fitted
#: once on the 758 TensorRT-LLM serving TPOT rows jointly with the NVIDIA graph-kernel cost
#: (3 µs): 0.5 / 0.75 / 1 / 1.25 ms -> TPOT median APE 9.1 / 8.8 / 9.6 / 10.6 %; 0.75 ms taken.
TRTLLM_STEP_SYNC_MS = 0.75
#: Host time of one vLLM V1 engine iteration (scheduling, input preparation, sampling and
#: output processing), exposed because async scheduling is off by default. Fitted once on
#: the 415 predicted vLLM serving TPOT rows (0.11-0.19, H100/H200/B200/B300): 0 / 0.6 / 0.8 /
#: 1 / 1.2 ms -> TPOT median APE 17.0 / 9.7 / 9.3 / 10.1 / 11.6 %, median signed error
#: -13.1 / -3.5 / -0.3 / +3.3 / +5.9 %; 0.8 ms taken.
VLLM_STEP_HOST_MS = 0.8
#: Host time of one SGLang (0.5.x) iteration the GPU waits for even with the overlap scheduler.
#: Fitted once on the 548 predicted SGLang serving TPOT rows (Qwen3.5-397B, DeepSeek-V3, GLM-5
#: on B200/B300/H200): 0 / 1 / 1.5 / 2 / 2.5 / 3 ms -> TPOT median APE 23.8 / 18.4 / 17.3 / 15.4
#: / 15.3 / 15.2 %, median signed error -21.6 / -14.7 / -10.4 / -7.0 / -3.4 / +0.1 %; 2.5 ms
#: taken. Qwen3.5 and DeepSeek-V3 then land within +-4 % signed on every device; GLM-5 keeps a
#: gap of its own (-19 to -22 %: its sparse-attention decode).
SGLANG_STEP_SYNC_MS = 2.5
#: Front-end time per prompt token, microseconds: the server tokenizing the prompt text before
#: the engine sees it (vLLM's API server, SGLang's TokenizerManager and trtllm-serve all encode
#: with Hugging Face ``tokenizers``). Measured, not fitted: ``tokenizers`` 0.23.3 encoding
#: benchmark-style random prompts (consecutive vocabulary ids from a random offset, decoded and
#: re-encoded, the way vLLM's and InferenceX's ``sample_random_requests`` build them) with a
#: 131k-entry tiktoken-style BPE vocabulary (Mistral's Tekken, shipped in the
#: ``mistral-common`` wheel): median 1.8-2.0 us per token from 1k to 8k tokens on one core of
#: the development machine (``python -m scripts.tokenize_bench --prompts 30``,
#: docs/engine_defaults.md "Front end"); the fastokens project reports ``tokenizers`` 0.x at
#: about 3 MB/s on real text (crusoecloud/fastokens ``bench/README.md``), 2.2 us per token at
#: those prompts' 6.7 bytes per token. 2 taken. Every engine pays it; 0 only for a caller who
#: sends token ids.
FRONTEND_US_PER_TOKEN = 2.0
#: Time per request vLLM's API server holds a text prompt before encoding it: the OpenAI
#: server's renderer encodes through ``AsyncMicrobatchTokenizer`` (``vllm/utils/async_utils.py``,
#: from vllm-project/vllm#19334, 2025), whose encode loop takes the first queued prompt and then
#: waits up to ``batch_wait_timeout_s = 0.002`` for more (``max_batch_size = 32``) before one
#: tokenizer call. A benchmark client's re-submissions arrive one at a time (milliseconds to
#: seconds apart), so each waits the whole window. Read in the 0.11.2, 0.18.0 and 0.19.0 wheels
#: (0.11.2: ``entrypoints/renderer.py``; 0.18 / 0.19: ``renderers/base.py``,
#: ``_tokenize_prompt_async``); vllm-project/vllm#44172 ("adds about 2ms of frontend latency for
#: low-concurrency ... workloads") and #45759 (2026-06, removes the tokenizer: "uses a 2ms
#: wait_timeout, which is too large ... the normal time for most tokenizer.encode calls is
#: ~0.1ms") say the same. Not SGLang's (its dynamic batch tokenizer is off by default) nor
#: TensorRT-LLM's.
VLLM_TOKENIZER_BATCH_WAIT_MS = 2.0
#: Steps between a closed-loop finish and its successor reaching the scheduler under async or
#: overlap scheduling: the finishing token leaves the engine when its step ends, the next step
#: already started without the successor (the engine never waits for a client), and the step
#: after it was formed while that one runs, so the successor is scheduled into the third step
#: after the finish. vLLM: async scheduling by default (``SchedulerConfig.async_scheduling``
#: ``None`` -> on where supported, vllm-project/vllm#27614, in the builds of the measured rows,
#: 0.15-0.19); SGLang: ``event_loop_overlap`` (the default; the next batch is scheduled
#: before the last one's result is processed); TensorRT-LLM: the PyTorch executor's overlap
#: scheduler (``disable_overlap_scheduler: false`` by default). An engine that schedules each
#: step at the end of the one before waits one step instead (1).
OVERLAP_RESUBMIT_STEPS = 2
#: Host time per model layer of a forward SGLang runs eagerly: every prefill (extend) batch of
#: the builds the measured rows name (0.5.9: ``enable_piecewise_cuda_graph`` off by default;
#: 0.5.10: piecewise prefill graphs on by default but switched off by ``--enable-symm-mem``,
#: speculative decoding, DP attention and DeepSeek-NSA models, ``_handle_piecewise_cuda_graph``).
#: A short eager prefill is host-bound: a one-token DeepSeek-V3 prefill took 82.6 ms eagerly and
#: 23.1 ms as a captured graph (sgl-project/sglang#12160), 82.6 / 61 layers = 1.35 ms per layer
#: of launch work the GPU waits for. Applied as ``max(layers x value, device time)`` per step
#: with a prefill (the overlap scheduler hides it behind a longer forward).
SGLANG_EAGER_LAYER_HOST_MS = 1.35

#: vLLM-Ascend's default graph mode (``vllm_ascend/platform.py``): vLLM's default
#: ``FULL_AND_PIECEWISE`` is kept since v0.21.0rc1 (vllm-project/vllm-ascend#9572, 1bb58b5);
#: v0.11.0 to v0.20 turned it into ``PIECEWISE`` ("Full graph is fully supported later").
VLLM_ASCEND_GRAPH_MODE: NpuGraphMode = "full_and_piecewise"
#: Host time per model layer of one vLLM-Ascend step replayed as a full ACL graph: before the
#: replay the host relaunches every attention layer's operator on an update stream
#: (``update_full_graph_params`` -> ``graph_task_update_begin`` / ``_end``) with the step's
#: sequence lengths, which ACL graphs cannot take from device memory. 0.18 ms from
#: vllm-project/vllm-ascend#4656 (v0.11.0rc2, TP 4, ``FULL_DECODE_ONLY``, one client, 15K
#: prompts): Qwen3-32B 38 ms and Qwen3-30B-A3B "20+" ms TPOT, 11.4 and 8.4 ms above the device
#: time and vLLM's step host time, 0.178 and 0.175 ms per layer (64 and 48 layers).
NPU_FULL_GRAPH_LAYER_HOST_MS = 0.18
#: Host time per model layer of a step replayed as ACL graph pieces split at attention: every
#: layer's attention runs eagerly between two piece replays (the splitting ops), two launches
#: per layer where a full graph needs one update. 0.28 ms from vllm-project/vllm-ascend#4395
#: (vLLM-Ascend 0.11.0, default ``PIECEWISE``, 910B4, 16 clients, 2K prompts): Qwen3-32B on 2
#: cards 66.7 ms and Qwen3-235B-A22B W8A8 on 8 cards 71.4 ms TPOT, 15.1 and 29.7 ms above the
#: device time and vLLM's step host time, 0.24 and 0.32 ms per layer (64 and 94 layers).
NPU_PIECEWISE_LAYER_HOST_MS = 0.28
#: Host time to dispatch one operator of the runner's forward plan in vLLM-Ascend's eager
#: execution (torch_npu's op dispatch and aclnn launch, with the tensor glue between the plan's
#: operators: ``--enforce-eager`` and every release before v0.9.0rc1). The host issues the
#: operators one by one while the NPU runs the ones already issued, so an eager step takes the
#: longer of the two, ``max(device, operators x this)`` (:meth:`EngineProfile.eager_step_ms`).
#: 0.1 ms from vLLM-Ascend's optimization guide (``optimization_and_tuning.md`` @ec9c48e, the
#: v0.8 era, V1 engine, card not stated, A2 taken): Qwen2.5-7B-Instruct TP 1 at one request
#: per second reads 27.56 ms mean TPOT against 16.5 ms of device time: host-bound, (27.56 -
#: vLLM's 0.8 ms step host time) / 256 operators per decode step = 0.105 ms.
NPU_EAGER_OP_HOST_MS = 0.1
#: Host time per Gated DeltaNet layer of a vLLM-Ascend step with a prefill, beyond the plan's
#: operators: the chunked prefill runs outside any ACL graph in every graph mode (vLLM splits
#: its graphs at the GDN attention op; ``FULL_DECODE_ONLY`` and ``--enforce-eager`` run the
#: whole step eagerly) and its Python path (chunk metadata, the state gather and scatter, the
#: q / k l2-norms and six Triton launches per layer) keeps the host busy while the NPU works.
#: 5.7 ms from huawei-csl/megagdn-pto (``outputs/data/prefill_20260502_145505``,
#: ``benchmarks/vllm_prefill/benchmark_prefill.py``: vLLM-Ascend v0.18.0rc1's offline ``LLM``,
#: ``enforce_eager``, TP 1 on one 910B2, one prompt of 512 / 1,024 tokens per call, median
#: ``first_token_latency`` of 10): Qwen3.5-0.8B (24 layers, 18 of them Gated DeltaNet) takes
#: 133.7 / 134.8 ms whatever the length, where the plan's 286 operators dispatch in 28.6 ms,
#: the device needs under 15 ms, vLLM's step host 0.8 ms and the tokenizer 1-2 ms:
#: (134.8 - 2.0 - 0.8 - 28.6) / 18 = 5.7 ms per GDN layer. Dispatch, so hidden behind a
#: longer forward: :meth:`EngineProfile.eager_step_ms`, ``RunnerServingModel._step_ms``.
NPU_GDN_PREFILL_LAYER_HOST_MS = 5.7

#: The activations MXFP4 MoE GEMMs (gpt-oss) run with, per engine (docs/engine_defaults.md):
#: vLLM's MXFP4 MoE backend order puts the BF16 FlashInfer kernels first on Hopper (SM90) and
#: Blackwell (SM100) unless an MXFP8 variable is set; TensorRT-LLM's default MoE backend is
#: TRTLLM with MXFP8 activations on Blackwell and TRITON with BF16 activations on Hopper (its
#: GPT-OSS deployment guide); SGLang's FlashInfer MXFP4 MoE runs at its ``default`` precision
#: (MXFP8 activations; ``bf16`` is the opt-out). ``fp8`` falls back to BF16 on a device without
#: a block-scaled FP4 matrix unit.
VLLM_MXFP4_ACTIVATION: Mxfp4Activation = "bf16"
TRTLLM_MXFP4_ACTIVATION: Mxfp4Activation = "fp8"
SGLANG_MXFP4_ACTIVATION: Mxfp4Activation = "fp8"


#: The served engines step without waiting for requests and read new ones only between steps:
#: vLLM V1 ``EngineCoreProc.run_busy_loop`` (``vllm/v1/engine/core.py``: ``_process_input_queue``
#: blocks on the input queue only while the engine has no work, else takes what already arrived,
#: then ``_process_engine_step``), SGLang ``Scheduler.event_loop_normal`` / ``event_loop_overlap``
#: (``python/sglang/srt/managers/scheduler.py``: ``recv_requests`` at the top of every
#: iteration, which never waits), TensorRT-LLM ``PyExecutor._executor_loop``
#: (``tensorrt_llm/_torch/pyexecutor/py_executor.py``: new requests fetched at the top of every
#: iteration). A benchmark client's re-submission (its last chunk streamed, read, the next
#: request sent, parsed and tokenized by the API server) takes milliseconds, so it reaches the
#: engine after the next step began: docs/engine.md, "Client turnaround" (which says why the
#: TensorRT-LLM profile was off for a while).
CLIENT_TURNAROUND = True


class SpecTerms(TypedDict):
    """The :class:`~app.core.spec.WorkloadSpec` fields an engine profile decides
    (:meth:`EngineProfile.spec_terms`): what the engine does around the forwards."""

    ttft_overhead_ms: float
    arrival_spread: float
    resubmit_steps: int
    client_turnaround: bool
    recv_interval: int
    batch_wait_iters: int
    batch_wait_max_tokens_ratio: float
    stream_interval: int
    stream_first_token: StreamFirstToken


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineProfile:
    """One engine's serving defaults (``None``: derived from the device, see the methods)."""

    name: str
    description: str
    scheduler: str
    workload: str
    budget_rule: BudgetRule
    max_batched_tokens: int | None = None
    #: ``vllm``: vLLM's device rule when ``max_num_seqs`` is unset; ``fixed``: the value (or
    #: none: the KV pool decides).
    max_num_seqs_rule: BudgetRule = "fixed"
    max_num_seqs: int | None = None
    kv_pool: KvPoolRule
    memory_fraction: float | None = None
    runtime_memory_gb: float = 0.0
    kv_cache_dtype: KvCacheDtype = "auto"
    cuda_graph_max_batch: int | None = None
    overlap_scheduling: bool = False
    step_host_ms: float = 0.0
    step_sync_ms: float = 0.0
    request_frontend_ms: float = 0.0
    #: Front-end time per prompt token, microseconds (the server tokenizing the prompt text
    #: before the engine sees it): added to TTFT with ``request_frontend_ms``
    #: (:meth:`frontend_ms`).
    frontend_us_per_token: float = 0.0
    #: Closed loops: steps between a request's finish and its successor reaching the scheduler
    #: (:class:`~app.core.engine.arrivals.ClosedLoop`): 1 for a scheduler that forms each step
    #: at the end of the one before, 2 when it forms it while the one before runs (async or
    #: overlap scheduling); 0: at once (lock step, the RFC's model).
    resubmit_steps: int = 0
    #: Closed loops: the share of the requests finishing at one step's end whose successors
    #: reach the engine a step later (:func:`app.core.engine.arrivals.late_share`); 0: the
    #: clients stay in lock step.
    arrival_spread: float = 0.0
    #: Closed loops: a client's re-submission reaches the engine a few milliseconds after the
    #: finish that prompted it, while the engine starts its next step at once and takes new
    #: requests only between steps: the re-submission waits for that step, and an idle engine
    #: starts on the first one alone (:class:`app.core.engine.arrivals.ClosedLoop`); off: every
    #: re-submission makes the next step (the RFC's lock step). :data:`CLIENT_TURNAROUND`.
    client_turnaround: bool = False
    #: SGLang's ``--scheduler-recv-interval``: the scheduler polls for new requests once per
    #: that many decode iterations (at once after a prefill iteration or when idle); a request
    #: arriving between polls waits for the next one. 1: every iteration (every engine's
    #: default).
    scheduler_recv_interval: int = 1
    #: ``--stream-interval``: a streaming request's tokens reach the client every that many
    #: tokens (1: each token, every engine's default); ``stream_first_token`` says when the
    #: first one does.
    stream_interval: int = 1
    stream_first_token: StreamFirstToken = "immediate"
    #: The activations MXFP4 GEMMs run with (``fp4``: the device's FP4 path, the RFC's reading).
    mxfp4_activation: Mxfp4Activation = "fp4"
    #: The kernel MXFP4 MoE experts run on (``marlin``: BF16 activations).
    mxfp4_moe_kernel: Mxfp4MoeKernel = "default"
    #: The linear layers' quantization when the request names none (None: the checkpoint's).
    linear_quantization: str | None = None
    #: vLLM-Ascend's ACL graph mode on an Ascend NPU (None: not an NPU build): what the host
    #: does per layer of every step (:meth:`layer_host_ms`).
    npu_graph_mode: NpuGraphMode | None = None
    #: Host time per model layer of a step with a prefill, which the engine runs without a
    #: captured graph, on a GPU build: the framework's per-operator launch work, which the
    #: GPU waits for when the forward's own work is shorter (:meth:`layer_host_ms`). 0: not
    #: modelled (vLLM compiles and graphs its prefill pieces).
    eager_layer_host_ms: float = 0.0
    #: TensorRT-LLM's ``batch_wait_timeout_iters`` and ``batch_wait_max_tokens_ratio`` (both
    #: default 0: off): new requests wait while decodes run, up to that many iterations or until
    #: their prompts and the decodes reach the ratio of ``max_num_tokens``
    #: (``PyExecutor._waiting_requests``; either at 0 stops every wait).
    batch_wait_iters: int = 0
    batch_wait_max_tokens_ratio: float = 0.0
    #: SGLang's ``--ep-num-redundant-experts``: MoE expert slots beyond the routed experts, each
    #: holding a replica of one, on every MoE layer of every worker (0: none, every engine's
    #: default; the runner's ``redundant_experts``, docs/engine.md "Redundant expert slots").
    redundant_experts: int = 0

    def __post_init__(self) -> None:
        for name, (low, high) in OVERRIDE_BOUNDS.items():
            value = getattr(self, name)
            if value is None or isinstance(value, bool):
                continue
            if not (isinstance(value, int | float) and math.isfinite(value)):
                raise InvalidParameterError(name, value, f"a number in [{low}, {high}]")
            if not low <= value <= high:
                raise InvalidParameterError(name, value, f"a number in [{low}, {high}]")
        if self.kv_pool not in KV_POOL_RULES:
            raise InvalidParameterError("kv_pool", self.kv_pool, f"one of {KV_POOL_RULES}")
        if self.scheduler not in SCHEDULERS:
            raise InvalidParameterError("scheduler", self.scheduler, f"one of {tuple(SCHEDULERS)}")
        if self.mxfp4_activation not in MXFP4_ACTIVATIONS:
            raise InvalidParameterError(
                "mxfp4_activation", self.mxfp4_activation, f"one of {MXFP4_ACTIVATIONS}"
            )
        if self.mxfp4_moe_kernel not in MXFP4_MOE_KERNELS:
            raise InvalidParameterError(
                "mxfp4_moe_kernel", self.mxfp4_moe_kernel, f"one of {MXFP4_MOE_KERNELS}"
            )
        for name in (
            "scheduler_recv_interval",
            "stream_interval",
            "batch_wait_iters",
            "redundant_experts",
        ):
            if isinstance(getattr(self, name), bool) or not isinstance(getattr(self, name), int):
                raise InvalidParameterError(name, getattr(self, name), "an integer")
        if self.stream_first_token not in STREAM_FIRST_TOKEN_RULES:
            raise InvalidParameterError(
                "stream_first_token", self.stream_first_token, f"one of {STREAM_FIRST_TOKEN_RULES}"
            )
        if not isinstance(self.client_turnaround, bool):
            raise InvalidParameterError("client_turnaround", self.client_turnaround, "a boolean")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise InvalidParameterError(
                "kv_cache_dtype", self.kv_cache_dtype, f"one of {KV_CACHE_DTYPES}"
            )
        if self.npu_graph_mode is not None and self.npu_graph_mode not in NPU_GRAPH_MODES:
            raise InvalidParameterError(
                "npu_graph_mode", self.npu_graph_mode, f"one of {NPU_GRAPH_MODES}"
            )

    def with_overrides(self, overrides: Mapping[str, object]) -> EngineProfile:
        """The profile with some values replaced (each checked against its bounds)."""
        unknown = sorted(set(overrides) - set(OVERRIDABLE))
        if unknown:
            raise InvalidParameterError(
                "engine_options", unknown[0], f"one of {', '.join(OVERRIDABLE)}"
            )
        given = {k: v for k, v in overrides.items() if v is not None}
        return dataclasses.replace(self, **given) if given else self  # type: ignore[arg-type]

    # -- device-derived defaults -------------------------------------------------------------
    def token_budget(self, hbm_capacity_gb: float, device_name: str, vendor: str) -> int:
        """``max_batched_tokens`` when the request leaves it out."""
        if self.max_batched_tokens is not None:
            return self.max_batched_tokens
        if self.budget_rule == "sglang":
            return _sglang_row(hbm_capacity_gb, vendor)[1]
        return _vllm_budget(hbm_capacity_gb, device_name)[0]

    def running_cap(self, hbm_capacity_gb: float, device_name: str) -> int | None:
        """``max_num_seqs`` / ``max_batch_size``: requests one replica runs at once."""
        if self.max_num_seqs is not None or self.max_num_seqs_rule != "vllm":
            return self.max_num_seqs
        return _vllm_budget(hbm_capacity_gb, device_name)[1]

    def graph_max_batch(self, hbm_capacity_gb: float, vendor: str, tp: int) -> int | None:
        """Largest decode batch run as a captured graph (``None``: every decode batch)."""
        if self.cuda_graph_max_batch is not None or self.budget_rule != "sglang":
            return self.cuda_graph_max_batch
        row = _sglang_row(hbm_capacity_gb, vendor)
        return row[2] if tp < 4 else row[3]

    def reserved_memory_gb(
        self, hbm_capacity_gb: float, vendor: str, tp: int, dp_attention: int
    ) -> float:
        """Memory per device outside weights, KV blocks and activations (the runner's
        reserve; the KV pool rule then decides how much of the rest holds KV blocks)."""
        if self.kv_pool == "reserve":
            return MSMODELING_RESERVED_MEMORY_GB
        if self.kv_pool == "total_fraction":
            fraction = (
                VLLM_GPU_MEMORY_UTILIZATION
                if self.memory_fraction is None
                else (self.memory_fraction)
            )
            return (1.0 - fraction) * hbm_capacity_gb + self.runtime_memory_gb
        if self.kv_pool == "static_fraction":
            static = self.static_fraction(hbm_capacity_gb, vendor, tp, dp_attention)
            return (1.0 - static) * hbm_capacity_gb
        return self.runtime_memory_gb

    def static_fraction(
        self, hbm_capacity_gb: float, vendor: str, tp: int, dp_attention: int
    ) -> float:
        """SGLang's ``mem_fraction_static`` (weights plus KV pool share of device memory)."""
        if self.memory_fraction is not None:
            return self.memory_fraction
        memory_gib = hbm_capacity_gb * GB_BYTES / GIB_BYTES
        row = _sglang_row(hbm_capacity_gb, vendor)
        chunk = self.token_budget(hbm_capacity_gb, "", vendor)
        graph_bs = self.graph_max_batch(hbm_capacity_gb, vendor, tp) or row[3]
        reserve_mib = (
            SGLANG_BASE_RESERVE_MIB
            + max(chunk, SGLANG_MIN_PREFILL_RESERVE_TOKENS) * SGLANG_PREFILL_RESERVE_PER_TOKEN_MIB
            + graph_bs * SGLANG_GRAPH_RESERVE_PER_BS_MIB
            + tp / 8 * SGLANG_TP_RESERVE_MIB_PER_8_RANKS
        )
        if dp_attention > 1:
            reserve_mib += graph_bs * dp_attention * SGLANG_DP_GRAPH_RESERVE_PER_BS_MIB
        if memory_gib > SGLANG_LARGE_DEVICE_GIB:
            reserve_mib = max(reserve_mib, SGLANG_LARGE_DEVICE_MIN_RESERVE_MIB)
        memory_mib = memory_gib * MIB_PER_GIB
        return round((memory_mib - reserve_mib) / memory_mib, 3)

    def kv_pool_fraction(self) -> float:
        """Share of the memory left after weights, reserve and activations that holds KV
        blocks (TensorRT-LLM keeps 10 % of it free; the other rules use all of it)."""
        if self.kv_pool != "free_fraction":
            return 1.0
        return (
            TRTLLM_KV_FREE_MEMORY_FRACTION
            if self.memory_fraction is None
            else (self.memory_fraction)
        )

    def layer_host_ms(self, *, decode_only: bool) -> float:
        """Host time per model layer of one step. On a GPU build a step with a prefill, which
        runs without a captured graph, pays :attr:`eager_layer_host_ms`, a decode step nothing
        (decode batches above the captured sizes are priced by the runner's eager launch cost
        alone). On an NPU build a
        decode-only step replayed as a full ACL graph updates each attention layer's parameters
        (:data:`NPU_FULL_GRAPH_LAYER_HOST_MS`); a step in graph pieces launches each layer's
        attention eagerly between pieces (:data:`NPU_PIECEWISE_LAYER_HOST_MS`, also the floor
        of ``full_decode_only``'s eager steps with a prefill: no public figure for those, and
        the floor of an ``eager`` step: :meth:`eager_step_ms`)."""
        mode = self.npu_graph_mode
        if mode is None:
            return 0.0 if decode_only else self.eager_layer_host_ms
        if decode_only and mode not in ("piecewise", "eager"):
            return NPU_FULL_GRAPH_LAYER_HOST_MS
        return NPU_PIECEWISE_LAYER_HOST_MS

    @property
    def eager(self) -> bool:
        """Every step runs eagerly (vLLM-Ascend's ``--enforce-eager``)."""
        return self.npu_graph_mode == "eager"

    def gdn_prefill_host_ms(self, gdn_layers: int) -> float:
        """Host time an NPU build's step with a prefill spends on ``gdn_layers`` Gated DeltaNet
        layers beyond the plan's operators (:data:`NPU_GDN_PREFILL_LAYER_HOST_MS` each; 0 on
        a GPU build or without such layers): dispatch that overlaps the device's work."""
        if self.npu_graph_mode is None:
            return 0.0
        return gdn_layers * NPU_GDN_PREFILL_LAYER_HOST_MS

    def eager_step_ms(
        self, device_ms: float, operators: int, *, layers: int, prefill_host_ms: float = 0.0
    ) -> float:
        """One eager step around a forward of ``device_ms`` whose plan launches ``operators``:
        the host dispatches them one by one (:data:`NPU_EAGER_OP_HOST_MS` each, plus
        ``prefill_host_ms``: :meth:`gdn_prefill_host_ms`) while the NPU runs those already
        dispatched, so the forward takes ``max(device, dispatch)``; the step's host work
        (scheduling, inputs, sampling) and sync come on top, the host work hidden behind the
        forward under async scheduling. Never below the same step in graph pieces (``layers``
        layers of :data:`NPU_PIECEWISE_LAYER_HOST_MS`, its forward at least
        ``prefill_host_ms``): eager execution launches every operator a piecewise step
        launches eagerly, and the others too."""
        forward_ms = max(device_ms, operators * NPU_EAGER_OP_HOST_MS + prefill_host_ms)
        piece_forward_ms = max(device_ms, prefill_host_ms)
        host_ms = self.step_host_ms
        piecewise_ms = host_ms + layers * self.layer_host_ms(decode_only=False)
        if self.overlap_scheduling:
            host_ms = max(0.0, host_ms - forward_ms)
            piecewise_ms = max(0.0, piecewise_ms - piece_forward_ms)
        eager_ms = forward_ms + host_ms
        return max(eager_ms, piece_forward_ms + piecewise_ms) + self.step_sync_ms

    def frontend_ms(self, input_length: int) -> float:
        """Time a request of ``input_length`` prompt tokens spends in the server's front end
        before the engine sees it: the per-request part and the prompt's tokenization."""
        return self.request_frontend_ms + self.frontend_us_per_token * input_length / 1000.0

    def spec_terms(self, input_length: int) -> SpecTerms:
        """The workload fields this engine sets for prompts of ``input_length`` tokens (its
        front-end time, closed-loop arrivals, polling, batch wait and streaming), for a
        :class:`~app.core.spec.WorkloadSpec` built as ``WorkloadSpec(..., **terms)``."""
        return SpecTerms(
            ttft_overhead_ms=self.frontend_ms(input_length),
            arrival_spread=self.arrival_spread,
            resubmit_steps=self.resubmit_steps,
            client_turnaround=self.client_turnaround,
            recv_interval=self.scheduler_recv_interval,
            batch_wait_iters=self.batch_wait_iters,
            batch_wait_max_tokens_ratio=self.batch_wait_max_tokens_ratio,
            stream_interval=self.stream_interval,
            stream_first_token=self.stream_first_token,
        )

    def activations_in_reserve(self) -> bool:
        """SGLang's static fraction leaves activations in the reserve: they do not come out of
        the KV pool."""
        return self.kv_pool == "static_fraction"

    def scheduler_for(self, hbm_capacity_gb: float, device_name: str) -> Scheduler:
        """The engine's step policy; an engine policy carries the running cap itself."""
        policy = SCHEDULERS[self.scheduler]
        if issubclass(policy, EnginePolicy):
            return make_scheduler(
                self.scheduler, max_num_seqs=self.running_cap(hbm_capacity_gb, device_name)
            )
        return make_scheduler(self.scheduler)

    def to_dict(self) -> dict[str, object]:
        """Every value, but ``npu_graph_mode`` only on an NPU build (where it is set),
        ``mxfp4_moe_kernel`` only when it names a kernel (not ``default``) and the
        values of :data:`_ECHOED_WHEN_SET` only where they are not the unmodelled 0 of an engine
        whose default is 0 (a zero on SGLang's eager host time, whose default is not, is
        echoed)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if self.npu_graph_mode is None:
            del out["npu_graph_mode"]
        if self.mxfp4_moe_kernel == "default":  # the engine's own kernel: nothing to echo
            del out["mxfp4_moe_kernel"]
        base = PROFILES.get(self.name)
        for name in _ECHOED_WHEN_SET:
            if not out[name] and (base is None or not getattr(base, name)):
                del out[name]
        return out


def _vllm_budget(hbm_capacity_gb: float, device_name: str) -> tuple[int, int]:
    large = hbm_capacity_gb * GB_BYTES >= VLLM_LARGE_DEVICE_BYTES
    if large and "a100" not in device_name.lower():
        return VLLM_LARGE_BUDGET_TOKENS, VLLM_LARGE_MAX_NUM_SEQS
    return VLLM_SMALL_BUDGET_TOKENS, VLLM_SMALL_MAX_NUM_SEQS


def _sglang_row(hbm_capacity_gb: float, vendor: str) -> tuple[float, int, int, int]:
    memory_gib = round(hbm_capacity_gb * GB_BYTES / GIB_BYTES, _GIB_DIGITS)
    if vendor.lower() in NPU_VENDORS:
        for row in SGLANG_NPU_MEMORY_TABLE:
            if memory_gib <= row[0]:
                return row
    return next(row for row in SGLANG_MEMORY_TABLE if memory_gib < row[0])


#: Values echoed only where set or where their engine's default is (the others' unmodelled 0s
#: stay out of every answer, as before they existed).
_ECHOED_WHEN_SET = (
    "eager_layer_host_ms",
    "batch_wait_iters",
    "batch_wait_max_tokens_ratio",
    "redundant_experts",
)

#: Overridable numeric values and their bounds (the wire's bounds come from here).
OVERRIDE_BOUNDS: Mapping[str, tuple[float, float]] = {
    "max_batched_tokens": (1, limits.MAX_BATCHED_TOKENS),
    "max_num_seqs": (1, 1 << 16),
    "memory_fraction": (0.05, 1.0),
    "runtime_memory_gb": (0.0, 1024.0),
    "cuda_graph_max_batch": (0, 1 << 16),
    "step_host_ms": (0.0, 1000.0),
    "step_sync_ms": (0.0, 1000.0),
    "request_frontend_ms": (0.0, limits.MAX_TTFT_OVERHEAD_MS),
    "frontend_us_per_token": (0.0, limits.MAX_FRONTEND_US_PER_TOKEN),
    "resubmit_steps": (0, limits.MAX_RESUBMIT_STEPS),
    "arrival_spread": (0.0, limits.MAX_ARRIVAL_SPREAD),
    "scheduler_recv_interval": (1, limits.MAX_RECV_INTERVAL),
    "stream_interval": (1, limits.MAX_STREAM_INTERVAL),
    "eager_layer_host_ms": (0.0, 100.0),
    "batch_wait_iters": (0, limits.MAX_RECV_INTERVAL),
    "batch_wait_max_tokens_ratio": (0.0, 1.0),
    "redundant_experts": (0, limits.MAX_REDUNDANT_EXPERTS),
}
#: Every value a request may override.
OVERRIDABLE: tuple[str, ...] = (
    *OVERRIDE_BOUNDS,
    "kv_cache_dtype",
    "overlap_scheduling",
    "client_turnaround",
    "mxfp4_activation",
    "mxfp4_moe_kernel",
    "npu_graph_mode",
    "stream_first_token",
)

VLLM = EngineProfile(
    name="vllm",
    description="vLLM V1 OpenAI server defaults",
    scheduler="vllm",
    workload="closed_loop",
    budget_rule="vllm",
    max_num_seqs_rule="vllm",
    kv_pool="total_fraction",
    runtime_memory_gb=RUNTIME_MEMORY_GB,
    kv_cache_dtype="auto",
    cuda_graph_max_batch=VLLM_MAX_GRAPH_BATCH,
    overlap_scheduling=False,
    step_host_ms=VLLM_STEP_HOST_MS,
    request_frontend_ms=VLLM_TOKENIZER_BATCH_WAIT_MS,
    frontend_us_per_token=FRONTEND_US_PER_TOKEN,
    resubmit_steps=OVERLAP_RESUBMIT_STEPS,
    mxfp4_activation=VLLM_MXFP4_ACTIVATION,
    client_turnaround=CLIENT_TURNAROUND,
)
SGLANG = EngineProfile(
    name="sglang",
    description="SGLang server defaults",
    scheduler="sglang",
    workload="closed_loop",
    budget_rule="sglang",
    kv_pool="static_fraction",
    kv_cache_dtype="auto",
    overlap_scheduling=True,
    step_sync_ms=SGLANG_STEP_SYNC_MS,
    frontend_us_per_token=FRONTEND_US_PER_TOKEN,
    resubmit_steps=OVERLAP_RESUBMIT_STEPS,
    mxfp4_activation=SGLANG_MXFP4_ACTIVATION,
    eager_layer_host_ms=SGLANG_EAGER_LAYER_HOST_MS,
    client_turnaround=CLIENT_TURNAROUND,
)
TRTLLM = EngineProfile(
    name="trtllm",
    description="TensorRT-LLM (PyTorch backend) trtllm-serve defaults",
    scheduler="decode_first_with_slack",
    workload="closed_loop",
    budget_rule="fixed",
    max_batched_tokens=TRTLLM_MAX_NUM_TOKENS,
    max_num_seqs=TRTLLM_MAX_BATCH_SIZE,
    kv_pool="free_fraction",
    runtime_memory_gb=RUNTIME_MEMORY_GB,
    kv_cache_dtype="fp8",
    overlap_scheduling=True,
    step_sync_ms=TRTLLM_STEP_SYNC_MS,
    frontend_us_per_token=FRONTEND_US_PER_TOKEN,
    resubmit_steps=OVERLAP_RESUBMIT_STEPS,
    mxfp4_activation=TRTLLM_MXFP4_ACTIVATION,
    client_turnaround=CLIENT_TURNAROUND,
)
MSMODELING = EngineProfile(
    name="msmodeling",
    description="the RFC's semantics (msmodeling): burst, decode-first with slack, 10 GB "
    "reserve, W8A8_DYNAMIC linear layers and an 8192-token budget unless the request says",
    scheduler="decode_first_with_slack",
    workload="burst",
    budget_rule="fixed",
    max_batched_tokens=MSMODELING_MAX_BATCHED_TOKENS,
    kv_pool="reserve",
    linear_quantization=MSMODELING_LINEAR_QUANTIZATION,
)

PROFILES: Mapping[str, EngineProfile] = {p.name: p for p in (VLLM, SGLANG, TRTLLM, MSMODELING)}
DEFAULT_ENGINE = VLLM.name
RFC_ENGINE = MSMODELING.name


def get_profile(name: str) -> EngineProfile:
    """A profile by name (an unknown name lists the valid ones)."""
    found = PROFILES.get(name)
    if found is None:
        raise UnknownEngineError(name, PROFILES)
    return found


#: The engines a device vendor's accelerators run, where not every engine does: TensorRT-LLM
#: is CUDA-only (NVIDIA GPUs); vLLM and SGLang run on Ascend NPUs through their NPU backends
#: (vllm-project/vllm-ascend, SGLang's ``--device npu``) and on AMD GPUs through ROCm;
#: ``msmodeling`` is the RFC's model, not an engine, and runs on any device. A vendor not
#: listed (NVIDIA, a custom device's) runs every profile.
_NOT_CUDA_ONLY = (VLLM.name, SGLANG.name, MSMODELING.name)
VENDOR_ENGINES: Mapping[str, tuple[str, ...]] = {
    **dict.fromkeys(NPU_VENDORS, _NOT_CUDA_ONLY),
    "amd": _NOT_CUDA_ONLY,
}


def engines_for_vendor(vendor: str) -> tuple[str, ...]:
    """The engine profiles that run on a device of ``vendor``."""
    return VENDOR_ENGINES.get(vendor.lower(), tuple(PROFILES))


def check_engine_runs_on(engine: str, *, vendor: str, device_name: str) -> None:
    """Refuse an engine that does not run on the device (TensorRT-LLM on an Ascend NPU),
    naming the engines that do."""
    valid = engines_for_vendor(vendor)
    if engine not in valid:
        raise InvalidParameterError(
            "engine",
            engine,
            f"an engine that runs on {device_name} ({vendor}): {', '.join(valid)}",
        )


#: The engines' NPU builds, named in the echo (``engine.description``) so an answer says
#: which rules ran: the profile's device-derived values take the NPU rows by vendor
#: (:data:`SGLANG_NPU_MEMORY_TABLE`; vLLM-Ascend keeps vLLM's ``gpu_memory_utilization`` of
#: total memory, ``vllm_ascend/worker/worker.py`` ``requested_memory``).
NPU_DESCRIPTIONS: Mapping[str, str] = {
    VLLM.name: "vLLM-Ascend (vllm-project/vllm-ascend) OpenAI server defaults on an Ascend NPU",
    SGLANG.name: "SGLang server defaults on an Ascend NPU (its NPU backend's defaults)",
}


def device_profile(name: str, *, vendor: str, device_name: str) -> EngineProfile:
    """The profile ``name`` as its engine runs on a device of ``vendor`` (refused, naming the
    valid engines, when the engine does not run there): on an Ascend NPU the engine's NPU
    build."""
    profile = get_profile(name)
    check_engine_runs_on(name, vendor=vendor, device_name=device_name)
    if vendor.lower() in NPU_VENDORS and name in NPU_DESCRIPTIONS:
        graph_mode = VLLM_ASCEND_GRAPH_MODE if name == VLLM.name else None
        # The eager host time per layer is a CUDA build's (SGLANG_EAGER_LAYER_HOST_MS); no
        # public figure prices an NPU build's eager prefill, so it is not modelled there.
        return dataclasses.replace(
            profile,
            description=NPU_DESCRIPTIONS[name],
            npu_graph_mode=graph_mode,
            eager_layer_host_ms=0.0,
        )
    return profile


def check_npu_options(profile: EngineProfile, *, vendor: str, device_name: str) -> None:
    """Refuse an NPU-only engine option on a device that is not an Ascend NPU, or on an engine
    that has no such setting there (``npu_graph_mode`` is vLLM-Ascend's)."""
    if profile.npu_graph_mode is None:
        return
    if vendor.lower() not in NPU_VENDORS or profile.name != VLLM.name:
        raise InvalidParameterError(
            "engine_options.npu_graph_mode",
            profile.npu_graph_mode,
            f"unset: vLLM-Ascend's setting, not {profile.name}'s on {device_name} ({vendor})",
        )
