"""Bounds and defaults of a request, and the optimize vocabulary: defined once, imported by the
wire models (``app.models``), the CLI parser and, through the API, the dashboard.

Bounds keep any request from pinning a worker for minutes (documented in README). Names the core
packages already define are imported from them, not repeated here: schedulers and mixed-latency
modes (``app.core.scheduler``), workloads and windows (``app.core.workload``), the optimizer's
default batch-size cap (``app.core.optimizer``). Stdlib only.
"""

from __future__ import annotations

from typing import Literal

# -- the optimize vocabulary (no core package names these) --------------------------------------
#: agg: prefill and decode share instances; disagg_prefill / disagg_decode: one side of a
#: PD-separated deployment; pd_ratio: both sides and their instance split (the RFC's formulas);
#: disagg: worker layouts, worker counts and concurrency of a whole disaggregated deployment,
#: each priced by the disaggregated closed loop.
Mode = Literal["agg", "disagg_prefill", "disagg_decode", "pd_ratio", "disagg"]
MODES: tuple[Mode, ...] = ("agg", "disagg_prefill", "disagg_decode", "pd_ratio", "disagg")
DEFAULT_MODE: Mode = "agg"
#: POST /v1/simulate: agg (one layout, prefill and decode share replicas) or disagg (a prefill
#: pool and a decode pool, each with its own layout, under one closed loop of clients).
#: The pools of a disaggregated deployment, and when its client gets the first token
#: (app/core/workload/disagg_serving.py); here, so the wire models name them without loading
#: the disaggregated engine.
Pool = Literal["prefill", "decode"]
FirstToken = Literal["prefill", "admission", "decode_step"]
SimulateMode = Literal["agg", "disagg"]
SIMULATE_MODES: tuple[SimulateMode, ...] = ("agg", "disagg")
DEFAULT_SIMULATE_MODE: SimulateMode = "agg"
#: The side of a deployment a result row describes.
Role = Literal["agg", "prefill", "decode"]
ROLES: tuple[Role, ...] = ("agg", "prefill", "decode")
#: Ranked configurations an optimize request returns by default.
DEFAULT_TOP_K = 10
#: ``validate --kernels --split``: every measured point, or only the fit's train (3 of 4 shapes) or
#: held-out test (1 of 4) share (app/core/validation/kernels.py draws the split).
KernelSplit = Literal["all", "train", "test"]
KERNEL_SPLITS: tuple[KernelSplit, ...] = ("all", "train", "test")

# -- bounds --------------------------------------------------------------------------------------
MAX_INPUT_LENGTH = 1_048_576  # tokens
MAX_OUTPUT_LENGTH = 131_072  # tokens
MAX_BATCHED_TOKENS = 1_048_576  # tokens per engine step
MAX_NUM_DEVICES = 1024
MAX_PARALLEL_SIZE = 1024  # any single tp / ep / dp value
MAX_REDUNDANT_EXPERTS = 1024  # expert slots beyond the routed experts (replicas), per layer
MAX_POOL_WORKERS = MAX_NUM_DEVICES  # prefill or decode workers of a disaggregated simulate
MAX_SEARCH_LIST = 16  # entries in tp_sizes / ep_sizes
MAX_LAYOUTS = 64  # parallel layouts one optimize request may search
MAX_TOP_K = 100
# MTP draft tokens a request may ask for (the wire and the WorkloadSpec alike).
MAX_MTP_TOKENS = 8
MIN_SLACK_RATIO = 1.0  # decode_first_with_slack's budget slack, as DecodeFirstWithSlack checks
MAX_SLACK_RATIO = 4.0
MAX_SERVING_OVERHEAD_MS = 60_000.0  # fixed TTFT overhead of prefill instances (optimize)
MAX_SIM_CONCURRENCY = 65_536  # requests (or clients) per replica in /v1/simulate
# /v1/simulate's concurrency is the total over the data-parallel replicas
MAX_SIM_TOTAL_CONCURRENCY = MAX_SIM_CONCURRENCY * MAX_PARALLEL_SIZE
MAX_FORWARD_CONCURRENCY = 1_048_576  # requests in one /v1/forward
MAX_PLAN_CHUNKS = 65_536  # chunks returned by /v1/chunk-plan
MAX_TIMELINE_ENTRIES = 20_000  # step records returned by /v1/simulate
MAX_RESERVED_MEMORY_GB = 4096.0
MAX_SEARCH_BATCH_SIZE = 65_536  # per-replica batch size an optimize search may probe
MAX_PREFILL_CHUNKS = 1024  # chunks per request in /v1/simulate and /v1/optimize
# prefill chunks x requests per replica (simulate concurrency / optimize max_batch_size): the
# time simulation's cost grows with it (a chunk-major "fifo" order takes about 4 us per pair).
MAX_CHUNK_REQUESTS = 1_048_576
MAX_TIMELINE_CHUNK_REQUESTS = 65_536  # the same product when a step timeline is requested
MAX_REQUESTS_PER_CLIENT = 100  # closed-loop workloads
# poisson workloads (/v1/simulate): requests in total, the rate, and requests per replica x
# prefill chunks (arrivals cut runs, so the planner's cost follows requests and chunks: 2,000
# requests on a 64-layer model take about 0.07 s, 10,000 x 8 chunks under the vllm policy
# about 0.8 s; see bench/README.md)
MAX_POISSON_REQUESTS = 10_000
MAX_REQUEST_RATE = 1_000_000.0  # requests per second
MAX_POISSON_REQUEST_CHUNKS = 131_072
# closed-loop workloads: requests sent per replica x prefill chunks (the planner's cost follows
# it: about 10 us per scheduling run, roughly one run per request and chunk).
MAX_CLOSED_LOOP_REQUEST_CHUNKS = 131_072
MAX_MANIFEST_KEYS = 50_000  # forward keys remembered per optimize search (one MGET when warm)
# Cache entries one request may write (about 7 MB of forward records); the rest is recomputed.
MAX_KEYS_WRITTEN_PER_REQUEST = 20_000
# A simulation of at most this many prefill chunks x requests per replica (and no timeline) is
# light: a few milliseconds on the real runner (bench_costs: 64 requests x 16 chunks, 4-16 ms
# cold), so the API runs it in the light lane, never behind an optimize.
LIGHT_SIMULATION_CHUNK_REQUESTS = 4096
# The request line and headers of one HTTP request, in bytes (chunkwise serve).
MAX_HEADER_BYTES = 64 * 1024
# An inline model (``{"name": ..., "config": {...config.json...}}``) or a custom device: every
# number finite and at most this (a config.json's largest is rope_theta, about 1e7), and at most
# MAX_INLINE_LAYERS layers (the catalog builds one entry per layer).
MAX_INLINE_NUMBER = 2**31 - 1
MAX_INLINE_LAYERS = 1024
# ... nested at most this deep (a config.json nests 4-5 levels: quantization_config groups) and
# holding at most this many values in all (a 1 MiB body holds fewer), walked iteratively.
MAX_INLINE_DEPTH = 32
MAX_INLINE_NODES = 200_000

#: Measured points one calibration fit takes (each is replayed by a serving simulation per
#: model evaluation, some 20-60 evaluations a fit; 45 points of one deployment took 4.1 s here,
#: 150 of another 73 s): the fit also stops at the request deadline (APP_REQUEST_DEADLINE_S).
MAX_CALIBRATION_POINTS = 500

#: A cached figure beyond these is a bad cache value (counted, logged, recomputed and
#: overwritten), never served: a latency in ms (a forward, step or request; about 31,700 years)
#: and a memory figure in GB (10^15 GB). A cached 1e308 ms forward turned every figure of a
#: simulation to 0.0. A forward computed beyond them is served but not cached.
MAX_CACHED_LATENCY_MS = 1e15
MAX_CACHED_MEMORY_GB = 1e15

#: Largest per-request front-end time (TTFT overhead) an engine profile may set, ms.
MAX_TTFT_OVERHEAD_MS = 60_000.0
#: Largest closed-loop arrival spread (share of a wave's re-submissions one step late): past
#: half, the late part of a wave would be the larger one, which is the same split reversed.
MAX_ARRIVAL_SPREAD = 0.5
#: Most steps a closed loop's re-submission may wait before the scheduler sees it (a profile's
#: ``resubmit_steps``): 2 is the engines' own (one step running, one formed ahead).
MAX_RESUBMIT_STEPS = 4
#: Most front-end time per prompt token, microseconds (a profile's ``frontend_us_per_token``):
#: well above any tokenizer's (a few microseconds per token).
MAX_FRONTEND_US_PER_TOKEN = 1000.0
#: A workload's length range (``length_range_ratio``, vLLM ``benchmark_serving.py
#: --random-range-ratio`` in its ``[L * r, L]`` form): each request's prompt and output lengths
#: are drawn uniformly between ``r`` times the nominal length and the nominal length. 1: fixed
#: lengths (the default); the ratio is in ``(0, 1]`` (exclusive below: a zero-length range
#: bound is no length).
DEFAULT_LENGTH_RANGE_RATIO = 1.0
MIN_LENGTH_RANGE_RATIO_EXCLUSIVE = 0.0
MAX_LENGTH_RANGE_RATIO = 1.0
#: The length classes a range is simulated with: equal-probability quantiles of the uniform
#: range, taken by successive requests in turn. More classes split the request groups further
#: and cost planning time; with 4, closed loops of 1-16 clients still dipped in mean TTFT by up
#: to 11 % from one client count to the next (the first wave's lock step lingering), with 8 by
#: at most 3.8 % over 400 dense configurations; with the client turnaround (vLLM, SGLang), by at
#: most 3.4 % at 128- and 1,024-token outputs and 8.9 % at 32 (tests/unit/workload/
#: test_ttft_monotone.py).
LENGTH_CLASSES = 8
#: Largest scheduler receive interval and stream interval an engine profile may set (forward
#: iterations and tokens; the benchmark recipes use at most 30 and 100).
MAX_RECV_INTERVAL = 1000
MAX_STREAM_INTERVAL = 1000

#: A stated link between the prefill and decode pools: bandwidth per device (GB/s) and the
#: per-transfer latency (ms) a request may give (beyond any NIC or NVLink today).
MAX_POOL_LINK_GB_S = 100_000.0
MAX_POOL_LINK_FIXED_MS = 60_000.0

#: Default and largest workers per pool a disaggregated search may place (here, not in the
#: search, so the wire models and the CLI name them without loading the search).
DEFAULT_MAX_WORKERS = 16
MAX_SEARCH_WORKERS = 64

# -- sweeps (``chunkwise sweep``) ------------------------------------------------------------------
#: Most scenarios one sweep spec may expand to (the grid's cross product before its exclude
#: rules, or a CSV's rows): a bigger spec is refused before anything runs.
MAX_SWEEP_SCENARIOS = 100_000
SweepOperation = Literal["simulate", "optimize", "plan"]
SWEEP_OPERATIONS: tuple[SweepOperation, ...] = ("simulate", "optimize", "plan")
