"""``validate --cases`` on a file of disaggregated deployments: rows of the shared sample."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pytest

from app.core.catalog.devices import get_device
from app.core.errors import InvalidParameterError
from app.core.validation import (
    CASE_COLUMNS,
    DISAGG_CASE_COLUMNS,
    DisaggReplay,
    is_disagg_header,
    replay_disagg_file,
)
from app.core.validation.case_file import OUT_COLUMNS
from app.core.validation.disagg_file import (
    FIRST_TOKEN_RULE,
    KV_TRANSFER_FIXED_MS,
    kv_transfer,
    pool_layout,
)
from app.core.workload import ranks_are_coupled
from app.core.workload.disagg_serving import FIRST_TOKEN_RULES

#: Rows of shared/validation/measured_disagg_serving_cases.csv (AIConfigurator's silicon sample,
#: aiconfigurator-core 0.12.0), verbatim: TensorRT-LLM, SGLang and vLLM; H100/H200/B200/B300;
#: DeepSeek-V3/R1 with coupled attention-DP ranks, Qwen3-32B and Qwen3-235B.
SAMPLE = (Path(__file__).parent / "disagg_sample.csv").read_text(encoding="utf-8")
#: Rows whose pools run attention data parallelism with every expert tensor-parallel over all
#: the worker's ranks (no expert parallelism): replayed in that layout (``moe_over_dp``).
EXPERTS_OVER_DP = {
    # TensorRT-LLM's attention DP with the experts tensor-parallel over all 8 ranks
    "dsr1_b200_trtllm_fp8_disagg_8192x1024_c128_cfg666",
    # vLLM's data parallelism without expert parallelism: the (DP x TP) expert group
    "qwen3_235b_a22b_qwen3_235b_a22b_h100_sxm_vllm_disagg_4000x1000_c_tpnone_epnone_2",
}


def test_the_header_says_which_replay_a_file_gets() -> None:
    assert is_disagg_header(SAMPLE)
    assert not is_disagg_header(",".join(CASE_COLUMNS) + "\n")
    assert tuple(SAMPLE.splitlines()[0].split(",")) == DISAGG_CASE_COLUMNS


def test_real_rows_are_predicted_or_refused_with_the_reason() -> None:
    report = replay_disagg_file(SAMPLE)
    out = list(csv.DictReader(io.StringIO(report.to_csv())))
    assert tuple(out[0]) == OUT_COLUMNS
    assert [r["case_id"] for r in out] == [line.split(",")[0] for line in SAMPLE.splitlines()[1:]]
    assert {r["case_id"] for r in out} >= EXPERTS_OVER_DP
    for row in out:
        assert row["error"] == "", row
        for column in ("ttft_ms_pred", "tpot_ms_pred"):
            value = float(row[column])
            assert math.isfinite(value) and value > 0
    assert report.overall.rows == 8 and report.overall.refused == 0
    groups = {g.group for g in report.by_engine}
    assert "B200 180GB | trtllm" in groups and "H100 SXM 80GB | vllm" in groups
    assert any(
        g.group == "H200 SXM 141GB | sglang | deepseek-ai/DeepSeek-R1" for g in report.by_model
    )
    assert "overall" in report.format_table()


def test_a_row_whose_layout_does_not_add_up_is_refused() -> None:
    header, *rows = SAMPLE.splitlines()
    row = dict(zip(header.split(","), rows[1].split(","), strict=True))  # SGLang, DeepSeek-V3
    broken = {**row, "case_id": "devices", "num_devices": "15"}
    split = {**row, "case_id": "split", "decode_moe_ep": "4"}  # 1 x 4 experts over 8 ranks
    # 671 B parameters on one GPU (at a client count no recipe lists: the recorded layout runs)
    fits = {**row, "case_id": "fits", "prefill_tp": "1", "prefill_moe_tp": "1", "num_devices": "9"}
    fits["concurrency"] = "3"
    text = "\n".join(
        [header, *(",".join(r[c] for c in DISAGG_CASE_COLUMNS) for r in (broken, split, fits))]
    )
    errors = {o.case_id: o.error for o in replay_disagg_file(text).outcomes}
    assert "num_devices=15" in errors["devices"] and "8 + 8" in errors["devices"]
    assert "decode_moe_tp" in errors["split"] and "= 8" in errors["split"]
    assert "prefill worker" in errors["fits"] and "no room" in errors["fits"]


def test_a_layout_that_does_not_divide_the_model_is_refused() -> None:
    header, *rows = SAMPLE.splitlines()
    row = dict(zip(header.split(","), rows[5].split(","), strict=True))  # vLLM, Qwen3-32B
    odd = {**row, "decode_tp": "3", "num_devices": str(8 + 2 * 3)}
    text = "\n".join([header, ",".join(odd[c] for c in DISAGG_CASE_COLUMNS)])
    (outcome,) = replay_disagg_file(text).outcomes
    assert outcome.refused and "tp=3" in outcome.error and "num_attention_heads" in outcome.error


def test_the_columns_are_checked_exactly() -> None:
    text = SAMPLE.replace("prefill_workers,", "prefill_workerz,", 1)
    with pytest.raises(InvalidParameterError, match="missing prefill_workers"):
        replay_disagg_file(text)


def test_the_transfer_tier_is_the_innermost_that_holds_the_deployment() -> None:
    """Inside one 8-GPU NVLink node the KV moves over NVLink, across nodes over the GPU's NIC:
    the same bytes take longer; an NVL72 rack keeps 72 GPUs on NVLink."""
    h100 = get_device("NVIDIA_H100_SXM_80G")
    node, cluster = kv_transfer(h100, 8, 1e8), kv_transfer(h100, 16, 1e8)
    assert cluster.bandwidth_bytes_per_s < node.bandwidth_bytes_per_s / 5
    assert cluster.time_ms(1) > node.time_ms(1) > KV_TRANSFER_FIXED_MS
    assert node.fixed_ms == cluster.fixed_ms == KV_TRANSFER_FIXED_MS
    gb200 = get_device("NVIDIA_GB200_186G")
    rack, beyond = kv_transfer(gb200, 72, 1e8), kv_transfer(gb200, 80, 1e8)
    assert rack.bandwidth_bytes_per_s > node.bandwidth_bytes_per_s > beyond.bandwidth_bytes_per_s


def test_a_longer_prompt_moves_more_kv_and_waits_longer_for_its_first_token() -> None:
    header, *rows = SAMPLE.splitlines()
    row = dict(zip(header.split(","), rows[6].split(","), strict=True))  # H200 SGLang R1, c=4
    replay = DisaggReplay()
    short = replay.simulate(row)
    long = replay.simulate({**row, "isl": "8192"})
    assert long.transfer_ms > short.transfer_ms > KV_TRANSFER_FIXED_MS
    assert long.ttft_ms > short.ttft_ms
    assert replay.simulate(row) is short  # memoised per row's inputs


def test_every_engine_profile_has_a_first_token_rule() -> None:
    from app.core.profiles import PROFILES

    assert set(FIRST_TOKEN_RULE) == set(PROFILES)
    assert set(FIRST_TOKEN_RULE.values()) <= set(FIRST_TOKEN_RULES)


def test_the_unset_expert_split_is_the_engines_default() -> None:
    row = {
        "prefill_workers": "1",
        "prefill_tp": "4",
        "prefill_attn_dp": "1",
        "prefill_moe_tp": "1",
        "prefill_moe_ep": "1",
    }
    layout = pool_layout(row, "prefill", is_moe=True)
    assert (layout.tp, layout.dp, layout.ep, layout.devices) == (4, 1, 1, 4)


def test_layout_duplicates_can_be_left_out() -> None:
    """A row that repeats a smaller deployment's measurement to the digit (here on a second
    prefill worker) is a recording duplicate: --drop-layout-duplicates leaves it out."""
    header, *rows = SAMPLE.splitlines()
    row = dict(zip(header.split(","), rows[6].split(","), strict=True))  # H200 SGLang R1, c=4
    bigger = {**row, "case_id": "bigger", "prefill_workers": "2", "num_devices": "24"}
    text = "\n".join([header, rows[6], ",".join(bigger[c] for c in DISAGG_CASE_COLUMNS)])
    assert [o.case_id for o in replay_disagg_file(text).outcomes] == [row["case_id"], "bigger"]
    kept = replay_disagg_file(text, drop_layout_duplicates=True).outcomes
    assert [o.case_id for o in kept] == [row["case_id"]]


def test_attention_dp_without_expert_parallelism_runs_the_experts_over_every_rank() -> None:
    """``attn_dp`` 8 with the experts tensor-parallel over the 8 ranks (``moe_tp`` 8,
    ``moe_ep`` 1), or recorded as "none" (both 1): one coupled worker whose experts split over
    all its ranks; a split that is not the devices' is still refused."""
    row = {"prefill_workers": "1", "prefill_tp": "1", "prefill_attn_dp": "8"}
    for moe_tp in ("8", "1"):
        pool = pool_layout(
            {**row, "prefill_moe_tp": moe_tp, "prefill_moe_ep": "1"}, "prefill", is_moe=True
        )
        assert pool.moe_over_dp and pool.layout.moe_over_dp
        assert ranks_are_coupled(True, pool.layout)
        assert pool.layout.label == "TP1 DP8 MoE-TP8"
    with pytest.raises(InvalidParameterError, match="prefill_moe_tp"):
        pool_layout({**row, "prefill_moe_tp": "4", "prefill_moe_ep": "1"}, "prefill", is_moe=True)
    split = {**row, "prefill_moe_tp": "8", "prefill_moe_ep": "1"}
    dense = pool_layout(split, "prefill", is_moe=False)
    assert not dense.moe_over_dp
