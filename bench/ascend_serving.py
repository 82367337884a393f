"""Replay the published Ascend serving results the product can represent (vLLM-Ascend rows of
``shared/validation/ascend_serving_points.csv``) through ``services.simulate``, and print the
error of every point and the median absolute errors.

    python -m bench.ascend_serving [--csv OUT.csv]

Which rows, and why only these (the file has 342 rows, one metric each):

- taken: text-only runs of a model in the catalog, on a stated Atlas A2 / A3 device, with a
  stated layout, lengths and load, whose source the file's ``SOURCES.md`` rates high or
  medium: Qwen3-32B on an Atlas 800T A2 node (4 cards, vLLM-Ascend v0.13.0rc1, six datasets
  at two or three concurrencies, the baseline rows without suffix decoding), Qwen3.5-397B
  W8A8 on an A3 node (TP16) and on two A2 nodes (TP8 x DP2), Qwen3-30B-A3B on four A2 cards
  (rate 1/s) and Qwen2.5-72B on four 800T A2 cards (the cold TTFT of the KV-pool pages);
- left out: hardware not stated (Llama-3.1-8B, Qwen3-8B, Qwen2.5-7B guides), multimodal
  inputs, models without a config in the catalog (QwQ-32B, Qwen3.5-4B, Hunyuan, InternLM2,
  Hy3, Kimi-K2.6, Qwen3-Omni, Qwen3-Next), prefill-only or PD-instance measurements,
  Ascend950PR and 310P cards, speculative and suffix decoding.

How a row is replayed: the vLLM profile (the rows are vLLM-Ascend); the source's
``max-num-batched-tokens``; a load of ``N`` requests at concurrency ``C`` is
``benchmark_serving --request-rate inf --max-concurrency C --num-prompts N`` (every request
sent at once, at most ``C`` in flight: the workload ``poisson`` at an unbounded rate, which
is a closed loop of exactly ``N`` requests), a request rate is that rate's Poisson arrivals.
Natural-EOS datasets are replayed at their printed mean input and output lengths. Devices:
the Atlas 800T / 800I A2 cards as the 910B3 (``ATLAS_800_A2_313T_64G``, what the QwQ-32B page
states for its 800I A2; decode is memory-bound, and the A2 variants share 64 GB at 1.6 TiB/s),
an A3 node as 16 dies of ``ATLAS_800_A3_752T_128G_DIE``.
"""

from __future__ import annotations

import argparse
import csv
import functools
import math
import re
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.calibration.residuals import (
    GroupSpread,
    Residual,
    build_table,
    device_vendor,
    lookup,
    parse_table,
    shipped_table,
)
from app.core.catalog.models import get_model
from app.models.simulate import SimulateRequest, SimulateResponse
from app.services.context import create_context
from app.services.simulate import simulate
from app.settings import Settings
from bench import ascend_eagle3

#: ``shared/validation/ascend_serving_points.csv``, vendored: the points cite its data rows.
SOURCE = Path(__file__).resolve().parent / "data" / "ascend_serving_points.csv"
A2 = "ATLAS_800_A2_313T_64G"
A3 = "ATLAS_800_A3_752T_128G_DIE"
#: A request rate no benchmark reaches: every request is sent at t = 0 (``--request-rate inf``).
ALL_AT_ONCE_RATE = 1.0e6


@dataclass(frozen=True, slots=True)
class Point:
    """One published run: its deployment, its load and what it measured (None: not printed)."""

    name: str
    deployment: str  # the points of one deployment differ in load and lengths only
    rows: str  # the 0-based data rows of ascend_serving_points.csv it comes from
    model: str
    device: str
    quantization: str
    tp: int
    dp: int
    ep: int
    max_batched_tokens: int
    isl: int
    osl: int
    num_requests: int
    concurrency: int | None  # at most this many in flight (None: no cap)
    request_rate: float  # requests/s (ALL_AT_ONCE_RATE: all sent at once)
    ttft_ms: float | None
    tpot_ms: float | None


def _qwen3_32b(
    dataset: str, rows: str, isl: int, osl: int, requests: int, runs: tuple[tuple[int, float], ...]
) -> tuple[Point, ...]:
    """The suffix-decoding page's baseline runs of one dataset: (concurrency, mean TPOT)."""
    return tuple(
        Point(
            name=f"Q32-{dataset}-c{c}",
            deployment="Qwen3-32B 4 x 800T A2",
            rows=rows,
            model="Qwen/Qwen3-32B",
            device=A2,
            quantization="DISABLED",
            tp=4,
            dp=1,
            ep=1,
            max_batched_tokens=40960,
            isl=isl,
            osl=osl,
            num_requests=requests,
            concurrency=c,
            request_rate=ALL_AT_ONCE_RATE,
            ttft_ms=None,
            tpot_ms=tpot,
        )
        for c, tpot in runs
    )


POINTS: tuple[Point, ...] = (
    *_qwen3_32b("HumanEval", "146-157", 150, 2700, 100, ((1, 55.1), (15, 61.6), (26, 64.7))),
    *_qwen3_32b("ARC", "158-169", 76, 960, 100, ((1, 52.8), (8, 59.1), (15, 59.8))),
    *_qwen3_32b("GSM8K", "170-181", 67, 1570, 100, ((1, 55.5), (17, 61.5), (26, 63.9))),
    *_qwen3_32b("ShareGPT", "182-193", 666, 231, 327, ((1, 54.1), (8, 58.8), (14, 61.8))),
    *_qwen3_32b("BoolQ", "194-205", 207, 314, 100, ((1, 54.1), (16, 60.0), (32, 62.7))),
    *_qwen3_32b("AGIEval", "206-217", 735, 1880, 100, ((1, 53.1), (24, 64.0), (34, 70.0))),
    Point("Q35-397B-A3-c7", "Qwen3.5-397B A3", "4-5", "Qwen/Qwen3.5-397B-A17B", A3,
          "W8A8_DYNAMIC", 16, 1, 16, 16384, 8192, 1024, 28, 7, ALL_AT_ONCE_RATE, 2730.0, 39.0),
    Point("Q35-397B-2xA2-c7", "Qwen3.5-397B 2 x A2", "12-13", "Qwen/Qwen3.5-397B-A17B", A2,
          "W8A8_DYNAMIC", 8, 2, 16, 16384, 8192, 1024, 28, 7, ALL_AT_ONCE_RATE, 5880.0, 40.8),
    Point("Q3-30B-A3B-rate1", "Qwen3-30B-A3B 4 x A2", "316,319", "Qwen/Qwen3-30B-A3B", A2,
          "DISABLED", 4, 1, 1, 8192, 128, 128, 200, None, 1.0, 587.30, 23.89),
    Point("Q25-72B-c25", "Qwen2.5-72B 4 x 800T A2", "281", "Qwen/Qwen2.5-72B-Instruct", A2,
          "DISABLED", 4, 1, 1, 8192, 1024, 10, 100, 25, ALL_AT_ONCE_RATE, 2463.0, None),
)  # fmt: skip


@functools.cache
def _source_rows() -> tuple[dict[str, str], ...]:
    with SOURCE.open(encoding="utf-8", newline="") as handle:
        return tuple(csv.DictReader(handle))


def cited_rows(point: Point) -> list[dict[str, str]]:
    """The source rows ``point.rows`` names ("146-157", "316,319": 0-based data rows)."""
    rows = _source_rows()
    indices: list[int] = []
    for part in point.rows.split(","):
        first, _, last = part.partition("-")
        indices.extend(range(int(first), int(last or first) + 1))
    return [rows[i] for i in indices]


def check_source(point: Point) -> None:
    """The measured values are the cited rows' (mean TTFT as ``mean_ttft`` or ``ttft`` in ms or
    s, mean TPOT as ``mean_tpot`` in ms); raises when one is not there."""
    rows = cited_rows(point)
    for value, metrics in ((point.ttft_ms, ("mean_ttft", "ttft")), (point.tpot_ms, ("mean_tpot",))):
        if value is None:
            continue
        printed = {
            float(r["value"].replace(",", "")) * (1000.0 if r["unit"] == "s" else 1.0)
            for r in rows
            if r["metric"] in metrics and _same_load(point, r["concurrency_or_rate"])
        }
        if not any(abs(v - value) < 1e-6 for v in printed):
            raise ValueError(f"{point.name}: {value} is not among rows {point.rows}: {printed}")


def _same_load(point: Point, load: str) -> bool:
    """The row's load names the point's request count and its concurrency (or rate)."""
    numbers = {int(n) for n in re.findall(r"\d+", load)}
    bound = point.concurrency if point.concurrency is not None else int(point.request_rate)
    return point.num_requests in numbers and bound in numbers


def request(point: Point) -> SimulateRequest:
    body: dict[str, Any] = {
        "model": point.model,
        "device": point.device,
        "engine": "vllm",
        "quantize_linear_action": point.quantization,
        "tp_size": point.tp,
        "dp_size": point.dp,
        "ep_size": point.ep,
        "num_devices": point.tp * point.dp,
        "input_length": point.isl,
        "output_length": point.osl,
        "max_batched_tokens": point.max_batched_tokens,
        "workload": "poisson",
        "request_rate": point.request_rate,
        "num_requests": point.num_requests,
    }
    if point.concurrency is not None:
        body["max_concurrency"] = point.concurrency
    return SimulateRequest.model_validate(body)


def error_pct(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured * 100.0


def replay() -> list[dict[str, Any]]:
    context = create_context(Settings(cache_backend="memory", log_level="warning"))
    out = []
    for point in POINTS:
        result = simulate(context, request(point))
        assert isinstance(result, SimulateResponse)
        out.append(
            {
                "name": point.name,
                "rows": point.rows,
                "ttft_ms": point.ttft_ms,
                "ttft_ms_pred": result.ttft_ms,
                "tpot_ms": point.tpot_ms,
                "tpot_ms_pred": result.tpot_ms,
            }
        )
    return out


def ascend_residuals() -> list[Residual]:
    """The log errors of these points and of ``bench.ascend_eagle3``'s (a TTFT the source did
    not print: NaN), each with its vendor and deployment: the Ascend groups of the residual
    table (``python -m scripts.residuals``)."""
    context = create_context(Settings(cache_backend="memory", log_level="warning"))
    runs = [(request(p), p.ttft_ms, p.tpot_ms, p.deployment) for p in POINTS] + [
        (ascend_eagle3.request(p, ascend_eagle3.DEVICE), p.ttft_ms, p.tpot_ms, p.name)
        for p in ascend_eagle3.POINTS
    ]
    out = []
    for body, ttft_ms, tpot_ms, deployment in runs:
        result = simulate(context, body)
        assert isinstance(result, SimulateResponse)  # an aggregated simulation
        device = str(body.device)
        out.append(
            Residual(
                device=device,
                engine=str(result.engine["name"]),
                is_moe=get_model(str(body.model)).is_moe,
                ttft_log_error=_log_error(result.ttft_ms, ttft_ms),
                tpot_log_error=_log_error(result.tpot_ms, tpot_ms),
                vendor=device_vendor(device),
                source=deployment,
            )
        )
    return out


def _log_error(predicted: float, measured: float | None) -> float:
    return math.log(predicted / measured) if measured is not None else math.nan


def coverage(residuals: list[Residual]) -> dict[str, dict[str, tuple[int, int]]]:
    """How many measured values the 80 % intervals hold, (inside, all) per metric: the shipped
    table's, the vendor groups built from every point, and built without the point's own
    deployment (an honest check: the rest never saw it)."""

    def count(table_of: Callable[[Residual], Mapping[str, GroupSpread]]) -> dict[str, Any]:
        hits = {"ttft": [0, 0], "tpot": [0, 0]}
        for r in residuals:
            group = lookup(table_of(r), r.device, r.engine, r.is_moe)
            for metric, error, spread in (
                ("ttft", r.ttft_log_error, group.ttft),
                ("tpot", r.tpot_log_error, group.tpot),
            ):
                if math.isfinite(error):
                    hits[metric][0] += spread.low <= error <= spread.high
                    hits[metric][1] += 1
        return {metric: (a, b) for metric, (a, b) in hits.items()}

    every = parse_table(build_table(residuals))
    without = {
        source: parse_table(build_table([x for x in residuals if x.source != source]))
        for source in {r.source for r in residuals}
    }
    return {
        "shipped table": count(lambda r: shipped_table()),
        "every deployment": count(lambda r: every),
        "without its deployment": count(lambda r: without[r.source]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", help="write every point's prediction here")
    parser.add_argument(
        "--coverage", action="store_true", help="also the 80 %% intervals' coverage of them"
    )
    args = parser.parse_args(argv)
    for point in POINTS:
        check_source(point)
    rows = replay()
    errors: dict[str, list[float]] = {"ttft_ms": [], "tpot_ms": []}
    for row in rows:
        cells = []
        for metric in ("ttft_ms", "tpot_ms"):
            measured, predicted = row[metric], row[f"{metric}_pred"]
            if measured is None:
                cells.append(f"{metric} {'-':>9} -> {predicted:9,.1f}        ")
                continue
            error = error_pct(predicted, measured)
            errors[metric].append(error)
            cells.append(f"{metric} {measured:9,.1f} -> {predicted:9,.1f} ({error:+6.1f}%)")
        print(f"{row['name']:<20} " + "  ".join(cells))
    for metric, values in errors.items():
        if values:
            print(
                f"{metric}: {len(values)} points, median |error| "
                f"{statistics.median(abs(v) for v in values):.1f} %, median signed "
                f"{statistics.median(values):+.1f} %"
            )
    if args.coverage:
        for name, hits in coverage(ascend_residuals()).items():
            summary = ", ".join(f"{m.upper()} {a}/{b}" for m, (a, b) in hits.items())
            print(f"80 % intervals, {name}: {summary}")
    if args.csv:
        with open(args.csv, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
