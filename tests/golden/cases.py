"""The fixed corpus whose outputs must not change when the code is restructured.

Each case is one request through the real ASGI app (a fresh app and cache per case, so cache
counters are deterministic) or one CLI invocation in-process. ``scripts/golden.py --write``
records the outputs under ``tests/golden/expected/``; ``tests/golden/test_golden.py`` replays
the corpus and compares byte for byte, timing fields aside (:data:`TIMING_KEYS`).

Recorded at 3fa5bc1 (before the restructuring of issue 11). A deliberate change of an output
re-records the file in the same commit and says why in the commit message. Since the engine
profiles (issue 12) made ``vllm`` and the closed loop the defaults, every simulate and optimize
case names ``engine: msmodeling`` (the RFC's semantics), so the corpus keeps pinning the RFC
behaviour; re-recorded then with only the ``engine`` echo added.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Wall-clock fields: the only values allowed to differ between runs.
TIMING_KEYS = frozenset({"elapsed_ms"})

QWEN32 = "Qwen/Qwen3-32B"
A2 = "ATLAS_800_A2_376T_64G"
H100 = "NVIDIA_H100_SXM_80G"
H200 = "NVIDIA_H200_SXM_141G"


@dataclass(frozen=True, slots=True)
class ApiCase:
    name: str
    method: str
    path: str
    body: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class CliCase:
    name: str
    argv: tuple[str, ...]
    #: Lines of the output that carry wall-clock figures (dropped before comparing).
    drop_containing: tuple[str, ...] = field(default=())


SIM: dict[str, Any] = {
    "engine": "msmodeling",
    "model": QWEN32,
    "device": A2,
    "input_length": 3500,
    "output_length": 200,
    "max_batched_tokens": 2048,
    "concurrency": 16,
    "tp_size": 4,
}
OPT: dict[str, Any] = {
    "engine": "msmodeling",
    "model": QWEN32,
    "device": A2,
    "num_devices": 8,
    "input_length": 3500,
    "output_length": 1500,
    "max_batched_tokens": 8192,
    "tpot_limit_ms": 50,
    "tp_sizes": [1, 2, 4, 8],
}
#: mode disagg: both pools' layouts, counts and clients within 12 H100s (TensorRT-LLM, FP8).
DISAGG_OPT: dict[str, Any] = {
    "mode": "disagg",
    "engine": "trtllm",
    "model": QWEN32,
    "device": H100,
    "quantize_linear_action": "FP8",
    "num_devices": 12,
    "input_length": 2048,
    "output_length": 128,
    "ttft_limit_ms": 800.0,
    "tpot_limit_ms": 30.0,
    "tp_sizes": [1, 2],
    "max_workers": 4,
    "requests_per_client": 3,
}
FWD: dict[str, Any] = {
    "model": QWEN32,
    "device": A2,
    "num_queries": 1,
    "query_length": 2048,
    "tp_size": 4,
}
MOE_SIM: dict[str, Any] = {
    "engine": "msmodeling",
    "model": "Qwen/Qwen3-235B-A22B",
    "device": H200,
    "quantize_linear_action": "FP8",
    "input_length": 4096,
    "output_length": 256,
    "max_batched_tokens": 8192,
    "concurrency": 32,
    "tp_size": 8,
    "ep_size": 8,
}


def _sim(name: str, **patch: Any) -> ApiCase:
    return ApiCase(name, "POST", "/v1/simulate", {**SIM, **patch})


def _opt(name: str, **patch: Any) -> ApiCase:
    return ApiCase(name, "POST", "/v1/optimize", {**OPT, **patch})


def _fwd(name: str, **patch: Any) -> ApiCase:
    return ApiCase(name, "POST", "/v1/forward", {**FWD, **patch})


POLICIES: list[dict[str, Any]] = [
    {"name": "decode_first_with_slack"},
    {"name": "decode_first_with_slack", "prefill_order": "fifo", "slack_ratio": 1.3},
    {"name": "vllm"},
    {"name": "vllm", "mixed_latency": "sum", "max_num_seqs": 8},
    {"name": "vllm", "mixed_latency": "fused"},
    {"name": "sglang"},
    {"name": "sglang", "mixed_latency": "fused"},
    {"name": "sglang_mixed_chunk"},
    {"name": "sglang_mixed_chunk", "mixed_latency": "sum"},
]


def _policy_name(options: dict[str, Any]) -> str:
    parts = [options["name"], *(f"{k}-{v}" for k, v in options.items() if k != "name")]
    return "_".join(str(p) for p in parts)


API_CASES: list[ApiCase] = [
    # --- catalog and chunk plan
    ApiCase("models", "GET", "/v1/models"),
    ApiCase("devices", "GET", "/v1/devices"),
    ApiCase("model_one", "GET", "/v1/models/deepseek-ai/DeepSeek-V3"),
    ApiCase("device_one", "GET", f"/v1/devices/{H100}"),
    ApiCase(
        "chunk_plan",
        "POST",
        "/v1/chunk-plan",
        {"input_length": 10000, "max_batched_tokens": 4096, "prefix_cache_hit_rate": 0.5},
    ),
    # --- simulate: burst
    _sim("sim_burst"),
    _sim("sim_burst_timeline", include_timeline=True),
    _sim("sim_waves", input_length=1000, max_batched_tokens=8192),
    _sim("sim_waves_forced", input_length=1000, max_batched_tokens=8192, force_simulation=True),
    _sim("sim_default_budget", max_batched_tokens=None),
    _sim("sim_prefix_hit", prefix_cache_hit_rate=0.5),
    _sim("sim_limits", ttft_limit_ms=500, tpot_limit_ms=30),
    _sim("sim_dp_split", tp_size=2, dp_size=4, concurrency=10),
    _sim("sim_num_devices", tp_size=2, num_devices=8, concurrency=16),
    _sim("sim_mtp", num_mtp_tokens=2, mtp_acceptance_rates=[0.8, 0.6]),
    _sim(
        "sim_quant",
        quantize_linear_action="W8A8_DYNAMIC",
        quantize_attention_action="INT8",
    ),
    _sim("sim_infeasible_memory", tp_size=1, concurrency=512, input_length=32768),
    _sim(
        "sim_custom_device",
        device={"base": H100, "name": "H100_96G", "hbm_capacity_gb": 96},
    ),
    _sim("sim_output_one", output_length=1),
    *(_sim(f"sim_policy_{_policy_name(p)}", scheduler=p) for p in POLICIES),
    *(
        _sim(
            f"sim_policy_timeline_{_policy_name(p)}",
            scheduler=p,
            include_timeline=True,
            concurrency=6,
            output_length=40,
        )
        for p in POLICIES
    ),
    ApiCase("sim_moe", "POST", "/v1/simulate", MOE_SIM),
    ApiCase(
        "sim_mla",
        "POST",
        "/v1/simulate",
        {
            **MOE_SIM,
            "model": "deepseek-ai/DeepSeek-V3",
            "num_mtp_tokens": 1,
            "mtp_acceptance_rates": [0.7],
        },
    ),
    # --- simulate: closed loop
    _sim("sim_closed_loop", workload="closed_loop", concurrency=16),
    _sim(
        "sim_closed_loop_steady",
        workload="closed_loop",
        window="steady_state",
        requests_per_client=5,
    ),
    _sim("sim_closed_loop_dp", workload="closed_loop", tp_size=2, dp_size=4, concurrency=10),
    _sim(
        "sim_closed_loop_vllm", workload="closed_loop", concurrency=24, scheduler={"name": "vllm"}
    ),
    _sim(
        "sim_closed_loop_fused",
        workload="closed_loop",
        concurrency=24,
        scheduler={"name": "vllm", "mixed_latency": "fused"},
        include_timeline=True,
    ),
    _sim(
        "sim_closed_loop_sglang",
        workload="closed_loop",
        concurrency=24,
        scheduler={"name": "sglang"},
    ),
    _sim(
        "sim_closed_loop_kv_bound",
        workload="closed_loop",
        tp_size=1,
        concurrency=256,
        input_length=8192,
    ),
    # A length range (vLLM --random-range-ratio 0.8): outputs as length classes.
    _sim(
        "sim_closed_loop_length_range",
        workload="closed_loop",
        concurrency=24,
        scheduler={"name": "vllm"},
        length_range_ratio=0.8,
    ),
    # --- simulate: poisson
    _sim("sim_poisson", workload="poisson", concurrency=None, request_rate=4.0, num_requests=200),
    _sim(
        "sim_poisson_length_range",
        workload="poisson",
        concurrency=None,
        request_rate=4.0,
        num_requests=200,
        length_range_ratio=0.8,
    ),
    _sim(
        "sim_poisson_cap",
        workload="poisson",
        concurrency=None,
        request_rate=20.0,
        num_requests=150,
        max_concurrency=8,
        seed=7,
    ),
    _sim(
        "sim_poisson_dp",
        workload="poisson",
        concurrency=None,
        tp_size=2,
        dp_size=3,
        request_rate=6.0,
        num_requests=120,
        scheduler={"name": "vllm"},
    ),
    _sim(
        "sim_poisson_timeline",
        workload="poisson",
        concurrency=None,
        request_rate=2.0,
        num_requests=30,
        include_timeline=True,
        scheduler={"name": "sglang_mixed_chunk"},
    ),
    # --- optimize
    _opt("opt_agg"),
    _opt("opt_agg_2048", max_batched_tokens=2048, tp_sizes=[4, 8]),
    _opt("opt_agg_default_budget", max_batched_tokens=None),
    _opt("opt_agg_ttft", ttft_limit_ms=2000),
    _opt("opt_agg_infeasible", tpot_limit_ms=0.001),
    _opt("opt_agg_no_probes", include_probes=False, top_k=2),
    _opt("opt_agg_closed_loop", workload="closed_loop", max_batched_tokens=4096),
    _opt(
        "opt_agg_closed_loop_steady",
        workload="closed_loop",
        window="steady_state",
        requests_per_client=4,
        tp_sizes=[4, 8],
    ),
    _opt("opt_agg_vllm", scheduler={"name": "vllm"}, max_batched_tokens=2048),
    _opt(
        "opt_agg_fused",
        scheduler={"name": "vllm", "mixed_latency": "fused"},
        max_batched_tokens=2048,
        tp_sizes=[8],
    ),
    _opt("opt_agg_mtp", num_mtp_tokens=1, mtp_acceptance_rates=[0.75]),
    _opt("opt_agg_quant", quantize_linear_action="W8A8_DYNAMIC"),
    _opt("opt_agg_prefix", prefix_cache_hit_rate=0.3, input_length=16000),
    _opt("opt_agg_small_batch", max_batch_size=32),
    _opt("opt_disagg_prefill", mode="disagg_prefill", ttft_limit_ms=3000),
    _opt(
        "opt_disagg_prefill_overhead",
        mode="disagg_prefill",
        ttft_limit_ms=3000,
        serving_overhead_ms=100.0,
        max_batched_tokens=2048,
    ),
    _opt("opt_disagg_decode", mode="disagg_decode", ttft_limit_ms=3000),
    _opt("opt_pd_ratio", mode="pd_ratio", ttft_limit_ms=3000),
    _opt(
        "opt_pd_ratio_instances",
        mode="pd_ratio",
        ttft_limit_ms=3000,
        num_devices=16,
        prefill_devices_per_instance=4,
        decode_devices_per_instance=8,
        tp_sizes=None,
    ),
    ApiCase(
        "opt_moe",
        "POST",
        "/v1/optimize",
        {
            "engine": "msmodeling",
            "model": "Qwen/Qwen3-235B-A22B",
            "device": H200,
            "quantize_linear_action": "FP8",
            "num_devices": 8,
            "input_length": 4096,
            "output_length": 1024,
            "max_batched_tokens": 8192,
            "tpot_limit_ms": 50,
            "tp_sizes": [4, 8],
            "ep_sizes": [1, 4, 8],
        },
    ),
    ApiCase(
        "opt_mla_h200",
        "POST",
        "/v1/optimize",
        {
            "engine": "msmodeling",
            "model": "deepseek-ai/DeepSeek-R1",
            "device": H200,
            "quantize_linear_action": "FP8",
            "num_devices": 8,
            "input_length": 2048,
            "output_length": 512,
            "max_batched_tokens": 8192,
            "ttft_limit_ms": 3000,
            "tpot_limit_ms": 60,
        },
    ),
    ApiCase(
        "opt_h100_fp8_closed_loop",
        "POST",
        "/v1/optimize",
        {
            "engine": "msmodeling",
            "model": QWEN32,
            "device": H100,
            "quantize_linear_action": "FP8",
            "num_devices": 8,
            "input_length": 4096,
            "output_length": 1024,
            "ttft_limit_ms": 2000,
            "tpot_limit_ms": 50,
            "workload": "closed_loop",
            "scheduler": {"name": "vllm"},
        },
    ),
    # --- forward
    _fwd("fwd_prefill"),
    _fwd("fwd_decode", decode=True, num_queries=64, query_length=1, context_length=4000),
    _fwd(
        "fwd_mtp",
        decode=True,
        num_queries=32,
        query_length=1,
        context_length=2000,
        num_mtp_tokens=2,
    ),
    _fwd("fwd_quant", quantize_linear_action="W8A8_DYNAMIC", quantize_attention_action="INT8"),
    _fwd("fwd_pp", tp_size=2, pp_size=2),
    _fwd("fwd_num_devices", tp_size=2, num_devices=8),
    _fwd("fwd_reserved", reserved_memory_gb=4.0),
    ApiCase(
        "fwd_moe",
        "POST",
        "/v1/forward",
        {
            "model": "Qwen/Qwen3-235B-A22B",
            "device": H200,
            "quantize_linear_action": "FP8",
            "num_queries": 64,
            "query_length": 1,
            "context_length": 4096,
            "decode": True,
            "tp_size": 8,
            "ep_size": 8,
        },
    ),
    ApiCase(
        "fwd_mla",
        "POST",
        "/v1/forward",
        {
            "model": "deepseek-ai/DeepSeek-V3",
            "device": "NVIDIA_B200_SXM_180G",
            "quantize_linear_action": "FP8",
            "num_queries": 2,
            "query_length": 4096,
            "tp_size": 8,
            "ep_size": 8,
        },
    ),
    # --- errors (messages are part of what the product prints)
    _sim("err_sim_unknown_model", model="gpt-9"),
    ApiCase("opt_disagg", "POST", "/v1/optimize", DISAGG_OPT),
    ApiCase(
        "opt_disagg_fixed_sizes",
        "POST",
        "/v1/optimize",
        {**DISAGG_OPT, "prefill_devices_per_instance": 2, "decode_devices_per_instance": 1},
    ),
    ApiCase(
        "opt_disagg_no_ttft_limit", "POST", "/v1/optimize", {**DISAGG_OPT, "ttft_limit_ms": None}
    ),
    ApiCase(
        "err_opt_disagg_size_over_budget",
        "POST",
        "/v1/optimize",
        {**DISAGG_OPT, "prefill_devices_per_instance": 12},
    ),
    _opt("err_opt_bad_tp", tp_sizes=[3]),
    _sim("err_sim_poisson_without_rate", workload="poisson", concurrency=None),
]

_BASE = ("Qwen/Qwen3-32B", "--device", A2, "--input-length", "3500", "--output-length", "1500")

CLI_CASES: list[CliCase] = [
    CliCase(
        "cli_optimize_disagg_table",
        (
            "optimize",
            "--mode",
            "disagg",
            "--engine",
            "trtllm",
            "Qwen/Qwen3-32B",
            "--device",
            H100,
            "--quantize-linear-action",
            "FP8",
            "--num-devices",
            "12",
            "--input-length",
            "2048",
            "--output-length",
            "128",
            "--ttft-limit",
            "800",
            "--tpot-limit",
            "30",
            "--tp-sizes",
            "1",
            "2",
            "--max-workers",
            "4",
            "--requests-per-client",
            "3",
        ),
        drop_containing=("forwards computed",),
    ),
    CliCase(
        "cli_optimize_table",
        (
            "optimize",
            "--engine",
            "msmodeling",
            *_BASE,
            "--num-devices",
            "8",
            "--tpot-limit",
            "50",
            "--max-batched-tokens",
            "8192",
            "--tp-sizes",
            "1",
            "2",
            "4",
            "8",
        ),
        drop_containing=("forwards computed",),
    ),
    CliCase(
        "cli_optimize_csv",
        (
            "optimize",
            "--engine",
            "msmodeling",
            *_BASE,
            "--num-devices",
            "8",
            "--tpot-limit",
            "50",
            "--max-batched-tokens",
            "2048",
            "--tp-sizes",
            "4,8",
            "--format",
            "csv",
        ),
    ),
    CliCase(
        "cli_simulate_table",
        (
            "simulate",
            "--engine",
            "msmodeling",
            *_BASE,
            "--max-batched-tokens",
            "2048",
            "--concurrency",
            "16",
            "--tp-size",
            "4",
        ),
        drop_containing=("forwards computed",),
    ),
    CliCase(
        "cli_simulate_closed_loop_csv",
        (
            "simulate",
            "--engine",
            "msmodeling",
            *_BASE,
            "--max-batched-tokens",
            "2048",
            "--concurrency",
            "16",
            "--tp-size",
            "4",
            "--workload",
            "closed_loop",
            "--format",
            "csv",
        ),
    ),
    CliCase(
        "cli_forward_table",
        (
            "forward",
            "Qwen/Qwen3-32B",
            "--device",
            A2,
            "--num-queries",
            "1",
            "--query-length",
            "2048",
            "--tp-size",
            "4",
        ),
    ),
    CliCase("cli_models", ("models",)),
    CliCase("cli_devices", ("devices",)),
    CliCase("cli_validate_all_json", ("validate", "--all", "--format", "json")),
    CliCase(
        "cli_validate_serving_dedup_json",
        (
            "validate",
            "--kind",
            "serving_ttft",
            "--kind",
            "serving_tpot",
            "--drop-layout-duplicates",
            "--format",
            "json",
        ),
    ),
]
