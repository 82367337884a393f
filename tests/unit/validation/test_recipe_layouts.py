"""Agg rows whose recorded layout no engine runs replay as the deployment their recipe ran."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.core.errors import InvalidParameterError, UnsupportedError
from app.core.validation import DisaggReplay, replay_case_file
from app.core.validation.case_file import row_case
from app.core.validation.recipe_layouts import recipe_layout, recipe_layout_table
from app.services.validate import validate_cases
from scripts.inferencex_recipe_layouts import sglang_candidates, trtllm_candidates
from tests.unit.validation.test_case_file import file_of

GB200_TRT = {
    "case_id": "gb200-trt",
    "model": "deepseek-ai/DeepSeek-R1",
    "hardware": "GB200 (NVL72)",
    "engine": "trtllm (version blank)",
    "gemm_quant": "nvfp4",
    "moe_quant": "nvfp4",
    "tp": "36",
    "pp": "1",
    "attn_dp": "1",
    "moe_tp": "36",
    "moe_ep": "1",
    "num_devices": "36",
    "isl": "1024",
    "osl": "1024",
    "concurrency": "144",
    "ttft_ms": "1079.36",
    "tpot_ms": "7.70",
}
GB200_SGLANG = {
    **GB200_TRT,
    "case_id": "gb200-sglang",
    "engine": "sglang (version blank)",
    "gemm_quant": "fp8",
    "moe_quant": "fp8_block",
    "tp": "72",
    "moe_tp": "72",
    "num_devices": "72",
    "concurrency": "4608",
}
QWEN_H200 = {
    "case_id": "qwen-h200",
    "model": "Qwen/Qwen3.5-397B-A17B",
    "hardware": "H200 SXM 141GB",
    "engine": "sglang 0.5.9",
    "gemm_quant": "fp8",
    "moe_quant": "fp8_block",
    "tp": "64",
    "pp": "1",
    "attn_dp": "1",
    "moe_tp": "8",
    "moe_ep": "8",
    "num_devices": "64",
    "isl": "1024",
    "osl": "1024",
    "concurrency": "8",
    "ttft_ms": "500",
    "tpot_ms": "20",
}


def pools(row: dict[str, str]) -> tuple[str, str]:
    """The deployment a row replays in, as ``workers x tp/attn_dp/moe_ep`` per pool."""
    found = recipe_layout(row)
    assert found is not None and found.disaggregated is not None
    layout = dict(found.disaggregated.layout)
    return tuple(  # type: ignore[return-value]
        f"{layout[f'{p}_workers']}x{layout[f'{p}_tp']}/{layout[f'{p}_attn_dp']}/"
        f"{layout[f'{p}_moe_ep']}"
        for p in ("prefill", "decode")
    )


@pytest.mark.parametrize(
    ("changes", "deployment", "mtp", "settings", "running_cap"),
    [
        # 144 clients = 36 per generation server x 4: only the MTP=on TEP list has 36
        ({}, ("1x4/1/4", "4x8/1/8"), 3, "recipe", 32),
        # 564 = 141 x 4: only the MTP=off list
        ({"concurrency": "564"}, ("1x4/1/4", "4x8/1/8"), 0, "recipe", 128),
        # 4 = 1 x 4 is on both lists: MTP and the running cap unknown, neither applied
        ({"concurrency": "4"}, ("1x4/1/4", "4x8/1/8"), 0, "ambiguous", None),
        # a DEP32 generation worker beside one context worker: 4 + 32 GPUs
        ({"concurrency": "512"}, ("1x1/4/4", "1x1/32/32"), 3, "recipe", 16),
        # the row the replay read as an aggregated TP32 instance: 6 DEP4 + 1 DEP8, MTP 1
        ({"isl": "8192", "concurrency": "2150", "tp": "32", "moe_tp": "32",
          "num_devices": "32"}, ("6x1/4/4", "1x1/8/8"), 1, "recipe", 256),
    ],
)  # fmt: skip
def test_a_gb200_row_maps_to_the_deployment_its_launcher_ran(
    changes: dict[str, str],
    deployment: tuple[str, str],
    mtp: int,
    settings: str,
    running_cap: int | None,
) -> None:
    row = {**GB200_TRT, **changes}
    found = recipe_layout(row)
    assert found is not None and found.disaggregated is not None
    assert pools(row) == deployment
    assert found.disaggregated.num_mtp_tokens == mtp
    assert found.settings == settings == found.disaggregated.settings
    assert dict(found.disaggregated.decode_options).get("max_num_seqs") == running_cap
    assert ("kv_cache_dtype", "fp8") in found.disaggregated.prefill_options
    assert "GPU total" in found.note


def test_the_table_covers_only_rows_whose_recorded_layout_is_not_the_recipes() -> None:
    table = recipe_layout_table()
    # 35 TensorRT-LLM + 20 SGLang GB200 rows; tp x ep rows: 15 Qwen3.5 H200, 16 Qwen3.5 B200,
    # 35 gpt-oss-120b and 15 DeepSeek-R1 TensorRT-LLM H200, 33 DeepSeek FP4 SGLang B200 and 21
    # B300
    assert len(table) == 190
    assert recipe_layout({**GB200_TRT, "engine": "trtllm 1.2.0rc6.post1", "tp": "8"}) is None
    assert recipe_layout({**QWEN_H200, "tp": "8", "num_devices": "8"}) is None


def test_a_row_recorded_with_tp_times_ep_replays_as_the_one_server_its_recipe_ran() -> None:
    """The Qwen3.5 H200 rows record tp 64 = the entry's tp 8 x ep 8: the same prediction as
    the row recorded as that 8-GPU server, under the same recipe settings."""
    server = {**QWEN_H200, "case_id": "server", "tp": "8", "moe_tp": "1", "num_devices": "8"}
    report = replay_case_file(file_of(QWEN_H200, server))
    recorded, written = report.outcomes
    assert recorded.error == "" and recorded.ttft_ms_pred is not None
    assert (recorded.ttft_ms_pred, recorded.tpot_ms_pred) == (
        written.ttft_ms_pred,
        written.tpot_ms_pred,
    )
    assert recorded.settings == written.settings == "ambiguous"  # its -mtp twin, as before
    assert "tp 8 x ep 8" in recorded.settings_note
    case = row_case(QWEN_H200)
    assert (case.tp, case.dp, case.ep) == (8, 1, 8)


def test_a_row_run_disaggregated_replays_through_the_disaggregated_simulation() -> None:
    found = recipe_layout(GB200_TRT)
    assert found is not None and found.disaggregated is not None
    replay = DisaggReplay()
    report = replay_case_file(file_of(GB200_TRT), disaggregated=replay.predict)
    (outcome,) = report.outcomes
    assert outcome.error == "" and outcome.settings == "recipe"
    assert (outcome.ttft_ms_pred, outcome.tpot_ms_pred) == DisaggReplay().predict(
        GB200_TRT, found.disaggregated
    )
    assert outcome.ttft_ms_interval is None  # the intervals are the aggregated rows'
    # the deployment's MTP 3 is what ran: without it the same deployment decodes slower
    plain = DisaggReplay().predict(GB200_TRT, found.disaggregated.__class__(
        layout=found.disaggregated.layout, decode_options=found.disaggregated.decode_options,
        prefill_options=found.disaggregated.prefill_options,
    ))  # fmt: skip
    assert outcome.tpot_ms_pred is not None and plain[1] > outcome.tpot_ms_pred * 1.3
    # the service's validate replays it the same way
    (served,) = validate_cases(file_of(GB200_TRT)).outcomes
    assert (served.ttft_ms_pred, served.tpot_ms_pred) == (
        outcome.ttft_ms_pred,
        outcome.tpot_ms_pred,
    )


def test_without_the_disaggregated_replay_such_a_row_is_refused_naming_its_deployment() -> None:
    (outcome,) = replay_case_file(file_of(GB200_TRT)).outcomes
    assert outcome.refused and "1 prefill x 4/1/4, 4 decode x 8/1/8" in outcome.error
    with pytest.raises(UnsupportedError, match="disaggregated deployment of its recipe"):
        row_case(GB200_TRT)


def test_a_deployment_with_redundant_expert_slots_replays_with_them() -> None:
    """The GB200 SGLang rows ran 3 DEP8 prefill + 1 DEP48 decode workers with 32 redundant
    expert slots (288 over 48 ranks, 6 each): both pools' runners hold them, which is what lets
    48 ranks split DeepSeek-R1's 256 experts; the refusal that named the setting is gone."""
    assert pools(GB200_SGLANG) == ("3x1/8/8", "1x1/48/48")
    found = recipe_layout(GB200_SGLANG)
    assert found is not None and found.disaggregated is not None
    settings = found.disaggregated
    assert settings.unmodelled == ""
    assert ("redundant_experts", 32) in settings.prefill_options
    assert ("redundant_experts", 32) in settings.decode_options
    (outcome,) = validate_cases(file_of(GB200_SGLANG)).outcomes
    assert not outcome.refused and outcome.error == "" and outcome.settings == "recipe"
    assert (outcome.ttft_ms_pred, outcome.tpot_ms_pred) == DisaggReplay().predict(
        GB200_SGLANG, settings
    )
    # without the slots the decode pool's 48 ranks cannot hold the experts evenly
    bare = replace(
        settings,
        prefill_options=tuple(o for o in settings.prefill_options if o[0] != "redundant_experts"),
        decode_options=tuple(o for o in settings.decode_options if o[0] != "redundant_experts"),
    )
    with pytest.raises(InvalidParameterError, match="a divisor of num_experts=256"):
        DisaggReplay().predict(GB200_SGLANG, bare)


LAUNCHER = """
        if [ "$isl" = "1024" ] && [ "$osl" = "1024" ]; then
                ./submit_disagg.sh "mtp=on" "tep" 1 4 8 32 128 "0.9" 3 0 "1 36"
                ./submit_disagg.sh "mtp=off" "dep" 2 1 16 256 256 "0.75" 0 0 "2048"
        elif [ "$isl" = "8192" ] && [ "$osl" = "1024" ]; then
                ./submit_disagg.sh "mtp=on" "dep" 6 1 8 256 512 "0.8" 1 0 "2150"
        fi
    if [ "$ISL" = "1024" ] && [ "$OSL" = "1024" ]; then
        concurrency_list="1024x4608"
        bash ./submit_disagg.sh 6 3 12 1 8 $ISL $OSL $concurrency_list inf
    fi
"""


def test_the_generator_reads_the_launcher_lines_as_deployments_and_client_counts() -> None:
    """A TensorRT-LLM line's concurrencies are per generation server (Dynamo's bench.sh runs
    each times the servers); a deployment's GPUs are 4 per context worker plus the generation
    workers', or 4 per SGLang node."""
    trt = trtllm_candidates(LAUNCHER)
    assert set(trt) == {
        ("1024", "1024", "4", "36"),
        ("1024", "1024", "144", "36"),
        ("1024", "1024", "2048", "24"),
        ("8192", "1024", "2150", "32"),
    }
    (tep,) = trt[("1024", "1024", "144", "36")]
    assert (tep["prefill"], tep["decode"], tep["num_mtp_tokens"]) == ("1x4/1/4", "4x8/1/8", "3")
    (dep,) = trt[("1024", "1024", "2048", "24")]
    assert (dep["prefill"], dep["decode"], dep["decode_max_batch_size"]) == (
        "2x1/4/4",
        "1x1/16/16",
        "256",
    )
    sgl = sglang_candidates(LAUNCHER)
    assert set(sgl) == {("1024", "1024", "1024", "72"), ("1024", "1024", "4608", "72")}
    (deployment,) = sgl[("1024", "1024", "4608", "72")]
    assert (deployment["prefill"], deployment["decode"]) == ("3x1/8/8", "1x1/48/48")
    assert (deployment["redundant_experts"], deployment["unmodelled"]) == ("32", "")


GPT_OSS_H200 = {
    **QWEN_H200,
    "case_id": "gpt-oss-h200",
    "model": "openai/gpt-oss-120b",
    "engine": "trtllm gpt-oss-dev",
    "gemm_quant": "nvfp4",
    "moe_quant": "nvfp4",
    "tp": "4",
    "moe_tp": "2",
    "moe_ep": "2",
    "num_devices": "4",
    "concurrency": "4",
    "ttft_ms": "105",
    "tpot_ms": "5.9",
}


@pytest.mark.parametrize(
    ("changes", "layout"),
    [
        ({}, (2, 1, 2)),  # InferenceX tp2_ep2: recorded tp 4
        ({"tp": "16", "moe_tp": "4", "moe_ep": "4", "num_devices": "16"}, (4, 1, 4)),
        ({"tp": "64", "moe_tp": "8", "moe_ep": "8", "num_devices": "64"}, (8, 1, 8)),
    ],
)  # fmt: skip
def test_a_gpt_oss_h200_row_recorded_with_tp_times_ep_replays_on_its_server(
    changes: dict[str, str], layout: tuple[int, int, int]
) -> None:
    """gptoss-fp4-h200-trt runs tp = ep in 1, 2, 4, 8 on one server; the rows record tp x ep."""
    row = {**GPT_OSS_H200, **changes}
    case = row_case(row)
    assert (case.tp, case.dp, case.ep) == layout
    found = recipe_layout(row)
    assert found is not None and found.settings == "recipe"
    assert "gptoss-fp4-h200-trt" in found.source


def test_a_row_that_records_its_servers_own_tp_at_a_mapped_key_keeps_its_layout() -> None:
    """A TP4 / EP4 row written as tp 4, moe_ep 4 shares the key of the tp2_ep2 rows (tp 4):
    its moe columns say it is not the entry's tp x ep, so it replays as recorded."""
    row = {**GPT_OSS_H200, "moe_tp": "1", "moe_ep": "4"}
    assert recipe_layout(row) is None
    case = row_case(row)
    assert (case.tp, case.dp, case.ep) == (4, 1, 4)


DSR1_FP4_B200 = {
    **QWEN_H200,
    "case_id": "dsr1-fp4-b200",
    "model": "deepseek-ai/DeepSeek-V3",
    "hardware": "B200 180GB",
    "engine": "sglang 0.5.9",
    "gemm_quant": "nvfp4",
    "moe_quant": "nvfp4",
    "tp": "16",
    "moe_tp": "4",
    "moe_ep": "4",
    "num_devices": "16",
    "concurrency": "4",
    "ttft_ms": "208",
    "tpot_ms": "9.0",
}


@pytest.mark.parametrize(
    ("changes", "layout", "entry"),
    [
        ({}, (4, 1, 4), "dsr1-fp4-b200-sglang"),  # InferenceX tp4_ep4: recorded tp 16
        (
            {"tp": "64", "moe_tp": "8", "moe_ep": "8", "num_devices": "64"},
            (8, 1, 8),
            "dsr1-fp4-b200-sglang",
        ),
        (
            {"hardware": "B300 SXM 288GB", "engine": "sglang 0.5.10.post1"},
            (4, 1, 4),
            "dsr1-fp4-b300-sglang",
        ),
    ],
)  # fmt: skip
def test_a_deepseek_fp4_sglang_row_recorded_with_tp_times_ep_replays_on_its_server(
    changes: dict[str, str], layout: tuple[int, int, int], entry: str
) -> None:
    """dsr1-fp4-b200-sglang / -b300-sglang run tp 4 / ep 4 and tp 8 / ep 8 on one server
    (``--tensor-parallel-size $TP --ep-size $EP_SIZE``); the rows record tp x ep, which replayed
    them over 16 and 64 GPUs."""
    row = {**DSR1_FP4_B200, **changes}
    case = row_case(row)
    assert (case.tp, case.dp, case.ep) == layout
    found = recipe_layout(row)
    assert found is not None and found.settings == "recipe"
    assert entry in found.source
    # the FP8 rows of the same model and hardware are another entry's: not mapped by this one
    assert recipe_layout({**row, "gemm_quant": "fp8", "moe_quant": "fp8"}) is None
