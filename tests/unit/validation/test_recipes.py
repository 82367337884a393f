"""Recipe settings of measured rows (InferenceX launch scripts): recipe, ambiguous, default."""

from __future__ import annotations

import csv
import io

import pytest

from app.core.profiles import get_profile
from app.core.validation import CASE_COLUMNS, ServingReplay, replay_case_file
from app.core.validation.case_file import OUT_COLUMNS, row_case
from app.core.validation.predict import engine_family
from app.core.validation.recipes import RECIPE_SETTINGS, recipe_table, row_settings

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
    assert len(table) == len(rows) > 20
    for row in rows:
        found = row_settings(row)
        profile = get_profile(engine_family(row["engine"])).with_overrides(dict(found.options))
        assert profile.name == engine_family(row["engine"])
        if found.settings == "ambiguous":
            assert " or " in found.note or "(MTP speculative decoding) ran the same image" in (
                found.note
            )


def test_the_replay_runs_a_row_under_its_recipe_and_says_so() -> None:
    """A recipe row is predicted under its recipe's options (the same as a case carrying
    them), differently from the profile's defaults; OUT names the settings and the source."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CASE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows([QWEN, {**QWEN, "case_id": "d", "engine": "sglang 0.5.8"}])
    report = replay_case_file(buffer.getvalue())
    recipe, default = report.outcomes
    options = row_settings(QWEN).options
    assert (recipe.ttft_ms_pred, recipe.tpot_ms_pred) == ServingReplay().predict(
        row_case(QWEN, options)
    )
    assert (default.ttft_ms_pred, default.tpot_ms_pred) == ServingReplay().predict(row_case(QWEN))
    assert recipe.tpot_ms_pred != default.tpot_ms_pred
    out = list(csv.DictReader(io.StringIO(report.to_csv())))
    assert tuple(out[0]) == OUT_COLUMNS
    assert [r["settings"] for r in out] == ["recipe", "default"]
    assert "qwen3.5_fp8_b200.sh@" in out[0]["settings_note"] and out[1]["settings_note"] == ""
