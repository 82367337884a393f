"""Replay the published Ascend serving results the product represents (the rows of
``shared/validation/ascend_serving_points.csv``, vendored in ``bench/data``) through
``services.simulate``, and print the error of every point and the median absolute errors.

    python -m bench.ascend_serving [--csv OUT.csv] [--coverage]

Which rows, and how a row becomes a request, is the product's column mapping
(:mod:`app.core.validation.ascend_file`, what ``chunkwise validate --cases
ascend_serving_points.csv`` replays; its docstring documents every column and the refusals):
the rows of one published run (same deployment, lengths and load) are one point here, with
its mean TTFT and TPOT where the source printed them. This script adds what the validator does
not: the run through ``services.simulate`` (the request a user would send), the Ascend
residual groups (``scripts/residuals.py``) and the 80 % intervals' coverage.
"""

from __future__ import annotations

import argparse
import csv
import math
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
from app.core.errors import ChunkwiseError
from app.core.validation import ASCEND_CASE_COLUMNS, BenchmarkRun, read_case_rows
from app.core.validation.ascend_file import ITL_AS_TPOT, ascend_row
from app.core.validation.case_file import ASSUMPTION_SEP
from app.models.simulate import SimulateRequest, SimulateResponse
from app.services.context import create_context
from app.services.simulate import simulate
from app.settings import Settings
from bench import ascend_eagle3

#: ``shared/validation/ascend_serving_points.csv``, vendored: the points are its data rows.
SOURCE = Path(__file__).resolve().parent / "data" / "ascend_serving_points.csv"


@dataclass(frozen=True, slots=True)
class Point:
    """One published run: the rows it comes from, the run and what it measured (None: not
    printed)."""

    name: str  # the 0-based data rows of ascend_serving_points.csv ("rows 146")
    deployment: str  # the points of one deployment differ in load and lengths only
    run: BenchmarkRun
    ttft_ms: float | None
    tpot_ms: float | None
    #: The labelled assumption the run stands on (a card its source does not state; blank:
    #: none): printed and summarised apart, and left out of the residual table.
    assumed: str = ""


def points(text: str) -> tuple[Point, ...]:
    """The represented rows of a published-Ascend-results file, one point per run (in the
    order of its first row; the same run published by two sources is two points); refused
    rows are left out (the validator reports them)."""
    found: dict[tuple[str, BenchmarkRun], dict[str, Any]] = {}
    for index, row in enumerate(read_case_rows(text, ASCEND_CASE_COLUMNS)):
        try:
            mapped = ascend_row(row)
        except ChunkwiseError:
            continue
        if mapped.percentile is not None or mapped.throughput is not None:
            continue  # the means only: a point is one run's mean TTFT and TPOT
        if ITL_AS_TPOT in mapped.assumptions:
            continue  # the run's mean TPOT is the point's (a mean ITL row stands beside it)
        key = (row["source"], mapped.run)
        assumed = ASSUMPTION_SEP.join(mapped.assumptions)
        entry = found.setdefault(key, {"rows": [], "ttft": None, "tpot": None, "assumed": assumed})
        entry["rows"].append(str(index))
        entry[mapped.metric] = mapped.measured_ms
    return tuple(
        Point(
            name="rows " + ",".join(entry["rows"]),
            deployment=f"{run.model} {run.tp * run.dp} x {run.device}",
            run=run,
            ttft_ms=entry["ttft"],
            tpot_ms=entry["tpot"],
            assumed=entry["assumed"],
        )
        for (_, run), entry in found.items()
    )


POINTS: tuple[Point, ...] = points(SOURCE.read_text(encoding="utf-8"))


def request(point: Point) -> SimulateRequest:
    """The ``/v1/simulate`` request of a point's run (a poisson load: every request sent at
    once up to ``max_concurrency`` in flight is the client's ``--request-rate inf``)."""
    run = point.run
    body: dict[str, Any] = {
        "model": run.model,
        "device": run.device,
        "engine": run.engine,
        "quantize_linear_action": _LINEAR_ACTIONS[run.precision],
        "tp_size": run.tp,
        "dp_size": run.dp,
        "ep_size": run.ep,
        "num_devices": run.tp * run.dp,
        "input_length": run.input_length,
        "output_length": run.output_length,
        "workload": "poisson",
        "request_rate": run.request_rate,
        "num_requests": run.num_requests,
    }
    if run.max_batched_tokens is not None:
        body["max_batched_tokens"] = run.max_batched_tokens
    if run.num_mtp_tokens:
        body["num_mtp_tokens"] = run.num_mtp_tokens
        body["mtp_acceptance_rates"] = list(run.mtp_acceptance_rates)
    options = {
        "max_num_seqs": run.max_num_seqs,
        "npu_graph_mode": run.npu_graph_mode,
        "overlap_scheduling": run.async_scheduling,
    }
    if any(v is not None for v in options.values()):
        body["engine_options"] = {k: v for k, v in options.items() if v is not None}
    if run.max_concurrency is not None:
        body["max_concurrency"] = run.max_concurrency
    return SimulateRequest.model_validate(body)


#: The validator's precision -> the request's linear-layer action.
_LINEAR_ACTIONS: Mapping[str, str] = {
    "BF16": "DISABLED",
    "FP16": "DISABLED",
    "W8A8": "W8A8_DYNAMIC",
    "W4A16": "W4A16",
}


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
                "deployment": point.deployment,
                "ttft_ms": point.ttft_ms,
                "ttft_ms_pred": result.ttft_ms,
                "tpot_ms": point.tpot_ms,
                "tpot_ms_pred": result.tpot_ms,
                "assumed": point.assumed,
            }
        )
    return out


def ascend_residuals() -> list[Residual]:
    """The log errors of these points and of ``bench.ascend_eagle3``'s (a TTFT the source did
    not print: NaN), each with its vendor and deployment: the Ascend groups of the residual
    table (``python -m scripts.residuals``)."""
    context = create_context(Settings(cache_backend="memory", log_level="warning"))
    stated = [p for p in POINTS if not p.assumed]  # a card the source does not state: apart
    runs = [(request(p), p.ttft_ms, p.tpot_ms, p.deployment) for p in stated] + [
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
    rows = replay()
    errors: dict[tuple[str, bool], list[float]] = {}
    for row in rows:
        cells = []
        for metric in ("ttft_ms", "tpot_ms"):
            measured, predicted = row[metric], row[f"{metric}_pred"]
            if measured is None:
                cells.append(f"{metric} {'-':>9} -> {predicted:9,.1f}        ")
                continue
            error = error_pct(predicted, measured)
            errors.setdefault((metric, bool(row["assumed"])), []).append(error)
            cells.append(f"{metric} {measured:9,.1f} -> {predicted:9,.1f} ({error:+6.1f}%)")
        mark = "  [card assumed]" if row["assumed"] else ""
        print(f"{row['name']:<14} {row['deployment']:<52} " + "  ".join(cells) + mark)
    for metric in ("ttft_ms", "tpot_ms"):
        stated = errors.get((metric, False), [])
        every = stated + errors.get((metric, True), [])
        for label, values in (("stated cards", stated), ("with assumed cards", every)):
            if values:
                print(
                    f"{metric}, {label}: {len(values)} points, median |error| "
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
