"""``validate --cases`` on published Ascend results: the column mapping of
``ascend_serving_points.csv`` (rows of the vendored copy in ``bench/data``)."""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.catalog import get_model
from app.core.errors import ChunkwiseError, InvalidParameterError
from app.core.validation import (
    ALL_AT_ONCE_RATE,
    ASCEND_CASE_COLUMNS,
    BenchmarkRun,
    is_ascend_header,
    is_disagg_header,
    replay_ascend_file,
)
from app.core.validation.ascend_file import (
    A2_OR_A3_ASSUMED,
    ITL_AS_TPOT,
    SUFFIX_REFUSAL,
    RowRefusal,
    ascend_row,
)
from app.core.validation.case_file import ASSUMPTION_SEP, OUT_COLUMNS
from app.core.validation.predict import ServingReplay

FILE = Path(__file__).resolve().parents[3] / "bench" / "data" / "ascend_serving_points.csv"
TEXT = FILE.read_text(encoding="utf-8")
ROWS: list[dict[str, str]] = list(csv.DictReader(io.StringIO(TEXT)))
A2 = "ATLAS_800_A2_313T_64G"
A3 = "ATLAS_800_A3_752T_128G_DIE"


def _run(**fields: object) -> BenchmarkRun:
    """A vLLM BF16 run on A2 cards without data or expert parallelism, all sent at once."""
    base: dict[str, object] = {
        "engine": "vllm",
        "device": A2,
        "dp": 1,
        "ep": 1,
        "precision": "BF16",
        "request_rate": ALL_AT_ONCE_RATE,
    }
    return BenchmarkRun(**{**base, **fields})  # type: ignore[arg-type]


def _csv(rows: list[Mapping[str, str]], columns: tuple[str, ...] = ASCEND_CASE_COLUMNS) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows({c: r.get(c, "") for c in columns} for r in rows)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("index", "metric", "measured_ms", "run"),
    [
        # Qwen3.5-397B W8A8 on one A3 node: TP16 x EP16, 8k/1k at 7 clients of 28 prompts,
        # the launch's max-num-batched-tokens and max-num-seqs
        (
            5,
            "tpot",
            39.0,
            _run(
                model="Qwen/Qwen3.5-397B-A17B",
                device=A3,
                tp=16,
                ep=16,
                precision="W8A8",
                input_length=8192,
                output_length=1024,
                num_requests=28,
                max_concurrency=7,
                max_batched_tokens=16384,
                max_num_seqs=64,
                npu_graph_mode="full_decode_only",
            ),
        ),
        # the same on two A2 nodes, TP8 x DP2 with experts over all 16 ranks; TTFT in s
        (
            12,
            "ttft",
            5880.0,
            _run(
                model="Qwen/Qwen3.5-397B-A17B",
                tp=8,
                dp=2,
                ep=16,
                precision="W8A8",
                input_length=8192,
                output_length=1024,
                num_requests=28,
                max_concurrency=7,
            ),
        ),
        # Qwen3-32B baseline on 4 x 800T A2: a natural-EOS dataset at its printed means
        (
            146,
            "tpot",
            55.1,
            _run(
                model="Qwen/Qwen3-32B",
                tp=4,
                input_length=150,
                output_length=2700,
                num_requests=100,
                max_concurrency=1,
                max_batched_tokens=40960,
                npu_graph_mode="piecewise",  # v0.13.0rc1: the PIECEWISE default
            ),
        ),
        # Qwen3-30B-A3B on "atlas A2 64G * 4": Poisson at 1 req/s, 200 prompts, no cap
        (
            316,
            "ttft",
            587.30,
            _run(
                model="Qwen/Qwen3-30B-A3B",
                tp=4,
                input_length=128,
                output_length=128,
                num_requests=200,
                max_concurrency=None,
                request_rate=1.0,
                npu_graph_mode="piecewise",  # "vllm-ascend main (2025-07)"
            ),
        ),
        # the cold TTFT of the KV-pool page (the "no KV cache hit" step is represented)
        (
            281,
            "ttft",
            2463.0,
            _run(
                model="Qwen/Qwen2.5-72B-Instruct",
                tp=4,
                input_length=1024,
                output_length=10,
                num_requests=100,
                max_concurrency=25,
                npu_graph_mode="piecewise",  # v0.11.0rc2
            ),
        ),
        # QwQ-32B (the Qwen2.5-32B architecture) on 4 x 910B3, v0.21.0rc1, 50 prompts at once
        (
            126,
            "tpot",
            160.14,
            _run(
                model="Qwen/Qwen2.5-32B",
                tp=4,
                input_length=2048,
                output_length=256,
                num_requests=50,
                max_concurrency=None,
                max_num_seqs=256,
                npu_graph_mode="full_and_piecewise",
            ),
        ),
        # Qwen3.5-4B (dense Gated DeltaNet hybrid) on one A2 card, full decode graphs
        (
            258,
            "tpot",
            15.6,
            _run(
                model="Qwen/Qwen3.5-4B",
                tp=1,
                input_length=512,
                output_length=128,
                num_requests=64,
                max_concurrency=None,
                max_batched_tokens=16384,
                max_num_seqs=256,
                npu_graph_mode="full_decode_only",
            ),
        ),
    ],
)
def test_known_rows_map_to_known_runs(
    index: int, metric: str, measured_ms: float, run: BenchmarkRun
) -> None:
    mapped = ascend_row(ROWS[index])
    assert (mapped.metric, mapped.measured_ms, mapped.run) == (metric, measured_ms, run)


def test_an_ascend950pr_is_the_atlas_350_card() -> None:
    """The Atlas 350 card carries the Ascend 950PR (msmodeling's ``ATLAS_350_425T_112G``);
    the row's own model and MTP are replaced to reach the device mapping."""
    row = {**ROWS[101 + 2], "model": "Qwen/Qwen3-32B", "spec_decode": "none"}  # mean_tpot
    run = ascend_row(row).run
    assert (run.device, run.precision, run.max_concurrency) == ("ATLAS_350_425T_112G", "W8A8", 10)
    assert (run.input_length, run.output_length) == (65536, 3072)


def test_dataset_means_and_a_qps_load_take_the_printed_totals() -> None:
    """``ShareGPT (42659 input tokens / 200 req)``: 213 tokens; ``qps 4``: 200 requests at 4/s."""
    row = {
        **ROWS[28 + 6],
        "hardware": "Atlas 800I A2",
        "model": "Qwen/Qwen3-8B",
        "engine": "vLLM-Ascend v0.13.0rc1",  # the row's own is a ~v0.8 (eager) release
    }  # mean_tpot
    mapped = ascend_row(row)
    assert (mapped.run.input_length, mapped.run.output_length) == (213, 218)
    assert (mapped.run.num_requests, mapped.run.request_rate) == (200, 4.0)
    assert mapped.run.max_concurrency is None


@pytest.mark.parametrize(
    ("index", "reason"),
    [
        (222, "metric: not a TTFT, TPOT or the run's throughput"),  # input tok/s per card
        (2, "isl: multimodal input"),  # output throughput of the 480p-image run
        (1, "isl: multimodal input"),  # 480p image
        (267, "model: not in the catalog"),  # Hy3-preview: no public config found
        (326, "metric: inter-token latency not labelled mean, median or a percentile"),
        (117, "metric: inter-token latency of a client other than vLLM's"),  # ais_bench
        (85, "metric: inter-token latency without one token per streamed chunk"),  # no-stream
        (
            64,
            "metric: a throughput of a dataset's requests sent at once (the run lasts as "
            "long as its longest request; only mean lengths are given)",
        ),
        (129, "hardware: no catalog device for the Atlas 300I Duo (310P)"),
        (101 + 2, "model: not in the catalog"),  # Qwen3.8-27B on the Ascend950PR
        (148, f"spec_decode: {SUFFIX_REFUSAL}"),
        (282, "notes: a KV-cache hit of unstated share"),
        (324, "metric: not labelled mean or median"),
    ],
)
def test_refusals_name_the_column_and_the_setting(index: int, reason: str) -> None:
    with pytest.raises(RowRefusal) as err:
        ascend_row(ROWS[index])
    assert err.value.key == reason
    assert str(err.value).startswith(reason)


def test_qwen3_omni_and_hunyuan_rows_replay_their_shipped_models_on_assumed_cards() -> None:
    """Qwen3-Omni's tutorial says A2 or A3 (vLLM-Ascend's docs: the A2 card, labelled);
    Hunyuan-A13B's image line selects the A3 build and its notes the PIECEWISE graph."""
    omni = ascend_row(ROWS[90])
    assert get_model(omni.run.model).name == "Qwen/Qwen3-Omni-30B-A3B-Thinking"
    assert omni.run.device == A2 and omni.assumptions[0].startswith(f"hardware: assumed {A2}")
    hunyuan = ascend_row(ROWS[111])
    assert get_model(hunyuan.run.model).name == "tencent/Hunyuan-A13B-Instruct"
    assert hunyuan.run.device == A3 and hunyuan.run.npu_graph_mode == "piecewise"
    assert hunyuan.assumptions[0].startswith(f"hardware: assumed {A3}")


@pytest.mark.parametrize(
    ("engine", "notes", "mode", "overlap"),
    [
        ("vLLM-Ascend v0.13.0rc1 image", "", "piecewise", None),
        ("vLLM-Ascend v0.21.0rc1", "", "full_and_piecewise", None),
        ("vllm main + vllm-ascend main (2025-07)", "", "piecewise", None),
        ("vLLM-Ascend (version not stated)", "", None, None),
        ("vLLM-Ascend v0.13.0rc1", "FULL_DECODE_ONLY; async scheduling", "full_decode_only", True),
        ("vLLM-Ascend (version templated)", "PIECEWISE ACL graph", "piecewise", None),
        ("vLLM-Ascend v0.13.0rc1", "cudagraph_mode FULL_AND_PIECEWISE", "full_and_piecewise", None),
    ],
)
def test_graph_mode_and_async_scheduling_come_from_the_release_and_notes(
    engine: str, notes: str, mode: str | None, overlap: bool | None
) -> None:
    """vLLM-Ascend's default ``cudagraph_mode`` was PIECEWISE from v0.11 to v0.20 and is
    FULL_AND_PIECEWISE since v0.21.0rc1; the notes' launch flags win."""
    mapped = ascend_row({**ROWS[146], "engine": engine, "notes": notes})
    assert (mapped.run.npu_graph_mode, mapped.run.async_scheduling) == (mode, overlap)


@pytest.mark.parametrize(
    ("index", "metric", "percentile"),
    [(317, "ttft", 50.0), (318, "ttft", 99.0), (320, "tpot", 50.0), (321, "tpot", 99.0)],
)
def test_medians_and_percentiles_replay_the_same_statistic(
    index: int, metric: str, percentile: float
) -> None:
    """Qwen3-30B-A3B at 1 req/s printed median and P99 TTFT / TPOT beside the means: each is
    the same statistic over the simulated requests of the run the mean rows share."""
    mapped = ascend_row(ROWS[index])
    mean = ascend_row(ROWS[316])
    assert (mapped.metric, mapped.percentile, mapped.run) == (metric, percentile, mean.run)
    replay = ServingReplay()
    mean_ttft, mean_tpot = replay.predict_benchmark(mean.run)
    ttft, tpot = replay.predict_benchmark(mapped.run, percentile)
    if percentile == 99.0:
        assert ttft >= mean_ttft and tpot >= mean_tpot
    assert (ttft, tpot) != (mean_ttft, mean_tpot)


@pytest.mark.parametrize(
    ("index", "field", "value"),
    [
        (314, "throughput_tokens_s", 136.24),  # output_throughput_total, tok/s
        (315, "total_throughput", 272.23),  # total_token_throughput, tok/s
        (147, "throughput_tokens_s", 18.1),  # AISBench "Throughput(TPS)": 1 client / 55.1 ms
    ],
)
def test_throughput_rows_replay_the_runs_throughput(index: int, field: str, value: float) -> None:
    mapped = ascend_row(ROWS[index])
    assert (mapped.metric, mapped.throughput, mapped.measured_per_s) == ("throughput", field, value)
    assert math.isnan(mapped.measured_ms)
    report = replay_ascend_file(TEXT)
    outcome = report.outcomes[index]
    result = ServingReplay().benchmark_result(mapped.run)[1]
    assert outcome.throughput_pred == pytest.approx(getattr(result, field))
    assert outcome.throughput_error_pct is not None
    assert math.isnan(outcome.measured_ttft_ms) and math.isnan(outcome.measured_tpot_ms)
    assert report.overall.throughput_median_ape_pct is not None
    assert "thru med" in report.format_table()


def test_a_throughput_in_the_wrong_unit_is_refused() -> None:
    with pytest.raises(RowRefusal) as err:
        ascend_row({**ROWS[314], "unit": "req/s"})
    assert err.value.key == "unit: not tok/s"


def test_an_itl_percentile_of_another_client_is_refused() -> None:
    """The Qwen3-30B-A3B issue does not name its client: its ITL need not be vLLM's gaps."""
    row = {**ROWS[316], "metric": "median_itl"}
    with pytest.raises(RowRefusal) as err:
        ascend_row(row)
    assert err.value.key == "metric: inter-token latency of a client other than vLLM's"


@pytest.mark.parametrize(("index", "percentile"), [(74, 50.0), (75, 99.0), (306, 50.0)])
def test_an_itl_percentile_replays_the_gaps_between_tokens(index: int, percentile: float) -> None:
    """vLLM's client: one ITL per streamed token; its median / P99 are over every gap, which
    the simulation prices as the duration of the step that emitted the token."""
    mapped = ascend_row(ROWS[index])
    mean = ascend_row(ROWS[index - 4 if index < 300 else index - 1])  # the run's mean ITL
    assert (mapped.metric, mapped.percentile, mapped.assumptions[1:]) == ("itl", percentile, ())
    assert mapped.run == mean.run
    replay = ServingReplay()
    ttft, gap = replay.predict_benchmark(mapped.run, percentile, itl=True)
    result = replay.benchmark_result(mapped.run)[1]
    assert gap == result.itl_percentile_ms(percentile)
    assert ttft == replay.predict_benchmark(mapped.run, percentile)[0]
    # the gaps are the decode steps: every one at most the longest step, at least the shortest
    gaps = [g for g, _ in result.itl_distribution_ms]
    assert min(gaps) <= gap <= max(gaps)
    report = replay_ascend_file(_csv([ROWS[index]]))
    (outcome,) = report.outcomes
    assert outcome.tpot_ms_pred == gap and outcome.measured_tpot_ms == mapped.measured_ms


@pytest.mark.parametrize(
    ("hardware", "source", "device", "why"),
    [
        # the file recorded the pointer: the tutorial's image line selects the -a3 build
        (ROWS[111]["hardware"], "", A3, "-a3 build"),
        # "usually the Atlas 800 A2 series" in the source; a sibling issue names Atlas A2
        (ROWS[308]["hardware"], "", A2, "Atlas 800 A2 series"),
        (ROWS[322]["hardware"], "", A2, "Atlas 800 A2 series"),
        # nothing in the row: vLLM-Ascend's own documentation (its usual card, A2 image)
        ("Ascend NPU; hardware model not stated", ROWS[64]["source"], A2, "usually the Atlas"),
    ],
)
def test_an_unstated_card_with_a_pointer_is_assumed_and_labelled(
    hardware: str, source: str, device: str, why: str
) -> None:
    row = {**ROWS[67], "hardware": hardware, "source": source}  # Qwen3-8B mean TTFT
    mapped = ascend_row(row)
    assert mapped.run.device == device
    (label,) = mapped.assumptions
    assert label.startswith(f"hardware: assumed {device} (") and why in label


@pytest.mark.parametrize(
    "hardware",
    [
        "Ascend NPU (hardware model not stated)",
        "Atlas 800I A2/A3 (not stated which)",
        "two 64 GB Ascend 910 NPUs",
    ],
)
def test_an_unstated_card_without_a_pointer_stays_refused(hardware: str) -> None:
    """A GitHub issue with no card named, or naming both families (outside vLLM-Ascend's
    docs, whose usual card is A2)."""
    row = {**ROWS[67], "hardware": hardware, "source": "https://github.com/x/y/issues/1"}
    with pytest.raises(RowRefusal) as err:
        ascend_row(row)
    assert err.value.column == "hardware"


@pytest.mark.parametrize("index", [90, 230 + 2])
def test_a2_or_a3_unsaid_in_vllm_ascends_docs_is_the_a2_card_labelled(index: int) -> None:
    """The texts "Atlas 800I A2/A3" and "two 64 GB Ascend 910 NPUs" (a 910B or a 910C die, not
    the 32 GB first-generation 910) in vLLM-Ascend's own tutorials: its usual card, labelled."""
    row = {**ROWS[index], "model": "Qwen/Qwen3-30B-A3B"}
    mapped = ascend_row(row)
    assert mapped.run.device == A2 and mapped.assumptions == (A2_OR_A3_ASSUMED,)


def test_the_a2_or_a3_assumption_moves_a_decode_bound_row_little() -> None:
    """The two candidates share 64 GB at 1.6 TB/s per device: the InternLM2-20B graph-mode
    TPOT row predicts within 5 % on either (its TTFT, compute-bound, may differ more)."""
    run = ascend_row(ROWS[233]).run
    replay = ServingReplay()
    on_a2 = replay.predict_benchmark(run)[1]
    on_a3 = replay.predict_benchmark(dataclasses.replace(run, device=A3))[1]
    assert on_a2 == pytest.approx(on_a3, rel=0.05) and on_a2 != on_a3


def test_a_stated_card_carries_no_assumption() -> None:
    assert ascend_row(ROWS[5]).assumptions == ()


def test_a_mean_itl_is_read_as_the_mean_tpot_and_labelled() -> None:
    """vLLM's client: one gap per streamed token, a request's TPOT the mean of its gaps."""
    itl = ascend_row(ROWS[73])  # Qwen3-8B mean ITL, vLLM-Ascend's benchmark guide
    tpot = ascend_row(ROWS[70])  # the same run's mean TPOT
    assert (itl.metric, itl.percentile, itl.measured_ms) == ("tpot", None, 25.78)
    assert itl.run == tpot.run
    assert ITL_AS_TPOT in itl.assumptions and ITL_AS_TPOT not in tpot.assumptions


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"spec_decode": "MTP, num_speculative_tokens=1"}, "under speculative decoding"),
        ({"notes": "vllm bench serve; --stream-interval 4"}, "one token per streamed chunk"),
        ({"notes": "vllm bench serve; no-stream"}, "one token per streamed chunk"),
        ({"notes": "ais_bench stream chat", "source": "x"}, "a client other than vLLM's"),
    ],
)
def test_a_mean_itl_where_it_differs_from_tpot_is_refused(
    change: dict[str, str], reason: str
) -> None:
    with pytest.raises(RowRefusal) as err:
        ascend_row({**ROWS[73], **change})
    assert err.value.column == "metric" and reason in err.value.reason


def test_the_report_counts_assumed_rows_apart_with_errors_without_them() -> None:
    report = replay_ascend_file(_csv([ROWS[5], ROWS[67], ROWS[70], ROWS[73]]))
    assert [bool(o.assumed) for o in report.outcomes] == [False, True, True, True]
    counts = dict(report.assumption_counts)
    assert counts[ITL_AS_TPOT] == 1 and sum(counts.values()) == 4  # 3 cards + 1 ITL
    stated = report.without_assumptions
    assert stated.rows == 1
    assert stated.tpot_median_ape_pct == abs(report.outcomes[0].tpot_error_pct or math.nan)
    table = report.format_table()
    assert "overall, no assumed rows" in table and "under a labelled assumption" in table
    assert f"{A2} (assumed) | vllm" in table
    assert report.to_dict()["assumption_counts"] == counts
    out = list(csv.DictReader(io.StringIO(report.to_csv())))
    assert out[0]["assumed"] == "" and out[3]["assumed"].count(ASSUMPTION_SEP) == 1


def test_a_release_before_graph_mode_and_enforce_eager_replay_in_eager_mode() -> None:
    assert ascend_row({**ROWS[146], "engine": "vllm-ascend v0.7.3"}).run.npu_graph_mode == "eager"
    assert ascend_row({**ROWS[146], "engine": "vllm-ascend v0.9.1"}).run.npu_graph_mode == (
        "piecewise"
    )
    eager = {**ROWS[146], "notes": "enforce-eager baseline", "engine": "vLLM-Ascend v0.13.0"}
    assert ascend_row(eager).run.npu_graph_mode == "eager"


def test_eager_rows_are_represented_in_groups_of_their_own() -> None:
    report = replay_ascend_file(TEXT)
    eager = [o for o in report.outcomes if o.engine_family == "vllm (eager)"]
    # the ~v0.8 Llama-3.1-8B and v0.7.3-era Qwen2.5-7B rows, the --enforce-eager ones of the
    # Qwen3.5-4B tutorial, the UCM guide's Qwen2.5-14B cold run and the InternLM2-20B
    # tutorial's "Eager mode" table
    assert {o.model for o in eager} == {
        "InternLM2-20B-Chat (internlm2-chat-20b)",
        "Meta-Llama-3.1-8B-Instruct",
        "Qwen/Qwen2.5-7B-Instruct",
        "Qwen3.5-4B",
        "Qwen/Qwen2.5-14B-Instruct",
    }
    assert not any(o.refused for o in eager)
    assert not any("eager" in o.refusal for o in report.outcomes)


def test_the_file_replays_with_every_row_predicted_or_refused_by_reason() -> None:
    report = replay_ascend_file(TEXT)
    assert len(report.outcomes) == len(ROWS)
    assert [o.case_id for o in report.outcomes] == [f"row{i}" for i in range(len(ROWS))]
    refused = [o for o in report.outcomes if o.refused]
    assert sum(n for _, n in report.refusal_counts) == len(refused) == report.overall.refused
    assert all(o.error and o.refusal for o in refused)
    predicted = [o for o in report.outcomes if not o.refused]
    # every represented row measured exactly one of TTFT, TPOT and a throughput
    assert predicted and all(
        [
            not math.isnan(o.measured_ttft_ms),
            not math.isnan(o.measured_tpot_ms),
            not math.isnan(o.measured_throughput),
        ].count(True)
        == 1
        for o in predicted
    )
    assert {o.hardware for o in predicted} == {A2, A3, f"{A2} (assumed)", f"{A3} (assumed)"}
    assert all(o.assumed for o in predicted if o.hardware.endswith("(assumed)"))
    assert math.isclose(report.represented_share, len(predicted) / len(ROWS))
    lines = report.to_csv().splitlines()
    assert tuple(lines[0].split(",")) == OUT_COLUMNS and len(lines) == len(ROWS) + 1
    assert ",nan," not in report.to_csv()  # an unmeasured metric is blank
    table = report.format_table()
    assert "ATLAS_800_A2_313T_64G | vllm | Qwen3-32B" in table
    assert f"represented {report.represented_share:.1%} of {len(ROWS)} rows" in table
    assert report.to_dict()["refusal_counts"] == dict(report.refusal_counts)


def test_rows_of_one_run_share_one_simulation() -> None:
    report = replay_ascend_file(_csv([ROWS[4], ROWS[5]]))
    ttft, tpot = report.outcomes
    assert (ttft.ttft_ms_pred, ttft.tpot_ms_pred) == (tpot.ttft_ms_pred, tpot.tpot_ms_pred)
    assert ttft.ttft_error_pct is not None and ttft.tpot_error_pct is None
    assert tpot.tpot_error_pct is not None and tpot.ttft_error_pct is None


def test_the_header_decides_and_a_wrong_one_names_the_columns() -> None:
    assert is_ascend_header(TEXT) and not is_disagg_header(TEXT)
    assert not is_ascend_header("case_id,model,hardware\n")
    with pytest.raises(InvalidParameterError, match="missing notes"):
        replay_ascend_file(_csv([ROWS[5]], ASCEND_CASE_COLUMNS[:-1]))
    with pytest.raises(InvalidParameterError, match="at least one measurement row"):
        replay_ascend_file(_csv([]))


_FREE_TEXT = ("hardware", "num_devices", "tp", "dp", "ep", "precision", "isl", "osl")
_LOAD = ("concurrency_or_rate", "spec_decode", "metric", "value", "unit", "notes")


@settings(max_examples=200, deadline=None)
@given(
    index=st.integers(0, len(ROWS) - 1),
    column=st.sampled_from(_FREE_TEXT + _LOAD),
    text=st.text(alphabet=st.characters(codec="utf-8"), max_size=40),
)
def test_any_text_in_a_column_is_mapped_or_refused_by_name(
    index: int, column: str, text: str
) -> None:
    """Free text never escapes as anything but a domain error, and a mapped row is a run the
    simulator accepts (positive lengths, loads and sizes)."""
    row = {**ROWS[index], column: text}
    try:
        mapped = ascend_row(row)
    except RowRefusal as err:
        assert err.column in ASCEND_CASE_COLUMNS
        return
    except ChunkwiseError:
        return
    run = mapped.run
    assert min(run.tp, run.dp, run.ep, run.input_length, run.output_length) >= 1
    assert run.num_requests >= 1 and run.request_rate > 0
    if mapped.throughput is None:
        assert mapped.measured_ms > 0
    else:  # a throughput row measures per second (its ms is NaN by definition)
        assert mapped.measured_per_s is not None and mapped.measured_per_s > 0
    assert run.max_concurrency is None or run.max_concurrency >= 1


@pytest.mark.parametrize(
    ("spec_decode", "drafts", "rate"),
    [
        # the 950PR page prints both: 1 + 3 x 64.21 % = 2.93 tokens per step
        (ROWS[101]["spec_decode"], 3, (2.93 - 1.0) / 3),
        ("MTP, num_speculative_tokens=2; acceptance rate 55%", 2, 0.55),
        ("MTP num_speculative_tokens = 1, acceptance length 1.8", 1, 0.8),
        # SGLang's EAGLE-3 launch and its printed accept length (published_points.csv)
        ("EAGLE3, --speculative-num-steps 3, topk 1, accept_len=2.05", 3, 1.05 / 3),
    ],
)
def test_mtp_with_its_printed_acceptance_maps_to_the_products_mtp(
    spec_decode: str, drafts: int, rate: float
) -> None:
    """MTP drafts ``k`` tokens every step: a mean acceptance length ``L`` or a rate ``a``
    (accepted / drafted) gives ``1 + k a = L`` tokens per step; each position takes ``a``."""
    row = {**ROWS[5], "spec_decode": spec_decode}
    run = ascend_row(row).run
    assert run.num_mtp_tokens == drafts
    assert run.mtp_acceptance_rates == pytest.approx((rate,) * drafts)
    assert ascend_row(ROWS[5]).run.num_mtp_tokens == 0  # "none": no drafts


@pytest.mark.parametrize(
    ("spec_decode", "reason"),
    [
        (ROWS[268]["spec_decode"], "MTP without its acceptance length or rate"),  # Hy3
        ("MTP; acceptance length 2.5", "MTP without its number of drafted tokens"),
        ("MTP, num_speculative_tokens=2, acceptance length 3.5", "outside 1 to 3 tokens"),
        ("EAGLE3, speculative-num-steps 3, topk 4, accept length 2.4", "a draft tree"),
        ("EAGLE3, speculative-num-steps 3", "EAGLE without its acceptance length or rate"),
    ],
)
def test_mtp_without_a_usable_acceptance_is_refused(spec_decode: str, reason: str) -> None:
    with pytest.raises(RowRefusal) as err:
        ascend_row({**ROWS[5], "spec_decode": spec_decode})
    assert err.value.column == "spec_decode" and reason in err.value.reason


def test_an_mtp_run_emits_its_acceptance_length_per_verify_step() -> None:
    """The same Qwen3-32B run with MTP: TPOT falls below the plain run's, and by less than
    the 2.93 tokens a step emits (each step verifies 4 tokens and runs 3 draft passes)."""
    plain = ascend_row(ROWS[146]).run  # Qwen3-32B, 4 x A2, one client
    mtp = ascend_row({**ROWS[146], "spec_decode": ROWS[101]["spec_decode"]}).run
    replay = ServingReplay()
    tpot_plain = replay.predict_benchmark(plain)[1]
    tpot_mtp = replay.predict_benchmark(mtp)[1]
    assert tpot_plain / 2.93 < tpot_mtp < tpot_plain


def test_a_ucm_run_maps_cold_and_refuses_the_blocks_loaded_from_storage() -> None:
    """The UCM guide's Qwen2.5-14B runs: the first (no UCM cache hit) is a cold eager prefill of
    16,000 tokens; the second loads every KV block from UCM's storage, which is not modelled."""
    cold = ascend_row(ROWS[308])
    assert cold.run.model == "Qwen/Qwen2.5-14B-Instruct"
    assert (cold.run.npu_graph_mode, cold.run.input_length) == ("eager", 16000)
    with pytest.raises(RowRefusal) as err:
        ascend_row(ROWS[309])
    assert err.value.key == "notes: KV-cache blocks loaded from external storage (UCM)"
