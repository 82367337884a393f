"""Recipe settings of measured disaggregated rows (InferenceX Dynamo recipes): the table, MTP,
an unknown recipe name, a setting the product cannot model."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from app.core.errors import InvalidParameterError, UnsupportedError
from app.core.profiles import get_profile
from app.core.validation import DISAGG_CASE_COLUMNS, DisaggReplay, replay_disagg_file
from app.core.validation.disagg_file import candidate_centre
from app.core.validation.disagg_recipes import (
    DEFAULT_DISAGG_SETTINGS,
    DISAGG_RECIPE_SETTINGS,
    MTP_ACCEPTANCE_RATES,
    SA_BENCH_LENGTH_RANGE_RATIO,
    DisaggSettings,
    disagg_recipe_table,
    disagg_row_settings,
    disagg_settings,
)
from app.core.validation.predict import engine_family
from app.core.workload.disagg_serving import DisaggServingResult
from tests.api.helpers import run
from tests.unit.validation.test_case_file import file_of

#: A row's provenance as the measured file records it (DeepSeek-V3 FP4 on B200, TensorRT-LLM
#: 0.8.1.post1, one DEP4 prefill and two DEP8 decode workers, 2,192 clients): InferenceX ran it
#: with srt-slurm's ``recipes/trtllm/b200-fp4/1k1k/stp/ctx1_gen2_dep8_batch128_eplb0_mtp0.yaml``.
ROW = {
    "case_id": "r",
    "model": "deepseek-ai/DeepSeek-V3",
    "hardware": "B200 180GB",
    "engine": "trtllm 0.8.1.post1",
    "gemm_quant": "nvfp4",
    "moe_quant": "nvfp4",
    "isl": "1024",
    "osl": "1024",
    "concurrency": "2192",
    "prefill_workers": "1",
    "prefill_batch_size": "",
    "prefill_tp": "1",
    "prefill_attn_dp": "4",
    "prefill_moe_tp": "1",
    "prefill_moe_ep": "4",
    "decode_workers": "2",
    "decode_batch_size": "",
    "decode_tp": "1",
    "decode_attn_dp": "8",
    "decode_moe_tp": "1",
    "decode_moe_ep": "8",
    "num_devices": "20",
    "ttft_ms": "2000",
    "tpot_ms": "40",
}


def test_the_table_loads_and_every_row_is_a_valid_override_of_its_engine() -> None:
    table = disagg_recipe_table()
    with DISAGG_RECIPE_SETTINGS.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(table) == len(rows) > 300
    for row in rows:
        found = table[next(k for k, v in table.items() if v.source.endswith(row["source"]))]
        family = get_profile(engine_family(row["engine"]))
        family.with_overrides(dict(found.prefill_options))
        family.with_overrides(dict(found.decode_options))
        assert 0 <= found.num_mtp_tokens <= len(MTP_ACCEPTANCE_RATES)
        assert found.settings in ("recipe", "ambiguous")
        assert (found.note != "") is (found.settings == "ambiguous")


def test_a_row_maps_to_its_recipe_by_its_provenance() -> None:
    found = disagg_row_settings(ROW)
    assert (found.settings, found.recipe, found.num_mtp_tokens) == (
        "recipe",
        "ctx1_gen2_dep8_batch128_eplb0_mtp0",
        0,
    )
    assert found.decode_options == (
        ("kv_cache_dtype", "fp8"),
        ("memory_fraction", 0.8),
        ("max_num_seqs", 128),
    )
    assert "srt-slurm" in found.source and found.source.startswith("SemiAnalysisAI/InferenceX")
    assert disagg_row_settings({**ROW, "concurrency": "3"}) == DEFAULT_DISAGG_SETTINGS


def test_a_row_with_a_recipe_replays_sa_benchs_length_range() -> None:
    """srtctl's ``sa-bench`` passes ``--random-range-ratio 0.8`` unless a recipe sets one (none
    does): every row with a recipe, and each of its candidate recipes, replays lengths drawn
    from 0.8-1.0 of the nominal ones, and the range moves the prediction; a row without a
    recipe keeps fixed lengths."""
    found = disagg_row_settings(ROW)
    assert found.length_range_ratio == SA_BENCH_LENGTH_RANGE_RATIO == 0.8
    assert DEFAULT_DISAGG_SETTINGS.length_range_ratio == 1.0
    several = next(v for v in disagg_recipe_table().values() if v.candidates)
    assert {c.length_range_ratio for c in several.candidates} == {0.8}
    # the same table row read for the aggregated file's layouts (not sa-bench runs): fixed
    with DISAGG_RECIPE_SETTINGS.open(encoding="utf-8", newline="") as handle:
        first = next(r for r in csv.DictReader(handle) if r["candidates"].count(" | "))
    assert disagg_settings(first).length_range_ratio == 1.0
    assert {c.length_range_ratio for c in disagg_settings(first).candidates} == {1.0}
    fixed = DisaggReplay().predict(ROW, replace(found, length_range_ratio=1.0))
    assert DisaggReplay().predict(ROW, found) != pytest.approx(fixed, rel=1e-3)


def test_mtp_decodes_faster_per_token_and_the_replay_says_which_settings_ran() -> None:
    recipe = disagg_row_settings(ROW)
    mtp = replace(recipe, num_mtp_tokens=3)
    plain_ttft, plain_tpot = DisaggReplay().predict(ROW, recipe)
    _, mtp_tpot = DisaggReplay().predict(ROW, mtp)
    assert mtp_tpot < plain_tpot
    report = replay_disagg_file(
        file_of(ROW, {**ROW, "case_id": "d", "concurrency": "3"}, columns=DISAGG_CASE_COLUMNS)
    )
    out = list(csv.DictReader(io.StringIO(report.to_csv())))
    assert [r["settings"] for r in out] == ["recipe", "default"]
    assert float(out[0]["ttft_ms_pred"]) == pytest.approx(plain_ttft)
    assert "ctx1_gen2_dep8_batch128_eplb0_mtp0.yaml" in out[0]["settings_note"]


def test_a_row_may_name_its_recipe_and_an_unknown_name_is_refused() -> None:
    named = disagg_row_settings(
        {**ROW, "concurrency": "3", "recipe": "ctx1_gen2_dep8_batch128_eplb0_mtp0"}
    )
    assert named.settings == "recipe" and named.decode_options[-1] == ("max_num_seqs", 128)
    with pytest.raises(InvalidParameterError, match="no_such_recipe"):
        disagg_row_settings({**ROW, "recipe": "no_such_recipe"})


def test_an_unknown_recipe_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = tmp_path / "disagg.csv"
    cases.write_text(
        file_of({**ROW, "recipe": "no_such_recipe"}, columns=(*DISAGG_CASE_COLUMNS, "recipe")),
        encoding="utf-8",
    )
    code, out, err = run(["validate", "--cases", str(cases)], capsys)
    assert code == 2 and out == ""
    assert "no_such_recipe" in err and len(err.strip().splitlines()) == 1


def test_a_setting_the_product_cannot_model_refuses_the_row_naming_it() -> None:
    settings = replace(disagg_row_settings(ROW), unmodelled="speculative-eagle-topk=4")
    with pytest.raises(UnsupportedError, match="speculative-eagle-topk=4") as caught:
        DisaggReplay().predict(ROW, settings)
    assert "not modelled" in str(caught.value)


def test_a_row_recorded_in_another_layout_replays_in_its_recipes_with_its_mtp() -> None:
    """``..._c875_tp4_0_ep4_0_1138`` records 1 x TP4/EP4 + 1 x TP8/EP4 (12 GPUs); the one recipe
    at that concurrency, ``ctx1_gen5_dep8_batch16_eplb0_mtp3``, ran 1 DEP4 + 5 DEP8 (44 GPUs)."""
    recorded = {
        **ROW,
        "model": "deepseek-ai/DeepSeek-R1",
        "concurrency": "875",
        "decode_workers": "1",
        **{f"{pool}_attn_dp": "1" for pool in ("prefill", "decode")},
        **{"prefill_tp": "4", "prefill_moe_tp": "1", "prefill_moe_ep": "4"},
        **{"decode_tp": "8", "decode_moe_tp": "2", "decode_moe_ep": "4", "num_devices": "12"},
    }
    found = disagg_row_settings(recorded)
    assert (found.settings, found.recipe, found.num_mtp_tokens) == (
        "ambiguous",
        "ctx1_gen5_dep8_batch16_eplb0_mtp3",
        3,
    )
    assert dict(found.layout) == {
        **{"prefill_workers": "1", "prefill_tp": "1", "prefill_attn_dp": "4"},
        **{"prefill_moe_ep": "4", "prefill_moe_tp": "1"},
        **{"decode_workers": "5", "decode_tp": "1", "decode_attn_dp": "8"},
        **{"decode_moe_ep": "8", "decode_moe_tp": "1", "num_devices": "44"},
    }
    assert "replayed in the recipe's" in found.note
    as_run = {**recorded, **dict(found.layout)}
    assert DisaggReplay().predict(recorded, found) == DisaggReplay().predict(
        as_run, replace(found, layout=())
    )


#: srt-slurm's consolidated B200 FP8 SGLang recipe (``recipes/b200-fp8/1k1k.yaml`` on
#: ``sa-submission-q2-2026``), cut to the keys the table reads: a ``base`` and variants that
#: ``srtctl apply -f FILE.yaml:zip_override_mtp_lowlat[1]`` lays over it.
CONSOLIDATED = {
    "base": {
        "resources": {"decode_workers": 1},
        "backend": {
            "sglang_config": {
                "prefill": {"mem-fraction-static": 0.85, "kv-cache-dtype": "fp8_e4m3"},
                "decode": {
                    "mem-fraction-static": 0.85,
                    "kv-cache-dtype": "fp8_e4m3",
                    "max-running-requests": 512,
                },
            }
        },
    },
    "zip_override_mtp_lowlat": {
        "resources": {"decode_workers": [1, 3]},
        "backend": {
            "sglang_config": {
                "decode": {
                    "speculative-algorithm": "EAGLE",
                    "speculative-num-steps": 2,
                    "speculative-eagle-topk": 1,
                }
            }
        },
    },
    "override_mtp_maxtpt_1p2d": {
        "backend": {
            "sglang_config": {
                "decode": {
                    "speculative-algorithm": "EAGLE",
                    "speculative-num-steps": 1,
                    "data-parallel-size": 8,
                    "enable-dp-attention": True,
                }
            }
        }
    },
}


def test_a_consolidated_recipe_is_read_as_the_variant_its_config_names() -> None:
    """Read as a plain recipe, the file has no ``backend`` at its top: every setting came out
    blank or default (no speculation, 16-bit KV), which replayed MTP rows without MTP."""
    from scripts.inferencex_disagg_recipes import sglang_settings, variant

    low = variant(CONSOLIDATED, "zip_override_mtp_lowlat[1]")
    assert low["resources"] == {"decode_workers": 3}
    found = sglang_settings(low)
    assert (found["num_mtp_tokens"], found["kv_cache_dtype"]) == ("2", "fp8")
    assert (found["decode_memory_fraction"], found["decode_max_batch_size"]) == ("0.85", "512")
    wide = sglang_settings(variant(CONSOLIDATED, "override_mtp_maxtpt_1p2d"))
    assert (wide["num_mtp_tokens"], wide["decode_max_batch_size"]) == ("1", "64")  # 512 / 8
    assert sglang_settings(variant(CONSOLIDATED, ""))["num_mtp_tokens"] == "0"  # the base
    assert sglang_settings(CONSOLIDATED)["kv_cache_dtype"] == "default"  # the old misreading


_TEP8 = {"tp": "8", "attn_dp": "1", "moe_tp": "1", "moe_ep": "8"}
_RESULT = DisaggServingResult(
    ttft_ms=1.0,
    tpot_ms=1.0,
    e2e_ms=1.0,
    makespan_ms=1.0,
    throughput_tokens_s=1.0,
    request_throughput_s=1.0,
    num_requests=1,
    prefill_queue_ms=0.0,
    transfer_ms=0.0,
    decode_wait_ms=0.0,
    prefill_utilisation=0.0,
    decode_utilisation=0.0,
    binding_pool="decode",
    prefill_jobs=1,
    decode_runs=1,
    forward_evaluations=1,
)

#: DeepSeek-R1 FP8 on B200 under SGLang 0.5.8.post1, 1024/1024 tokens, one TEP8 prefill and one
#: TEP8 decode worker as the file records them.
SGLANG_ROW = {
    **ROW,
    "model": "deepseek-ai/DeepSeek-R1",
    "engine": "sglang 0.5.8.post1",
    "gemm_quant": "fp8",
    "moe_quant": "fp8_block",
    **{f"{pool}_{c}": v for pool in ("prefill", "decode") for c, v in _TEP8.items()},
    "decode_workers": "1",
    "num_devices": "16",
}


def test_an_mtp_only_key_decodes_with_its_recipes_drafts() -> None:
    """At 64 clients InferenceX ran only the ``-mtp`` entry's ``low-latency-tep8-1p1d``
    (``zip_override_mtp_lowlat[0]``: EAGLE with 2 steps, FP8 KV, static fraction 0.85);
    measured TPOT 14.0-15.8 ms, 27.7 ms replayed without the drafts."""
    found = disagg_row_settings({**SGLANG_ROW, "concurrency": "64"})
    assert found.num_mtp_tokens == 2 and not found.candidates
    assert ("kv_cache_dtype", "fp8") in found.decode_options
    assert ("memory_fraction", 0.85) in found.decode_options


def test_an_sglang_recipes_prefill_budget_is_its_chunk_per_attention_dp_rank() -> None:
    """SGLang divides ``--chunked-prefill-size`` among the attention-DP ranks
    (``ServerArgs._handle_data_parallelism``) and caps a prefill batch at
    ``--max-prefill-tokens``: ``h200/1k1k/bs256-1p6d-dep`` (262,144 over DP 8, at most 65,536)
    gives each prefill rank 32,768 tokens; ``b200-fp8/1k1k.yaml`` (32,768, no DP attention) the
    whole 32,768; the replay's prefill pool runs that budget."""
    from scripts.inferencex_disagg_recipes import sglang_prefill_budget

    dep = {"dp-size": 8, "enable-dp-attention": True, "chunked-prefill-size": 262144}
    assert sglang_prefill_budget({**dep, "max-prefill-tokens": 65536}) == "32768"
    assert sglang_prefill_budget({**dep, "max-prefill-tokens": 16384}) == "16384"
    assert sglang_prefill_budget({**dep, "enable-dp-attention": False}) == "262144"
    assert sglang_prefill_budget({"max-prefill-tokens": 2048}) == "2048"
    assert sglang_prefill_budget({}) == ""
    found = disagg_row_settings({**SGLANG_ROW, "concurrency": "64"})
    assert ("max_batched_tokens", 32768) in found.prefill_options
    assert all(name != "max_batched_tokens" for name, _ in found.decode_options)


def test_a_row_with_several_candidate_recipes_replays_as_their_centre() -> None:
    """At 4 clients the entry and its ``-mtp`` twin both ran the 1P1D TEP8 recipe; the file's
    replicas of that configuration measured TPOT 4.7-4.9 ms and 9.8 ms, one of each."""
    row = {**SGLANG_ROW, "concurrency": "4"}
    found = disagg_row_settings(row)
    assert sorted(c.num_mtp_tokens for c in found.candidates) == [0, 2]
    assert "centre of the 2 candidate recipes" in found.note
    replay = DisaggReplay()
    each = [replay.simulate(row, c) for c in found.candidates]
    plain, mtp = sorted(each, key=lambda r: -r.tpot_ms)
    assert mtp.tpot_ms < 0.7 * plain.tpot_ms  # two drafts at 0.9 / 0.6 acceptance
    ttft, tpot = replay.predict(row, found)
    assert tpot == pytest.approx(math.sqrt(plain.tpot_ms * mtp.tpot_ms))
    assert ttft == pytest.approx(math.sqrt(plain.ttft_ms * mtp.ttft_ms))


def test_the_centre_leaves_out_a_refused_candidate_and_refuses_when_all_are() -> None:
    a, b, c = (replace(DEFAULT_DISAGG_SETTINGS, recipe=name) for name in "abc")
    results = {"a": (100.0, 4.0), "b": (400.0, 16.0)}

    def simulate(row: Mapping[str, str], s: DisaggSettings) -> DisaggServingResult:
        if s.recipe not in results:
            raise UnsupportedError(f"{s.recipe} is not modelled")
        ttft, tpot = results[s.recipe]
        return replace(_RESULT, ttft_ms=ttft, tpot_ms=tpot)

    assert candidate_centre(ROW, (a, b, c), simulate) == pytest.approx((200.0, 8.0))
    with pytest.raises(UnsupportedError, match="c is not"):
        candidate_centre(ROW, (c,), simulate)


def test_a_trtllm_recipes_context_token_budget_is_the_prefill_pools() -> None:
    """``ctx8_gen1_dep8_batch256_eplb0_mtp0`` (B300 FP4, 8192/1024) gives its context servers
    ``max_num_tokens: 16896``: two 8k prompts per rank and forward, not the profile's one."""
    from scripts.inferencex_disagg_recipes import trtllm_settings

    recipe = {
        "backend": {
            "trtllm_config": {
                "prefill": {"max_num_tokens": 16896, "enable_attention_dp": True},
                "decode": {"max_batch_size": 256, "max_num_tokens": 256},
            }
        }
    }
    assert trtllm_settings(recipe)["prefill_max_num_tokens"] == "16896"
    row = {
        **ROW,
        "model": "deepseek-ai/DeepSeek-R1",
        "hardware": "B300 SXM 288GB",
        "isl": "8192",
        "concurrency": "2048",
        **{"prefill_tp": "2", "prefill_attn_dp": "1", "prefill_moe_tp": "1"},
        **{"prefill_moe_ep": "2", "decode_workers": "1", "decode_tp": "8"},
        **{"decode_attn_dp": "1", "decode_moe_tp": "4", "decode_moe_ep": "2"},
        "num_devices": "10",
    }
    found = disagg_row_settings(row)
    assert found.recipe == "ctx8_gen1_dep8_batch256_eplb0_mtp0"
    assert ("max_batched_tokens", 16896) in found.prefill_options
    assert all(name != "max_batched_tokens" for name, _ in found.decode_options)


def test_a_row_may_name_a_consolidated_variant_among_the_candidates() -> None:
    named = disagg_row_settings(
        {**SGLANG_ROW, "concurrency": "3", "recipe": "1k1k.yaml:zip_override_mtp_lowlat[0]"}
    )
    assert (named.settings, named.num_mtp_tokens, named.candidates) == ("recipe", 2, ())
    assert named.note == "named by the row" and "srt-slurm" in named.source
