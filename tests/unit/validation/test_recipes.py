"""Recipe settings of measured rows (InferenceX launch scripts): recipe, ambiguous, default."""

from __future__ import annotations

import csv
import io

import pytest

from app.core.profiles import get_profile
from app.core.validation import CASE_COLUMNS, ServingReplay, replay_case_file
from app.core.validation.case_file import OUT_COLUMNS, row_case
from app.core.validation.predict import engine_family
from app.core.validation.recipes import (
    AIC_SWEEP_SOURCE,
    DEFAULT_SETTINGS,
    INFERENCEX_LENGTH_RANGE_RATIO,
    RECIPE_SETTINGS,
    _recv_rule,
    meets,
    parse_condition,
    recipe_table,
    row_settings,
)
from scripts.inferencex_recipes import (
    bash_condition,
    batch_wait_of,
    covering_entries,
    extra_settings_of,
    mxfp4_moe_of,
)

QWEN = {
    "case_id": "q",
    "model": "Qwen/Qwen3.5-397B-A17B",
    "hardware": "B200 180GB",
    "engine": "sglang 0.5.9",
    "gemm_quant": "fp8",
    "moe_quant": "fp8_block",
    "tp": "8",
    "pp": "1",
    "attn_dp": "1",
    "moe_tp": "1",
    "moe_ep": "8",
    "num_devices": "8",
    "isl": "8192",
    "osl": "1024",
    "concurrency": "64",
    "ttft_ms": "2000",
    "tpot_ms": "30",
}


@pytest.mark.parametrize(
    ("changes", "settings", "kv", "memory"),
    [
        ({}, "recipe", "fp8", 0.82),  # qwen3.5_fp8_b200.sh: fp8_e4m3, 0.82
        ({"engine": "vllm 0.17.0", "model": "moonshotai/Kimi-K2.5", "gemm_quant": "nvfp4"},
         "ambiguous", None, 0.9),  # the script added --kv-cache-dtype fp8 during v0.17.0
        # dsr1_fp8_b200.sh picks the static fraction by TP; its MTP variant ran the same image
        ({"model": "deepseek-ai/DeepSeek-V3", "tp": "4"}, "ambiguous", "fp8", 0.95),
        ({"model": "deepseek-ai/DeepSeek-V3", "tp": "8"}, "ambiguous", "fp8", 0.82),
        ({"engine": "vllm 0.18.0", "model": "openai/gpt-oss-120b", "gemm_quant": "nvfp4",
          "hardware": "H200 SXM 141GB"}, "recipe", None, 0.9),  # no KV flag: the default
        ({"engine": "sglang 0.5.8"}, "default", None, None),  # no config entry names it
        ({"engine": "trtllm 1.0.0rc3"}, "default", None, None),
    ],
)  # fmt: skip
def test_a_row_maps_to_its_recipe_by_its_provenance(
    changes: dict[str, str], settings: str, kv: str | None, memory: float | None
) -> None:
    found = row_settings({**QWEN, **changes})
    assert (found.settings, found.kv_cache_dtype, found.memory_fraction) == (settings, kv, memory)
    assert (found.source.startswith("SemiAnalysisAI/InferenceX: benchmarks/")) is (
        settings != "default"
    )


def test_every_recipe_row_is_a_valid_override_of_its_engine() -> None:
    """The shipped table parses, every row's options are accepted by its family's profile,
    and an ambiguous row says which values were in play."""
    table = recipe_table()
    with RECIPE_SETTINGS.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert sum(len(found) for found in table.values()) == len(rows) > 20
    for row in rows:
        found = row_settings(row)
        profile = get_profile(engine_family(row["engine"])).with_overrides(dict(found.options))
        assert profile.name == engine_family(row["engine"])
        if found.settings == "ambiguous":
            assert " or " in found.note or "(MTP speculative decoding) ran the same image" in (
                found.note
            )


def test_the_replay_runs_a_row_under_its_recipe_and_says_so() -> None:
    """A recipe row is predicted under its recipe's options and its client's length range
    (the same as a case carrying them), differently from the profile's defaults; OUT names the
    settings and the source."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CASE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows([QWEN, {**QWEN, "case_id": "d", "engine": "sglang 0.5.8"}])
    report = replay_case_file(buffer.getvalue())
    recipe, default = report.outcomes
    settings = row_settings(QWEN)
    assert settings.length_range_ratio == INFERENCEX_LENGTH_RANGE_RATIO == 0.8
    assert row_settings({**QWEN, "engine": "sglang 0.5.8"}).length_range_ratio == 1.0
    assert (recipe.ttft_ms_pred, recipe.tpot_ms_pred) == ServingReplay().predict(
        row_case(QWEN, settings.options, settings.length_range_ratio)
    )
    assert (default.ttft_ms_pred, default.tpot_ms_pred) == ServingReplay().predict(row_case(QWEN))
    assert recipe.tpot_ms_pred != default.tpot_ms_pred
    out = list(csv.DictReader(io.StringIO(report.to_csv())))
    assert tuple(out[0]) == OUT_COLUMNS
    assert [r["settings"] for r in out] == ["recipe", "default"]
    assert "qwen3.5_fp8_b200.sh@" in out[0]["settings_note"] and out[1]["settings_note"] == ""


@pytest.mark.parametrize(
    ("changes", "recv", "stream"),
    [
        # qwen3.5_fp8_b200.sh: --scheduler-recv-interval 10, 30 from CONC 16; --stream-interval 30
        ({"concurrency": "4"}, 10, 30),
        ({"concurrency": "15"}, 10, 30),
        ({"concurrency": "16"}, 30, 30),
        ({"concurrency": "256"}, 30, 30),
        # dsr1_fp4_b200.sh: the same rule, --stream-interval 10
        ({"model": "deepseek-ai/DeepSeek-V3", "gemm_quant": "nvfp4", "concurrency": "8"}, 10, 10),
        # dsr1_fp8_b200.sh: the CONC rule at TP8 only, 10 at TP4; --stream-interval 30
        ({"model": "deepseek-ai/DeepSeek-V3", "tp": "8", "concurrency": "32"}, 30, 30),
        ({"model": "deepseek-ai/DeepSeek-V3", "tp": "4", "concurrency": "32"}, 10, 30),
        # vLLM gpt-oss on H200: neither flag (the engine's defaults, no option)
        ({"engine": "vllm 0.18.0", "model": "openai/gpt-oss-120b", "gemm_quant": "nvfp4",
          "hardware": "H200 SXM 141GB"}, None, None),
        ({"engine": "sglang 0.5.8"}, None, None),  # no recipe
    ],
)  # fmt: skip
def test_the_recv_interval_follows_the_scripts_concurrency_rule(
    changes: dict[str, str], recv: int | None, stream: int | None
) -> None:
    found = row_settings({**QWEN, **changes})
    assert (found.scheduler_recv_interval, found.stream_interval) == (recv, stream)
    options = dict(found.options)
    assert options.get("scheduler_recv_interval") == recv
    assert options.get("stream_interval") == stream


def test_the_chunked_prefill_size_is_the_token_budget_and_the_running_cap_is_not_applied() -> None:
    """qwen3.5_fp8_b200.sh: --chunked-prefill-size 32768, --max-running-requests 128 (recorded
    in the table, not an option); dsr1_fp8_b200.sh at TP4: 8192."""
    assert dict(row_settings(QWEN).options)["max_batched_tokens"] == 32768
    assert "max_num_seqs" not in dict(row_settings(QWEN).options)
    dsv3 = {**QWEN, "model": "deepseek-ai/DeepSeek-V3", "tp": "4"}
    assert dict(row_settings(dsv3).options)["max_batched_tokens"] == 8192


def test_a_bad_recv_interval_cell_is_a_data_error() -> None:
    assert _recv_rule("10;30@16", {}) == (10, 30, 16)
    assert _recv_rule("10", {}) == (10, 10, 0)
    assert _recv_rule("default", {}) is None and _recv_rule("", {}) is None
    with pytest.raises(ValueError, match="scheduler_recv_interval"):
        _recv_rule("expr:$(", {})


SCRIPT = """
if [[ $TP -eq 8 ]]; then
  if [[ $CONC -ge 16 ]]; then
    SCHEDULER_RECV_INTERVAL=30
  else
    SCHEDULER_RECV_INTERVAL=10
  fi
  MAX_RUNNING_REQUESTS=128
elif [[ $TP -eq 4 ]]; then
  MAX_RUNNING_REQUESTS=32
  SCHEDULER_RECV_INTERVAL=10
fi
cat > config.yml << EOF
cuda_graph_config:
    max_batch_size: $CONC
stream_interval: 20
EOF
# python3 -m sglang.launch_server --chunked-prefill-size 4096
python3 -m sglang.launch_server --max-running-requests $MAX_RUNNING_REQUESTS \\
--scheduler-recv-interval $SCHEDULER_RECV_INTERVAL --chunked-prefill-size 16384
"""


def test_the_generator_reads_settings_by_tp_and_by_concurrency() -> None:
    """A TP branch keys a setting by TP, a CONC if/else is a rule, an indented
    ``max_batch_size`` (``cuda_graph_config``'s) is not the running cap, a commented-out line
    is not read, and a flag the script does not pass is the engine's default."""
    assert extra_settings_of(SCRIPT) == {
        "scheduler_recv_interval": {"8": {"10;30@16"}, "4": {"10"}},
        "stream_interval": {"": {"20"}},
        "max_running_requests": {"8": {"128"}, "4": {"32"}},
        "chunked_prefill_size": {"": {"16384"}},
    }
    assert extra_settings_of("python3 -m sglang.launch_server")["stream_interval"] == {
        "": {"default"}
    }


GPT_OSS = {**QWEN, "model": "openai/gpt-oss-120b", "gemm_quant": "nvfp4", "tp": "1"}


@pytest.mark.parametrize(
    ("changes", "activation", "kernel"),
    [
        # gptoss_fp4_b200.sh (image v0.15.1): export VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1
        ({"engine": "vllm 0.15.1", "hardware": "B200 180GB"}, "fp8", None),
        # gptoss_fp4_h200.sh / _h100.sh (image v0.18.0): export VLLM_MXFP4_USE_MARLIN=1
        ({"engine": "vllm 0.18.0", "hardware": "H200 SXM 141GB"}, "bf16", "marlin"),
        ({"engine": "vllm 0.18.0", "hardware": "H100 SXM 80GB"}, "bf16", "marlin"),
        # gptoss_fp4_h100_docker.sh (image v0.11.2): neither, vLLM's own choice
        ({"engine": "vllm 0.11.2", "hardware": "H100 SXM 80GB"}, None, None),
        ({}, None, None),  # an SGLang recipe: no vLLM MoE switch
    ],
)  # fmt: skip
def test_a_vllm_rows_mxfp4_moe_backend_sets_its_expert_activations_and_kernel(
    changes: dict[str, str], activation: str | None, kernel: str | None
) -> None:
    found = row_settings({**GPT_OSS, **changes})
    assert found.mxfp4_activation == activation
    assert dict(found.options).get("mxfp4_activation") == activation
    assert found.mxfp4_moe_kernel == kernel
    assert dict(found.options).get("mxfp4_moe_kernel") == kernel


def test_the_generator_reads_the_mxfp4_moe_exports() -> None:
    """An exported switch is read, a commented-out or unexported one is not."""
    assert mxfp4_moe_of("export VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1\nvllm serve") == {"mxfp8"}
    assert mxfp4_moe_of("  export VLLM_MXFP4_USE_MARLIN=1\n") == {"marlin"}
    assert mxfp4_moe_of("# export VLLM_MXFP4_USE_MARLIN=1\nVLLM_MXFP4_USE_MARLIN=0") == {"default"}
    assert mxfp4_moe_of("vllm serve") == {"default"}


LLAMA = {
    **QWEN,
    "case_id": "l",
    "model": "meta-llama/Llama-3.1-70B",
    "engine": "trtllm (version blank)",
    "gemm_quant": "fp8",
    "moe_quant": "fp8",
    "tp": "2",
    "moe_tp": "2",
    "moe_ep": "1",
    "num_devices": "2",
    "isl": "1024",
    "osl": "1024",
    "concurrency": "4",
    "ttft_ms": "256",
    "tpot_ms": "9.7",
}


@pytest.mark.parametrize(
    ("changes", "wait"),
    [
        # 70b_fp8_b200_trt_slurm.sh@1b563c8585: the wait only if ISL == OSL == 1024 and TP < 8
        ({}, (20, 0.9)),
        ({"tp": "1"}, (20, 0.9)),
        ({"tp": "4", "concurrency": "128"}, (20, 0.9)),
        ({"tp": "8"}, (None, None)),
        ({"osl": "8192"}, (None, None)),
        ({"isl": "8192"}, (None, None)),
        ({"gemm_quant": "nvfp4"}, (20, 0.9)),  # 70b_fp4_b200_trt_slurm.sh, the same branch
        ({"hardware": "H200 SXM 141GB"}, (20, 0.9)),  # 70b_fp8_h200_trt_slurm.sh
        ({"hardware": "H200 SXM 141GB", "tp": "8"}, (None, None)),
        ({"engine": "trtllm 1.0.0rc3"}, (None, None)),  # another build: no recipe
    ],
)  # fmt: skip
def test_the_llama_70b_batch_wait_applies_where_the_script_wrote_it(
    changes: dict[str, str], wait: tuple[int | None, float | None]
) -> None:
    """Both branches of the script set the same other settings (FP8 cache, stream interval
    10, ``--max_num_tokens 16384``); only the 1k/1k branch below TP 8 adds the wait."""
    found = row_settings({**LLAMA, **changes})
    assert (found.batch_wait_iters, found.batch_wait_max_tokens_ratio) == wait
    options = dict(found.options)
    assert (options.get("batch_wait_iters"), options.get("batch_wait_max_tokens_ratio")) == wait
    if changes.get("engine"):
        assert found.settings == "default"
        return
    assert found.settings == "recipe" and found.length_range_ratio == 0.8
    assert (options["kv_cache_dtype"], options["stream_interval"]) == ("fp8", 10)
    assert options["max_batched_tokens"] == 16384
    assert "70b_fp" in found.source and "_trt_slurm.sh@1b563c8585" in found.source
    assert "1.1.0rc2.post2" in found.note


def test_the_wait_holds_a_lone_arrival_for_its_iterations_in_the_replay() -> None:
    """At 4 clients on 1k/1k the ranged clients arrive one by one during the others' decodes:
    with the recipe's wait each is held about 20 decode steps (the measured rows: 1k/1k TTFT
    305 / 231 / 179 ms against 73 / 58 / 58 ms for 1k/8k at TP 1 / 2 / 4 on B200), without it
    not at all."""
    settings = row_settings(LLAMA)
    waited = ServingReplay().predict(row_case(LLAMA, settings.options, 0.8))
    unwaited_options = tuple((k, v) for k, v in settings.options if not k.startswith("batch_wait"))
    unwaited = ServingReplay().predict(row_case(LLAMA, unwaited_options, 0.8))
    gap_steps = (waited[0] - unwaited[0]) / waited[1]
    assert 10 < gap_steps <= 21


def test_a_condition_cell_parses_or_is_a_data_error() -> None:
    condition = parse_condition("isl==1024&osl==1024&tp<8", {})
    assert condition == (("isl", "==", 1024), ("osl", "==", 1024), ("tp", "<", 8))
    assert parse_condition("", {}) == ()
    assert meets(condition, LLAMA) and not meets(condition, {**LLAMA, "tp": "8"})
    assert not meets(condition, {**LLAMA, "isl": ""})  # a value the row lacks meets nothing
    assert meets(parse_condition("conc>=16", {}), {**LLAMA, "concurrency": "16"})
    for bad in ("isl=1024", "batch<8", "tp<x", "tp<8|isl==1"):
        with pytest.raises(ValueError, match="bad condition"):
            parse_condition(bad, {})


LLAMA_SCRIPT = """
# For 1k/1k, use batch_wait_max_tokens_ratio and batch_wait_timeout_iters
if [[ "$ISL" == "1024" && "$OSL" == "1024" && ${TP} -lt 8 ]]; then
cat > llama-config.yml << 'EOF'
batch_wait_max_tokens_ratio: 0.9
batch_wait_timeout_iters: 20
stream_interval: 10
EOF
else
cat > llama-config.yml << 'EOF'
stream_interval: 10
EOF
fi
while IFS= read -r line; do
    if [[ "$line" == *"Application startup complete"* ]]; then
        break
    fi
done
"""


def test_the_generator_reads_a_batch_wait_under_its_condition() -> None:
    """The branch's test is the condition; a wait outside any test (or in an ``else``) is
    unconditional; one under a test on anything else is marked ``?`` (not applied)."""
    assert batch_wait_of(LLAMA_SCRIPT) == (("isl==1024&osl==1024&tp<8", "20", "0.9"),)
    plain = "batch_wait_timeout_iters: 40\nbatch_wait_max_tokens_ratio: 0.8\n"
    assert batch_wait_of(plain) == (("", "40", "0.8"),)
    delayed = 'if [[ "$DELAY_BATCHING" == "true" ]]; then\nbatch_wait_timeout_iters: 40\nfi\n'
    assert batch_wait_of(delayed) == (("?", "40", ""),)
    assert batch_wait_of("stream_interval: 10\n") == ()
    assert bash_condition('$CONC -ge 16 && "$TP" == "4"') == "conc>=16&tp==4"
    assert bash_condition('"$DP_ATTENTION" == "true"') is None


def test_a_version_blank_group_takes_only_the_runs_that_swept_all_its_rows() -> None:
    """Commits whose job did not run one of the rows' (TP, concurrency) pairs are not the
    group's provenance (the Llama-3.1-70B FP4 entry ran image 1.1.0rc2.post2 for a day at
    concurrencies up to 64 before the batch wait, then up to 128 with it)."""
    found = {("k", "img:a"): ["early", "late"], ("k", "img:b"): ["old"], ("j", "img:a"): ["x"]}
    sweeps = {
        ("k", "early"): {(1, 4), (1, 64)},
        ("k", "late"): {(1, 4), (1, 64), (1, 128)},
        ("k", "old"): {(1, 4)},
        ("j", "x"): {(1, 4), (1, 128)},
    }
    assert covering_entries("k", found, sweeps, {(1, 4), (1, 128)}) == {("k", "img:a"): ["late"]}
    assert covering_entries("k", found, sweeps, {(1, 4)}) == {
        ("k", "img:a"): ["early", "late"],
        ("k", "img:b"): ["old"],
    }


AIC_ROW = {
    **QWEN,
    "model": "Qwen/Qwen3-32B",
    "hardware": "H100 SXM 80GB",
    "engine": "trtllm 1.0.0rc3",
    "gemm_quant": "fp8",
    "moe_quant": "",
    "tp": "2",
    "moe_ep": "1",
    "num_devices": "2",
    "isl": "2048",
    "osl": "256",
    "concurrency": "16",
}


@pytest.mark.parametrize(
    ("changes", "budget"),
    [
        ({}, 16 + 2048 + 1500),  # max_num_tokens = max_batch_size (the concurrency) + isl + 1500
        ({"concurrency": "128", "isl": "4096"}, 128 + 4096 + 1500),
        ({"model": "meta-llama/Llama-3.1-8B-Instruct", "gemm_quant": "unrecorded"}, 3564),
        ({"hardware": "H200 SXM 141GB"}, None),  # not the sweep's hardware
        ({"engine": "trtllm 1.0.0rc4"}, None),  # nor its build
        ({"concurrency": ""}, None),  # a budget needs the concurrency
    ],
)
def test_an_aiconfigurator_sweep_row_runs_under_its_generators_token_budget(
    changes: dict[str, str], budget: int | None
) -> None:
    settings = row_settings({**AIC_ROW, **changes})
    if budget is None:
        assert settings == DEFAULT_SETTINGS
        return
    assert settings.settings == "recipe" and settings.source == AIC_SWEEP_SOURCE
    assert settings.options == (("max_batched_tokens", budget),)
    assert settings.length_range_ratio == 1.0  # genai-perf: fixed lengths
    assert f"max_num_tokens {budget}" in settings.note
