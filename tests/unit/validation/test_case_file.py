"""``validate --cases``: any measurement file with the serving columns, every row accounted for."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.errors import InvalidParameterError, UnsupportedError
from app.core.validation import (
    CASE_COLUMNS,
    MAX_CASE_ROWS,
    SERVING_TPOT_KIND,
    SERVING_TTFT_KIND,
    read_case_rows,
    replay_case_file,
    run_validation,
)
from app.core.validation.case_file import OUT_COLUMNS, row_case, row_layout
from app.core.validation.cases import SERVING_CASES

ROW = {
    "case_id": "ok",
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "hardware": "H100 SXM 80GB",
    "engine": "vllm 0.18.0",
    "gemm_quant": "unrecorded",
    "moe_quant": "",
    "tp": "1",
    "pp": "1",
    "attn_dp": "1",
    "moe_tp": "1",
    "moe_ep": "0",
    "num_devices": "1",
    "isl": "1024",
    "osl": "128",
    "concurrency": "8",
    "ttft_ms": "50",
    "tpot_ms": "8",
}


def file_of(*rows: dict[str, str], columns: Sequence[str] = CASE_COLUMNS) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def test_the_builtin_serving_rows_replay_exactly_as_the_serving_kinds() -> None:
    """The same rows through --cases and through the serving_ttft / serving_tpot kinds give
    bit-identical predictions: one mapping, one simulation per row."""
    report = replay_case_file(SERVING_CASES.read_text(encoding="utf-8"))
    built_in = run_validation(kinds=(SERVING_TTFT_KIND, SERVING_TPOT_KIND))
    predicted = {(r.case.kind, r.case.name): r.predicted for r in built_in.results}
    assert len(report.outcomes) == 758 and report.overall.refused == 0
    for outcome in report.outcomes:
        assert outcome.ttft_ms_pred == predicted[(SERVING_TTFT_KIND, outcome.case_id)]
        assert outcome.tpot_ms_pred == predicted[(SERVING_TPOT_KIND, outcome.case_id)]


def test_every_row_gets_a_prediction_or_its_reason() -> None:
    rows = [
        ROW,
        {**ROW, "case_id": "repackaged", "model": "nvidia/Llama-3.1-8B-Instruct-FP8"},
        {**ROW, "case_id": "fp8", "gemm_quant": "fp8", "moe_quant": "fp8"},
        {**ROW, "case_id": "unknown", "model": "acme/NotAModel-7B"},
        {
            **ROW,
            "case_id": "linear",  # Gated DeltaNet hybrid: modelled, FP8 fits 8 x 80 GB
            "model": "Qwen/Qwen3.5-397B-A17B",
            "tp": "8",
            "num_devices": "8",
            "gemm_quant": "fp8",
            "moe_quant": "fp8",
        },
        {**ROW, "case_id": "int4", "gemm_quant": "int4_wo", "moe_quant": "int4_wo"},
        {**ROW, "case_id": "awq", "gemm_quant": "w4a8_awq", "moe_quant": "w4a8_awq"},
        {**ROW, "case_id": "engine", "engine": "tgi 2.0"},
        {**ROW, "case_id": "mixed", "gemm_quant": "fp8", "moe_quant": "nvfp4"},
        {**ROW, "case_id": "device", "hardware": "TPU v9"},
        {**ROW, "case_id": "number", "concurrency": "many"},
        {**ROW, "case_id": "measured", "tpot_ms": "0"},
    ]
    report = replay_case_file(file_of(*rows))
    by_id = {o.case_id: o for o in report.outcomes}
    assert [o.case_id for o in report.outcomes] == [r["case_id"] for r in rows]
    for case_id in ("ok", "repackaged", "fp8", "int4", "linear"):
        outcome = by_id[case_id]
        assert outcome.error == ""
        assert outcome.ttft_ms_pred is not None and outcome.ttft_ms_pred > 0
        assert outcome.tpot_ms_pred is not None and outcome.tpot_ms_pred > 0
    # A repackaged checkpoint id resolves to its base architecture.
    assert by_id["repackaged"].ttft_ms_pred == by_id["ok"].ttft_ms_pred
    assert by_id["fp8"].tpot_ms_pred != by_id["ok"].tpot_ms_pred
    reasons = {
        "unknown": "acme/NotAModel-7B",
        "awq": "w4a8_awq",
        "engine": "unknown engine 'tgi'",
        "mixed": "per-layer quantization",
        "device": "TPU v9",
        "number": "concurrency",
        "measured": "tpot_ms",
    }
    for case_id, text in reasons.items():
        outcome = by_id[case_id]
        assert outcome.refused and outcome.ttft_ms_pred is None and outcome.tpot_ms_pred is None
        assert text in outcome.error, (case_id, outcome.error)
    assert report.overall.rows == len(rows) and report.overall.refused == len(reasons)


def test_the_out_csv_has_one_line_per_input_row() -> None:
    report = replay_case_file(file_of(ROW, {**ROW, "case_id": "bad", "model": "nope/nope"}))
    lines = list(csv.DictReader(io.StringIO(report.to_csv())))
    assert tuple(lines[0]) == OUT_COLUMNS
    assert [line["case_id"] for line in lines] == ["ok", "bad"]
    assert float(lines[0]["ttft_ms_pred"]) > 0 and lines[0]["error"] == ""
    assert lines[1]["ttft_ms_pred"] == "" and lines[1]["tpot_ms_pred"] == ""
    assert "nope/nope" in lines[1]["error"]
    error = float(lines[0]["ttft_error_pct"])
    assert error == pytest.approx((float(lines[0]["ttft_ms_pred"]) / 50 - 1) * 100, abs=0.06)


def test_groups_are_hardware_engine_family_and_model() -> None:
    rows = [ROW, {**ROW, "case_id": "b", "engine": "vllm (version blank)"}]
    report = replay_case_file(file_of(*rows, {**ROW, "case_id": "c", "engine": "sglang 0.5.9"}))
    assert [g.group for g in report.by_engine] == ["H100 SXM 80GB | vllm", "H100 SXM 80GB | sglang"]
    vllm = report.by_engine[0]
    assert vllm.rows == 2 and vllm.refused == 0
    assert vllm.ttft_median_ape_pct is not None and vllm.ttft_close_share is not None
    assert report.by_model[0].group == ("H100 SXM 80GB | vllm | meta-llama/Llama-3.1-8B-Instruct")
    assert "overall" in report.format_table()
    assert report.to_dict()["overall"]["rows"] == 3


def test_layout_duplicates_can_be_left_out() -> None:
    wide = {**ROW, "case_id": "wide", "tp": "2", "num_devices": "2"}
    text = file_of(ROW, wide)
    assert len(replay_case_file(text).outcomes) == 2
    kept = replay_case_file(text, drop_layout_duplicates=True).outcomes
    assert [o.case_id for o in kept] == ["ok"]


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("case_id,model\nx,y\n", "missing hardware"),
        (file_of(ROW).replace("tpot_ms\n", "tpot_ms,note\n", 1), "unknown note"),
        (file_of(), "at least one measurement row"),
    ],
)
def test_a_bad_file_is_one_domain_error_naming_the_problem(text: str, names: str) -> None:
    with pytest.raises(InvalidParameterError, match=names):
        read_case_rows(text)


def test_a_file_over_the_row_bound_is_refused() -> None:
    line = file_of(ROW).splitlines()[1]
    text = file_of(ROW) + "\n".join([line] * MAX_CASE_ROWS) + "\n"
    with pytest.raises(InvalidParameterError, match=f"more than {MAX_CASE_ROWS}"):
        read_case_rows(text)


def test_an_fp4_label_of_a_natively_fp4_checkpoint_is_its_native_format() -> None:
    """The sample writes gpt-oss-120b's MXFP4 checkpoint as "nvfp4"; other models keep it."""
    gpt_oss = {**ROW, "model": "openai/gpt-oss-120b", "gemm_quant": "nvfp4", "moe_quant": "nvfp4"}
    assert row_case(gpt_oss).precision == "MXFP4"
    llama = {**ROW, "gemm_quant": "nvfp4", "moe_quant": "nvfp4"}
    assert row_case(llama).precision == "NVFP4"
    fp8 = {**ROW, "model": "openai/gpt-oss-120b", "gemm_quant": "fp8", "moe_quant": "fp8"}
    assert row_case(fp8).precision == "FP8"


KIMI_WIDE = {
    **ROW,
    "model": "moonshotai/Kimi-K2.5",  # 64 attention heads, 384 experts
    "hardware": "B200 180GB",
    "engine": "trtllm 1.2.0",
    "gemm_quant": "nvfp4",
    "moe_quant": "nvfp4",
    "tp": "12",
    "moe_tp": "1",
    "moe_ep": "12",
    "num_devices": "12",
    "concurrency": "24",
}


def test_a_tp_that_does_not_divide_the_heads_is_wide_ep_where_the_engine_runs_it() -> None:
    """TensorRT-LLM and SGLang run tp=12 of a 64-head MoE as attention DP 12 with experts over
    the 12 ranks: the same prediction as the row written with that layout explicitly."""
    explicit = {**KIMI_WIDE, "case_id": "explicit", "tp": "1", "attn_dp": "12"}
    sglang = {**KIMI_WIDE, "case_id": "sglang", "engine": "sglang 0.5.9"}
    for row in (KIMI_WIDE, sglang):
        case = row_case(row)
        assert (case.tp, case.dp, case.ep) == (1, 12, 12)
    report = replay_case_file(file_of(KIMI_WIDE, explicit))
    wide, written = report.outcomes
    assert wide.error == "" and wide.ttft_ms_pred is not None
    assert (wide.ttft_ms_pred, wide.tpot_ms_pred) == (written.ttft_ms_pred, written.tpot_ms_pred)


@pytest.mark.parametrize(
    ("change", "text"),
    [
        ({"engine": "vllm 0.17.0"}, "vllm runs attention tensor-parallel"),
        ({"moe_tp": "12", "moe_ep": "1"}, "records tp=12, pp=1, attn_dp=1, moe_tp=12, moe_ep=1"),
        ({"moe_tp": "2", "moe_ep": "6"}, "moe_tp=2, moe_ep=6"),
        ({"moe_ep": "0"}, "moe_ep=1"),
        ({"pp": "2", "num_devices": "24"}, "pp=2"),
        ({"tp": "5", "moe_ep": "5", "num_devices": "5"}, "a divisor of num_experts=384"),
        (
            {"model": "meta-llama/Llama-3.1-70B", "gemm_quant": "fp8", "moe_quant": "fp8"},
            "wide expert parallelism",
        ),
    ],
)
def test_a_tp_that_does_not_divide_the_heads_otherwise_is_refused_naming_why(
    change: dict[str, str], text: str
) -> None:
    """Not wide EP as recorded (another engine, another expert split, a dense model, pp), or
    wide EP whose experts do not split evenly: refused with the recorded layout named."""
    (outcome,) = replay_case_file(file_of({**KIMI_WIDE, **change})).outcomes
    assert outcome.refused and text in outcome.error, outcome.error


@given(tp=st.integers(1, 80), ep=st.integers(0, 80), family=st.sampled_from(["trtllm", "sglang"]))
def test_the_recorded_layout_stands_whenever_tp_divides_the_heads(
    tp: int, ep: int, family: str
) -> None:
    """The wide-EP reading never touches a layout the heads allow (whose expert split is the
    devices': experts over 1 or all tp ranks, with moe_tp 1), and never invents one the row
    does not record (experts over all tp ranks)."""
    row = {**KIMI_WIDE, "engine": f"{family} x", "tp": str(tp), "moe_ep": str(ep)}
    experts = max(ep, 1)
    try:
        layout = row_layout(row, "moonshotai/Kimi-K2.5")
    except UnsupportedError:
        assert 64 % tp and experts != tp
        return
    except InvalidParameterError:
        assert 64 % tp == 0 and experts not in (1, tp)
        return
    if 64 % tp == 0:
        assert layout == (tp, 1, experts) and experts in (1, tp)
    else:
        assert layout == (1, tp, tp) and experts == tp


@pytest.mark.parametrize(
    ("change", "text"),
    [
        (
            {"tp": "1", "attn_dp": "4", "moe_tp": "4", "moe_ep": "1", "num_devices": "4"},
            "experts split by tensor parallelism across 4 attention data-parallel ranks",
        ),
        ({"tp": "8", "moe_tp": "2", "moe_ep": "2", "num_devices": "8"}, "moe_tp x moe_ep = "),
    ],
)
def test_an_expert_split_the_runner_cannot_represent_is_refused(
    change: dict[str, str], text: str
) -> None:
    """As in the disaggregated replay: attention DP with the experts' matrices split over the
    DP ranks (TensorRT-LLM's enable_attention_dp without EP), or a split that is not the
    devices', is named, never replayed as another layout."""
    (outcome,) = replay_case_file(file_of({**KIMI_WIDE, **change})).outcomes
    assert outcome.refused and text in outcome.error, outcome.error
