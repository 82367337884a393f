"""Replay a file of published Ascend serving results (``chunkwise validate --cases FILE``).

A file has exactly the columns of ``shared/validation/ascend_serving_points.csv``
(:data:`ASCEND_CASE_COLUMNS`), recognised by its header (:func:`is_ascend_header`): one
published metric per row, with the run's deployment and load written as the source printed
them (partly free text). Each row is one point: the mapping below turns it into a
:class:`~app.core.validation.predict.BenchmarkRun` that
:meth:`~app.core.validation.predict.ServingReplay.predict_benchmark` simulates (rows of one run
share the simulation), or refuses it with the column and the setting that cannot be
represented. The report and the OUT CSV are the aggregated replay's
(:class:`~app.core.validation.case_file.CaseFileReport`; ``case_id`` is ``row<N>``, the 0-based
data row); the report counts the refusals per reason, and the rows represented under a
labelled assumption (OUT column ``assumed``) per assumption, with the overall errors without
them beside the overall errors.

Column mapping (checked in this order; the first that fails names the refusal):

- ``metric`` / ``unit``: ``mean_ttft`` and ``mean_tpot`` (``ttft`` / ``tpot`` too, unless the
  notes say the column is not labelled) in ms or s; ``median_`` and ``pN_`` TTFT / TPOT are the
  same statistic over the simulated requests (nearest rank, as the benchmark clients compute
  it), compared with the prediction of that statistic. Throughputs over the run (``unit``
  tok/s or req/s): ``output_throughput_total`` and ``throughput_tps`` (the AISBench tables'
  "Throughput(TPS)", output tokens per second: it reads concurrency / TPOT) are the output
  tokens per second, ``total_token_throughput`` input and output tokens, ``request_throughput``
  requests per second (the report's throughput column); per card, per request and peak
  throughputs are refused (the simulation reports the run's), and so is the throughput of a
  dataset's requests all sent at once (the run lasts as long as its longest request, the file
  gives mean lengths). Inter-token latencies of vLLM's benchmark client streaming one token
  per chunk (:func:`_itl_client`; others are refused): a ``mean_itl`` is compared with the
  mean TPOT and labelled (equal at the simulated fixed lengths), a ``median_itl`` / ``pN_itl``
  with that percentile of the simulated gaps between tokens (each decode token follows a gap of
  its step's duration), both in the TPOT column.
- ``hardware`` (:data:`HARDWARE_RULES`, first match): a card stated as "A2/A3" (or a
  "64 GB Ascend 910") is replayed on the A2 card where the source is vLLM-Ascend's own
  documentation, labelled :data:`A2_OR_A3_ASSUMED`, and refused elsewhere;
  a card that is not stated is replayed on the family its source's context points at and
  labelled ``hardware: assumed <device> (<why>)`` (:data:`ASSUMED_CARD_RULES`: an image line
  selecting vLLM-Ascend's ``-a3`` build, a source naming the Atlas 800 A2 series, or vLLM-
  Ascend's own documentation, whose requirements say "usually the Atlas 800 A2 series"), and
  refused where nothing points anywhere; an Atlas
  A3 node is 16 dies of ``ATLAS_800_A3_752T_128G_DIE`` (the
  Atlas 800 A3's die, msmodeling's A3 device); an Atlas 800T/800I A2, an "atlas A2" or a 910B
  card is ``ATLAS_800_A2_313T_64G`` (the 910B3, which vLLM-Ascend's QwQ-32B page states for
  its Atlas 800I A2; the A2 variants share 64 GB at 1.6 TB/s and decode is memory-bound);
  an Ascend950PR is ``ATLAS_350_425T_112G`` (the Atlas 350 card carries the 950PR, 112 GB);
  a "64 GB Ascend 910" is a 910B (A2) or a 910C die (A3), not the first-generation 910 (32 GB,
  which vLLM-Ascend does not support): A2 / A3 unsaid, as above; cards without a
  catalog device (Atlas 300I Duo / 310P: no public FP16 peak; the first-generation Ascend 910)
  are refused.
- ``model``: the catalog resolves the name (``Qwen3.5-397B-A17B-w8a8`` -> the base
  architecture), else the name before or inside a parenthesis (``InternLM2-20B-Chat
  (internlm2-chat-20b)``, ``Kimi-K2.6 (W4A16)``); others are refused by name.
- ``engine``: the family named in the text (``vLLM-Ascend`` -> ``vllm``, ``SGLang`` ->
  ``sglang``), which on an Ascend device is the engine's NPU build; others are refused.
- ``precision``: ``bf16`` / ``fp16`` (dummy weights included: same shapes), ``w8a8`` (vLLM-
  Ascend's W8A8 dynamic), ``w4a16``; unstated or mixed formats (``w8a8-mxfp8``) are refused.
- layout: ``tp`` and ``dp`` plain integers; ``ep`` ``yes`` is expert parallelism over all
  ``tp x dp`` ranks, blank or ``no`` none, or an integer; ``num_devices``' leading integer
  (``per instance``: one instance) must be ``tp x dp`` (pipeline or context parallel,
  stated in ``tp``/``dp`` notes, is refused: not plain integers).
- ``isl`` / ``osl``: ``N input tokens / M req`` (``N generated / M req``) is the dataset's
  mean ``N / M``; ``avg N`` the printed mean; else the leading number (``1,024``, ``64K`` =
  65,536). Images or video inputs, variable lengths (``~``), prefill-only runs and
  unstated lengths are refused.
- ``concurrency_or_rate``: the requests (``N prompts``, ``N requests``, ``single request``;
  for a ``qps`` row the ``/ M req`` of ``isl``), the cap (``concurrency N``,
  ``max-concurrency=N``) and the rate (``request-rate R``, ``qps R``, ``request rate R``; ``inf``
  or unstated: the clients' default, all sent at once). A run without a request count, or a
  decode batch size instead of a client load, is refused.
- ``spec_decode``: ``none``, or MTP / EAGLE (a chain) with its drafts per step
  (``num_speculative_tokens=k``, ``speculative-num-steps k``) and its printed acceptance length
  or rate (:func:`_mtp`: ``k`` drafts verified per step, ``1 + sum`` of the rates emitted);
  without them, a draft tree (top-k above 1) and suffix decoding are refused (suffix
  decoding drafts a varying number of tokens per step, up to ``num_speculative_tokens``, and a
  printed accept rate of accepted / drafted tokens does not give the tokens per step).
- ``notes``: ``max-num-batched-tokens N`` and ``max-num-seqs N`` are the engine's settings;
  KV-cache hits of an unstated share and KV blocks loaded from external storage (UCM) are
  refused; "no ... cache hit" or "cold" marks a cold run.
- graph mode and async scheduling (vLLM-Ascend, ``npu_graph_mode`` and ``overlap_scheduling``
  of the profile): ``enforce-eager`` (or ``eager mode``) in the notes is ``eager``,
  ``FULL_DECODE_ONLY`` ``full_decode_only``, ``FULL_AND_PIECEWISE`` ``full_and_piecewise``,
  ``PIECEWISE`` (the Hunyuan-A13B tutorial's "PIECEWISE ACL graph") ``piecewise``; otherwise
  the engine column's version decides:
  before v0.9 the engine ran eagerly (``eager``), v0.9 to v0.20 (or a date before June 2026)
  the ``piecewise`` default, v0.21 on ``full_and_piecewise``, an unstated version the
  profile's (the current default). ``async scheduling`` in the notes turns the profile's
  overlap scheduling on.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from app.core import limits
from app.core.catalog.models import get_model, resolve_model_name
from app.core.errors import ChunkwiseError, UnsupportedError
from app.core.validation.case_file import (
    ASSUMPTION_SEP,
    CaseFileReport,
    RowOutcome,
    case_file_report,
    read_case_rows,
)
from app.core.validation.cases import MS_PER_S
from app.core.validation.csv_text import csv_lines, malformed_csv
from app.core.validation.predict import ALL_AT_ONCE_RATE, BenchmarkRun, ServingReplay
from app.core.validation.report import PERCENT

__all__ = [
    "ASCEND_CASE_COLUMNS",
    "HARDWARE_RULES",
    "AscendRow",
    "RowRefusal",
    "ascend_row",
    "is_ascend_header",
    "replay_ascend_file",
]

#: The columns of a published Ascend results file, in the order of the shared file.
ASCEND_CASE_COLUMNS: tuple[str, ...] = (
    "source",
    "model",
    "hardware",
    "num_devices",
    "tp",
    "dp",
    "ep",
    "precision",
    "engine",
    "isl",
    "osl",
    "concurrency_or_rate",
    "spec_decode",
    "metric",
    "value",
    "unit",
    "notes",
)
#: Columns only this file has: a header with any of them is read as one.
_ASCEND_MARKERS = frozenset({"concurrency_or_rate", "spec_decode", "metric"})

A3_DIE = "ATLAS_800_A3_752T_128G_DIE"
A2_CARD = "ATLAS_800_A2_313T_64G"
ATLAS_350 = "ATLAS_350_425T_112G"
#: ``hardware`` text (lower case) -> catalog device, or None: refused with the rule's reason.
#: First match wins; the refusals come first so that "not stated ... A2 series" stays unstated.
HARDWARE_RULES: tuple[tuple[str, str | None, str], ...] = (
    (r"not stated|not explicit|usually", None, "the card is not stated"),
    (r"a2\s*/\s*a3", None, "the source does not say A2 or A3"),
    (r"310p|300i", None, "no catalog device for the Atlas 300I Duo (310P)"),
    (r"950", ATLAS_350, "an Atlas 350 card (Ascend 950PR)"),
    (r"\ba3\b", A3_DIE, "an Atlas 800 A3 die"),
    (r"\ba2\b|910b", A2_CARD, "an Atlas 800 A2 card (910B3)"),
    (r"64\s*gb ascend 910\b", None, "the source does not say A2 or A3"),
    (r"\b910\b", None, "no catalog device for the first-generation Ascend 910"),
)
#: A ``hardware`` text that does not state the card (and not as one of A2 / A3).
_UNSTATED = re.compile(r"not stated|not explicit|usually")
_A2_OR_A3 = re.compile(r"a2\s*/\s*a3|64\s*gb ascend 910\b")
#: vLLM-Ascend's own documentation, whose requirements name the Atlas 800 A2 series as the
#: usual card (``quick_start.md``, ``installation.md``).
_VLLM_ASCEND_DOCS = r"^vllm-project/vllm-ascend docs/"
#: The label of a row whose source says its card is an A2 or an A3 but not which
#: (:func:`_device`).
A2_OR_A3_ASSUMED = (
    f"hardware: assumed {A2_CARD} (A2 or A3 unsaid, vLLM-Ascend's docs: 'usually the Atlas 800 "
    "A2 series', both 64 GB at 1.6 TB/s per device)"
)
#: A card that is not stated but that the source's context points at, as (pattern, device,
#: why): first over the ``hardware`` text (where the file recorded the pointer), then over the
#: ``source``. The row is replayed on that family's catalog card and labelled ``hardware:
#: assumed <device> (<why>)``; nothing pointing anywhere stays refused.
ASSUMED_CARD_RULES: tuple[tuple[str, str, str, str], ...] = (
    (
        "hardware",
        r"\ba3\b",
        A3_DIE,
        "the source's container image is vLLM-Ascend's -a3 build",
    ),
    (
        "hardware",
        r"\ba2\b",
        A2_CARD,
        "the source's context names the Atlas 800 A2 series",
    ),
    (
        "source",
        _VLLM_ASCEND_DOCS,
        A2_CARD,
        "vLLM-Ascend's docs: 'usually the Atlas 800 A2 series' (quick_start.md, installation.md)",
    ),
)
_METRICS: Mapping[str, str] = {
    "mean_ttft": "ttft",
    "ttft": "ttft",
    "mean_tpot": "tpot",
    "tpot": "tpot",
}
#: Throughput metric -> (the :class:`~app.core.workload.ServingResult` field, its unit).
_THROUGHPUTS: Mapping[str, tuple[str, str]] = {
    "output_throughput_total": ("throughput_tokens_s", "tok/s"),
    "throughput_tps": ("throughput_tokens_s", "tok/s"),
    "total_token_throughput": ("total_throughput", "tok/s"),
    "request_throughput": ("request_throughput", "req/s"),
}
#: ``median_ttft``, ``p99_tpot``: a percentile of TTFT or TPOT over the requests;
#: ``median_itl``, ``p99_itl``: of the gaps between tokens over the run.
_PERCENTILE_METRIC = re.compile(r"(median|p(\d{1,2}(?:\.\d+)?))_(ttft|tpot|itl)")
_MEDIAN = 50.0
_MEAN_ITL = "mean_itl"
#: Speculative decoding that drafts a fixed chain: MTP, EAGLE / EAGLE-3 (top-k 1).
_CHAIN_DRAFTS = re.compile(r"(?:mtp|eagle)")
#: Drafts per step: vLLM's ``num_speculative_tokens``, SGLang's ``--speculative-num-steps``.
_DRAFTS = re.compile(r"(?:num_speculative_tokens|speculative[-_ ]num[-_ ]steps)\s*[=:]?\s*(\d+)")
#: The printed acceptance: "acceptance length 2.93", "accept_len=2.05", "acceptance rate 64%".
_ACCEPT_LENGTH = re.compile(r"accept(?:ance)?[-_ ]len(?:gth)?\s*[=:]?\s*(\d+(?:\.\d+)?)")
_ACCEPT_RATE = re.compile(r"accept(?:ance)?[-_ ]rate\s*[=:]?\s*(\d+(?:\.\d+)?)\s*%")
#: vLLM's benchmark client by name (``vllm bench serve``, ``benchmark_serving.py``; the
#: vLLM-Ascend benchmark guide and ``run-performance-benchmarks.sh`` run it).
_VLLM_CLIENT = re.compile(
    r"vllm bench|benchmark_serving|benchmark guide|run-performance-benchmarks"
)
_LONG_STREAM_INTERVAL = re.compile(r"stream[-_ ]interval[\s=]+0*(?:[2-9]|[1-9]\d)")
#: Why a suffix-decoding row is refused (:func:`_spec_decode`).
SUFFIX_REFUSAL = "suffix decoding (drafts per step vary; no tokens per step given)"
#: The label of a mean ITL row replayed as the mean TPOT (:func:`_itl_as_tpot`).
ITL_AS_TPOT = "metric: mean ITL read as the mean TPOT (vLLM's client, one token per chunk)"
_UNITS_MS: Mapping[str, float] = {"ms": 1.0, "s": MS_PER_S}
_PRECISIONS: Mapping[str, str] = {
    "bf16": "BF16",
    "fp16": "FP16",
    "w8a8": "W8A8",
    "w4a16": "W4A16",
}
_ENGINES: tuple[tuple[str, str], ...] = (("vllm", "vllm"), ("sglang", "sglang"))
_NUMBER = r"(\d[\d,]*(?:\.\d+)?)"
_PER_REQUEST = re.compile(_NUMBER + r"\s+(?:input tokens|generated)\s*/\s*(\d+)\s*req")
_REQUESTS = re.compile(r"(?:\(|\b)(?:\d+\s*/\s*)?(\d+)\s+(?:prompts|requests)\b")
_CAP = re.compile(r"concurrency\s*=?\s*(\d+)", re.IGNORECASE)
_RATE = re.compile(r"(?:request[- ]rate|qps)\s*=?\s*(inf|\d+(?:\.\d+)?)", re.IGNORECASE)


class RowRefusal(UnsupportedError):
    """A row whose ``column`` holds a setting the replay cannot represent (``reason``)."""

    def __init__(self, column: str, reason: str, value: str) -> None:
        self.column = column
        self.reason = reason
        shown = value if len(value) <= 80 else value[:77] + "..."
        super().__init__(f"{column}: {reason} ({shown!r})")

    @property
    def key(self) -> str:
        """What the report counts refusals by: the column and the reason, not the value."""
        return f"{self.column}: {self.reason}"


@dataclass(frozen=True, slots=True, kw_only=True)
class AscendRow:
    """One represented row: the run it measured, which metric and the value in ms."""

    run: BenchmarkRun
    metric: str  # "ttft", "tpot" or "itl" (a percentile of the gaps between tokens)
    measured_ms: float
    #: The percentile of the metric over the requests (None: the mean).
    percentile: float | None = None
    #: A throughput row (``metric`` "throughput"): the ServingResult field it measured and the
    #: value per second (``measured_ms`` is NaN).
    throughput: str | None = None
    measured_per_s: float | None = None
    #: The labelled assumptions the row is represented under (``hardware: assumed ...``,
    #: :data:`ITL_AS_TPOT`); empty: every setting is the source's.
    assumptions: tuple[str, ...] = ()


def is_ascend_header(text: str) -> bool:
    """Whether a measurement file's header names the published-Ascend-results columns."""
    try:
        first = next(csv.reader(csv_lines(text)), [])
    except csv.Error as exc:
        raise malformed_csv(exc) from None
    return bool(_ASCEND_MARKERS & {c.strip() for c in first})


# -- columns ---------------------------------------------------------------------------------
def _metric(row: Mapping[str, str]) -> tuple[str, float, float | None, str]:
    """(metric, value in ms or per second, percentile, the assumption it is read under)."""
    metric = row["metric"].lower()
    percentile = None
    assumed = ""
    found = _PERCENTILE_METRIC.fullmatch(metric)
    if found is not None:
        percentile = _MEDIAN if found.group(1) == "median" else float(found.group(2))
        if not 0 < percentile < 100:
            raise RowRefusal("metric", "a percentile outside (0, 100)", row["metric"])
        metric = found.group(3)
        if metric == "itl":
            _itl_client(row)
    elif metric in _THROUGHPUTS:
        return "throughput", _value(row), None, ""
    elif metric == _MEAN_ITL:
        _itl_client(row)
        metric, assumed = "tpot", ITL_AS_TPOT
    elif "itl" in metric:
        raise RowRefusal(
            "metric", "inter-token latency not labelled mean, median or a percentile", row["metric"]
        )
    elif metric not in _METRICS:
        raise RowRefusal("metric", "not a TTFT, TPOT or the run's throughput", row["metric"])
    if metric in ("ttft", "tpot", "itl") and "not labelled" in row["notes"].lower():
        raise RowRefusal("metric", "not labelled mean or median", row["metric"])
    scale = _UNITS_MS.get(row["unit"].lower())
    if scale is None:
        raise RowRefusal("unit", "not ms or s", row["unit"])
    return _METRICS.get(metric, metric), _value(row) * scale, percentile, assumed


def _itl_client(row: Mapping[str, str]) -> None:
    """Refuse an inter-token latency row unless its client streamed one token per chunk.

    A mean ITL is then compared with the mean TPOT (labelled :data:`ITL_AS_TPOT`), a median or
    percentile ITL with that percentile of the simulated gaps between tokens
    (:meth:`~app.core.workload.ServingResult.itl_percentile_ms`: each decode token follows
    a gap of its step's duration).

    vLLM's benchmark client (``calculate_metrics`` of ``vllm/benchmarks/serve.py``, and of
    ``benchmarks/benchmark_serving.py`` before it) takes a request's TPOT as ``(latency -
    ttft) / (output_len - 1)`` and appends one ITL per streamed chunk after the first. With one
    token per chunk a request's TPOT is the mean of its gaps, and the mean ITL is the mean over
    all gaps: the requests' TPOTs weighted by their gaps, equal to the mean TPOT when every
    request has the same output length (the simulated requests do). They differ when a chunk
    carries several tokens (speculative decoding, a stream interval above 1), without a stream
    (one chunk per request); another client's ITL is not known to follow the same definition.
    Its median and P99 ITL are ``np.median`` / ``np.percentile`` over every gap of every
    request, the same gaps a stream of one token per chunk puts one decode step apart."""
    context = " ".join((row["engine"], row["notes"], row["source"])).lower()
    if not row["spec_decode"].strip().lower().startswith("none"):
        raise RowRefusal("metric", "inter-token latency under speculative decoding", row["metric"])
    if "no-stream" in context or _LONG_STREAM_INTERVAL.search(context):
        raise RowRefusal(
            "metric", "inter-token latency without one token per streamed chunk", row["metric"]
        )
    if _VLLM_CLIENT.search(context) is None:
        raise RowRefusal(
            "metric", "inter-token latency of a client other than vLLM's", row["metric"]
        )


def _value(row: Mapping[str, str]) -> float:
    try:
        value = float(row["value"].replace(",", ""))
    except ValueError:
        raise RowRefusal("value", "not a number", row["value"]) from None
    if not (math.isfinite(value) and value > 0):
        raise RowRefusal("value", "not a number > 0", row["value"])
    return value


def _device(hardware: str, source: str = "") -> tuple[str, str]:
    """A row's catalog device and, for a card the source does not state, the labelled
    assumption it is replayed under (:data:`ASSUMED_CARD_RULES`; blank: stated), or a
    refusal naming why (:data:`HARDWARE_RULES`)."""
    text = hardware.lower()
    if _A2_OR_A3.search(text):
        # One of the two 64 GB devices (an A2 card, an A3 die: the same HBM size and
        # bandwidth; the A3 die peaks 20 % higher); vLLM-Ascend's docs name A2 the usual card.
        if re.search(_VLLM_ASCEND_DOCS, source.lower()):
            return A2_CARD, A2_OR_A3_ASSUMED
    elif _UNSTATED.search(text):
        texts = {"hardware": text, "source": source.lower()}
        for column, pattern, device, why in ASSUMED_CARD_RULES:
            if re.search(pattern, texts[column]):
                return device, f"hardware: assumed {device} ({why})"
    for pattern, rule_device, reason in HARDWARE_RULES:
        if re.search(pattern, text):
            if rule_device is None:
                raise RowRefusal("hardware", reason, hardware)
            return rule_device, ""
    raise RowRefusal("hardware", "no catalog device named", hardware)


def _model(name: str) -> str:
    # "InternLM2-20B-Chat (internlm2-chat-20b)": the whole text, the name before the
    # parenthesis, then the one inside it.
    head, _, inside = name.partition("(")
    names = (name, head.strip(), inside.rstrip(") ").strip())
    hf_id = next((h for n in names if n and (h := resolve_model_name(n)) is not None), None)
    if hf_id is None:
        raise RowRefusal("model", "not in the catalog", name)
    get_model(hf_id)  # an architecture the runner cannot represent is refused here
    return hf_id


def _engine(text: str) -> str:
    lowered = text.lower()
    for needle, family in _ENGINES:
        if needle in lowered:
            return family
    raise RowRefusal("engine", "not vLLM-Ascend or SGLang", text)


def _precision(text: str) -> str:
    head = re.split(r"[\s,(]", text.strip().lower(), maxsplit=1)[0]
    if head not in _PRECISIONS:
        raise RowRefusal("precision", "not stated or a mixed format", text)
    return _PRECISIONS[head]


def _int(column: str, text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise RowRefusal(column, "not a plain parallel size", text)
    return int(text)


def _layout(row: Mapping[str, str], is_moe: bool) -> tuple[int, int, int]:
    tp, dp = _int("tp", row["tp"]), _int("dp", row["dp"])
    ep_text = row["ep"].strip().lower()
    if ep_text in ("", "no"):
        ep = 1
    elif ep_text == "yes":
        ep = tp * dp if is_moe else 1
    else:
        ep = _int("ep", ep_text)
    devices = re.match(r"\s*(\d+)", row["num_devices"])
    if devices is None:
        raise RowRefusal("num_devices", "not stated", row["num_devices"])
    if int(devices.group(1)) != tp * dp:
        raise RowRefusal("num_devices", f"not tp x dp = {tp * dp}", row["num_devices"])
    return tp, dp, ep


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _length(column: str, text: str) -> int:
    lowered = text.lower()
    if re.search(r"image|video|vision|ocr", lowered):
        raise RowRefusal(column, "multimodal input", text)
    if "prefill-only" in lowered:
        raise RowRefusal(column, "a prefill-only measurement", text)
    if "~" in lowered or "variable" in lowered:
        raise RowRefusal(column, "variable lengths", text)
    per_request = _PER_REQUEST.search(lowered)
    if per_request is not None:
        value = _number(per_request.group(1)) / int(per_request.group(2))
    else:
        found = re.match(r"\s*(?:avg\s+)?" + _NUMBER + r"\s*(k\b)?", lowered)
        if found is None:
            raise RowRefusal(column, "not stated", text)
        value = _number(found.group(1)) * (1024 if found.group(2) else 1)
    if value < 1:
        raise RowRefusal(column, "not stated", text)
    return round(value)


def _dataset_mean(row: Mapping[str, str]) -> bool:
    """Whether a length is a dataset's mean (``N input tokens / M req``, ``avg N``): the
    requests' lengths vary around it."""
    return any(
        _PER_REQUEST.search(row[c].lower()) or row[c].strip().lower().startswith("avg")
        for c in ("isl", "osl")
    )


def _sent_at_once(requests: int, cap: int | None, rate: float) -> bool:
    """Whether every request of a run starts at t = 0 (no rate, no cap below the count)."""
    return rate == ALL_AT_ONCE_RATE and (cap is None or cap >= requests)


def _load(row: Mapping[str, str]) -> tuple[int, int | None, float]:
    """(requests, cap on requests in flight, rate) of ``concurrency_or_rate``."""
    text = row["concurrency_or_rate"]
    lowered = text.lower()
    if "batch size" in lowered:
        raise RowRefusal("concurrency_or_rate", "a decode batch size, not a client load", text)
    cap_found = _CAP.search(text)
    cap = int(cap_found.group(1)) if cap_found else None
    rate_found = _RATE.search(text)
    rate = ALL_AT_ONCE_RATE
    if rate_found is not None and rate_found.group(1) != "inf":
        rate = float(rate_found.group(1))
    requests_found = _REQUESTS.search(lowered)
    if requests_found is not None:
        requests = int(requests_found.group(1))
    elif "single request" in lowered:
        requests = 1
    elif (isl := _PER_REQUEST.search(row["isl"].lower())) is not None:
        requests = int(isl.group(2))
    else:
        raise RowRefusal("concurrency_or_rate", "number of requests not stated", text)
    if rate_found is None and cap is None and "default inf" not in lowered:
        raise RowRefusal("concurrency_or_rate", "neither a concurrency nor a rate", text)
    if requests < 1 or (cap is not None and cap < 1) or rate <= 0:
        raise RowRefusal("concurrency_or_rate", "not a positive load", text)
    return requests, cap, rate


def _spec_decode(text: str) -> tuple[int, tuple[float, ...]]:
    """(drafted tokens per step, acceptance per drafted position) of a row: none, or MTP with
    its printed acceptance (:func:`_mtp`)."""
    lowered = text.strip().lower()
    if lowered.startswith("none"):
        return 0, ()
    if _CHAIN_DRAFTS.match(lowered):
        return _mtp(text)
    if "suffix" in lowered:
        # vLLM's suffix method (Arctic Inference) drafts from suffix trees on the CPU, up to
        # num_speculative_tokens but fewer where the match is short or unlikely
        # (suffix_decoding_max_spec_factor x prefix match length, suffix_decoding_min_token_prob;
        # vllm/config/speculative.py): a printed accept rate (accepted / drafted tokens) leaves
        # the tokens per step, which set TPOT, unknown.
        raise RowRefusal("spec_decode", SUFFIX_REFUSAL, text)
    raise RowRefusal("spec_decode", "speculative decoding not represented", text)


def _mtp(text: str) -> tuple[int, tuple[float, ...]]:
    """The drafts per step ``k`` of MTP or EAGLE (a chain: top-k 1) and their acceptance,
    from the printed mean acceptance length ``L`` (vLLM's "Mean acceptance length", SGLang's
    "Accept length": tokens a step emits, ``1 +`` the drafts accepted) or acceptance rate ``a``
    (accepted / drafted tokens; a chain drafts ``k`` every step, so ``L = 1 + k a``). The
    product's MTP (which the EAGLE replays of ``bench.ascend_eagle3`` use too) emits ``1 +
    sum(rates)`` tokens per step and verifies ``1 + k`` after ``k`` draft passes: the ``k``
    rates are ``(L - 1) / k`` each (only their sum moves the mean)."""
    lowered = text.lower()
    method = "EAGLE" if lowered.startswith("eagle") else "MTP"
    topk = re.search(r"topk\s*[=:]?\s*(\d+)", lowered.replace("-", "").replace("_", ""))
    if topk is not None and int(topk.group(1)) > 1:
        raise RowRefusal("spec_decode", f"{method} with a draft tree (top-k above 1)", text)
    drafts = _DRAFTS.search(lowered)
    if drafts is None or not 1 <= int(drafts.group(1)) <= limits.MAX_MTP_TOKENS:
        raise RowRefusal("spec_decode", f"{method} without its number of drafted tokens", text)
    k = int(drafts.group(1))
    length = _ACCEPT_LENGTH.search(lowered)
    rate = _ACCEPT_RATE.search(lowered)
    if length is not None:
        accepted = float(length.group(1)) - 1.0
    elif rate is not None:
        accepted = k * float(rate.group(1)) / PERCENT
    else:
        raise RowRefusal("spec_decode", f"{method} without its acceptance length or rate", text)
    if not 0.0 <= accepted <= k:
        raise RowRefusal("spec_decode", f"an acceptance outside 1 to {1 + k} tokens", text)
    return k, (accepted / k,) * k


def _setting(notes: str, flag: str) -> int | None:
    found = re.search(re.escape(flag) + r"[\s=]+(\d+)", notes)
    return int(found.group(1)) if found else None


def _notes(notes: str) -> tuple[int | None, int | None]:
    lowered = notes.lower()
    hit = re.search(r"cache hit|hit kv cache|dram hit|blocks? hit", lowered)
    if hit and not re.search(r"\bno (?:\w+ )?cache hit|\bcold\b", lowered):
        if re.search(r"\bucm\b|storage", lowered):
            raise RowRefusal("notes", "KV-cache blocks loaded from external storage (UCM)", notes)
        raise RowRefusal("notes", "a KV-cache hit of unstated share", notes)
    return _setting(lowered, "max-num-batched-tokens"), _setting(lowered, "max-num-seqs")


#: The first vLLM-Ascend minor version whose default ``cudagraph_mode`` kept vLLM's
#: ``FULL_AND_PIECEWISE`` (v0.21.0rc1, vllm-project/vllm-ascend#9572 of 2026-05-30), and the
#: first that ran graphs by default (v0.9.0rc1; earlier releases ran eagerly).
_FULL_GRAPH_MINOR = 21
_GRAPH_MINOR = 9
_FULL_GRAPH_DATE = (2026, 6)
_VERSION = re.compile(r"\bv?0\.(\d+)")
_DATE = re.compile(r"\b(20\d\d)-(\d\d)\b")


def _graph_mode(engine: str, notes: str) -> str | None:
    """vLLM-Ascend's graph mode of a row (None: the profile's default): ``eager`` for
    ``--enforce-eager`` and for a release before graph mode."""
    lowered = notes.lower()
    if "enforce-eager" in lowered or "eager mode" in lowered:
        return "eager"
    if "full_decode_only" in lowered:
        return "full_decode_only"
    if "full_and_piecewise" in lowered:
        return "full_and_piecewise"
    if "piecewise" in lowered:
        return "piecewise"
    text = engine.lower()
    version = _VERSION.search(text)
    if version is not None:
        minor = int(version.group(1))
        if minor < _GRAPH_MINOR:
            return "eager"
        return "piecewise" if minor < _FULL_GRAPH_MINOR else "full_and_piecewise"
    date = _DATE.search(text)
    if date is not None:
        dated = (int(date.group(1)), int(date.group(2)))
        return "piecewise" if dated < _FULL_GRAPH_DATE else "full_and_piecewise"
    return None


def _async_scheduling(notes: str) -> bool | None:
    return True if re.search(r"async[- _]scheduling", notes.lower()) else None


def ascend_row(row: Mapping[str, str]) -> AscendRow:
    """The run and measurement of one row, or :class:`RowRefusal` naming the column."""
    metric, measured, percentile, metric_assumed = _metric(row)
    throughput = None
    if metric == "throughput":
        throughput, unit = _THROUGHPUTS[row["metric"].lower()]
        if row["unit"].strip().lower() != unit:
            raise RowRefusal("unit", f"not {unit}", row["unit"])
    device, card_assumed = _device(row["hardware"], row["source"])
    assumptions = tuple(a for a in (card_assumed, metric_assumed) if a)
    model = _model(row["model"])
    engine = _engine(row["engine"])
    precision = _precision(row["precision"])
    tp, dp, ep = _layout(row, get_model(model).is_moe)
    input_length = _length("isl", row["isl"])
    output_length = _length("osl", row["osl"])
    requests, cap, rate = _load(row)
    if throughput is not None and _sent_at_once(requests, cap, rate) and _dataset_mean(row):
        raise RowRefusal(
            "metric",
            "a throughput of a dataset's requests sent at once (the run lasts as long as its "
            "longest request; only mean lengths are given)",
            row["metric"],
        )
    num_mtp_tokens, mtp_acceptance_rates = _spec_decode(row["spec_decode"])
    budget, max_num_seqs = _notes(row["notes"])
    graph_mode = _graph_mode(row["engine"], row["notes"]) if engine == "vllm" else None
    run = BenchmarkRun(
        engine=engine,
        model=model,
        device=device,
        tp=tp,
        dp=dp,
        ep=ep,
        precision=precision,
        input_length=input_length,
        output_length=output_length,
        num_requests=requests,
        max_concurrency=cap,
        request_rate=rate,
        max_batched_tokens=budget,
        max_num_seqs=max_num_seqs,
        npu_graph_mode=graph_mode,
        async_scheduling=_async_scheduling(row["notes"]),
        num_mtp_tokens=num_mtp_tokens,
        mtp_acceptance_rates=mtp_acceptance_rates,
    )
    if throughput is not None:
        return AscendRow(
            run=run,
            metric=metric,
            measured_ms=math.nan,
            throughput=throughput,
            measured_per_s=measured,
            assumptions=assumptions,
        )
    return AscendRow(
        run=run,
        metric=metric,
        measured_ms=measured,
        percentile=percentile,
        assumptions=assumptions,
    )


# -- replay ----------------------------------------------------------------------------------
def replay_ascend_file(text: str) -> CaseFileReport:
    """Predict every row of a published-Ascend-results file or refuse it with its reason."""
    rows = read_case_rows(text, ASCEND_CASE_COLUMNS)
    replay = ServingReplay()
    results: dict[
        tuple[BenchmarkRun, float | None, bool], tuple[float, float] | ChunkwiseError
    ] = {}
    throughputs: dict[tuple[BenchmarkRun, str], float] = {}
    outcomes: list[RowOutcome] = []
    for index, row in enumerate(rows):
        try:
            mapped = ascend_row(row)
        except ChunkwiseError as err:
            reason = err.key if isinstance(err, RowRefusal) else str(err)
            outcomes.append(_outcome(index, row, None, err, reason))
            continue
        run = mapped.run
        itl = mapped.metric == "itl"
        key = (run, mapped.percentile, itl)
        found = results.get(key)
        if found is None:
            try:
                found = replay.predict_benchmark(run, mapped.percentile, itl=itl)
            except ChunkwiseError as err:
                found = err
            results[key] = found
        if isinstance(found, ChunkwiseError):
            outcomes.append(_outcome(index, row, mapped, found, str(found)))
            continue
        rate = None
        if mapped.throughput is not None:
            rate = throughputs.get((run, mapped.throughput))
            if rate is None:
                result = replay.benchmark_result(run)[1]
                rate = throughputs[(run, mapped.throughput)] = getattr(result, mapped.throughput)
        outcomes.append(_outcome(index, row, mapped, found, "", rate))
    return case_file_report(tuple(outcomes))


def _outcome(
    index: int,
    row: Mapping[str, str],
    mapped: AscendRow | None,
    result: tuple[float, float] | ChunkwiseError,
    refusal: str,
    throughput_pred: float | None = None,
) -> RowOutcome:
    """A row's outcome: the measured metric (the others NaN), predictions or the reason."""
    measured = {"ttft": math.nan, "tpot": math.nan}
    measured_per_s = math.nan
    if mapped is not None and mapped.measured_per_s is not None:
        measured_per_s = mapped.measured_per_s
    elif mapped is not None:
        # an ITL percentile is compared in the TPOT column (its prediction is the gaps')
        measured["tpot" if mapped.metric == "itl" else mapped.metric] = mapped.measured_ms
    failed = isinstance(result, ChunkwiseError)
    return RowOutcome(
        case_id=f"row{index}",
        hardware=_hardware_group(row),
        engine_family=_family_or_text(row["engine"]) + _mode_label(mapped),
        model=row["model"],
        measured_ttft_ms=measured["ttft"],
        measured_tpot_ms=measured["tpot"],
        ttft_ms_pred=None if isinstance(result, ChunkwiseError) else result[0],
        tpot_ms_pred=None if isinstance(result, ChunkwiseError) else result[1],
        error=str(result) if failed else "",
        refusal=refusal,
        measured_throughput=measured_per_s,
        throughput_pred=throughput_pred,
        assumed=ASSUMPTION_SEP.join(mapped.assumptions) if mapped is not None else "",
    )


def _hardware_group(row: Mapping[str, str]) -> str:
    """A row's group: its catalog device (``<device> (assumed)`` for a card the source does
    not state: counted apart from the stated ones), else the hardware text."""
    try:
        device, assumed = _device(row["hardware"], row["source"])
    except RowRefusal:
        return row["hardware"]
    return f"{device} (assumed)" if assumed else device


def _mode_label(mapped: AscendRow | None) -> str:
    """`` (eager)`` for a row replayed in eager execution: its groups stand apart from the
    graph-mode ones of the same deployment."""
    return " (eager)" if mapped is not None and mapped.run.npu_graph_mode == "eager" else ""


def _family_or_text(engine: str) -> str:
    try:
        return _engine(engine)
    except RowRefusal:
        return (engine.split() or ["(blank)"])[0]
