"""Render ``validate --kernels --format json`` reports as the markdown of docs/kernels_baseline.md.

    chunkwise validate --kernels DIR --format json > all.json
    chunkwise validate --kernels DIR --format json --split train > train.json
    chunkwise validate --kernels DIR --format json --split test > test.json
    python -m scripts.kernel_baseline all.json --train train.json --test test.json \
        > docs/kernels_baseline.md

Whole groups (band ``all``) of every system, then the shape bands of ``--bands-for`` systems.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

Row = dict[str, Any]
Key = tuple[str, str, str, str, str]


def _load(path: str | None) -> dict[Key, Row]:
    if path is None:
        return {}
    body = json.loads(Path(path).read_text(encoding="utf-8"))
    return {
        (g["system"], g["engine"], g["op"], g["quantization"], g["band"]): g for g in body["groups"]
    }


def _cell(row: Row | None, field: str) -> str:
    if row is None:
        return "-"
    value = row[field]
    return f"{value:+.1f}" if field == "median_signed_pct" else f"{value:.1f}"


def render(
    report: dict[str, Any], train: dict[Key, Row], test: dict[Key, Row], bands_for: set[str]
) -> str:
    groups = {
        (g["system"], g["engine"], g["op"], g["quantization"], g["band"]): g
        for g in report["groups"]
    }
    split = bool(train or test)
    head = ["system", "engine", "op", "quantization", "n", "med abs %", "p90 abs %", "med signed %"]
    if split:
        head += ["n train", "med abs % train", "n test", "med abs % test"]
    lines = [
        "# Kernel baseline (generated: `python -m scripts.kernel_baseline`, see docs/kernels.md)",
        "",
        f"{report['points']} measured points: {report['predicted']} predicted, "
        f"{report['refused']} refused.",
        "",
        "## Refused points, per reason",
        "",
        "| points | reason |",
        "|---:|---|",
        *(f"| {r['points']} | {r['reason']} |" for r in report["refusals"]),
        "",
        "## Every (system, engine, op, quantization), all shapes",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" if i < 4 else "---:" for i in range(len(head))) + "|",
    ]
    for key, row in groups.items():
        if key[4] != "all":
            continue
        cells = [*key[:4], str(row["n"])]
        cells += [_cell(row, f) for f in ("median_abs_pct", "p90_abs_pct", "median_signed_pct")]
        if split:
            tr, te = train.get(key), test.get(key)
            cells += [str(tr["n"]) if tr else "0", _cell(tr, "median_abs_pct")]
            cells += [str(te["n"]) if te else "0", _cell(te, "median_abs_pct")]
        lines.append("| " + " | ".join(cells) + " |")
    if bands_for:
        lines += [
            "",
            "## Shape bands (" + ", ".join(sorted(bands_for)) + ")",
            "",
            "| system | engine | op | quantization | band | n | med abs % | p90 abs % "
            "| med signed % |",
            "|---|---|---|---|---|---:|---:|---:|---:|",
        ]
        for key, row in groups.items():
            if key[0] not in bands_for or key[4] == "all":
                continue
            cells = [*key, str(row["n"])]
            cells += [_cell(row, f) for f in ("median_abs_pct", "p90_abs_pct", "median_signed_pct")]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("report", help="validate --kernels --format json output")
    parser.add_argument("--train", default=None, help="the same with --split train")
    parser.add_argument("--test", default=None, help="the same with --split test")
    parser.add_argument(
        "--bands-for",
        action="append",
        default=None,
        help="systems whose shape bands are listed (default h100_sxm and b200_sxm)",
    )
    args = parser.parse_args(argv)
    report = json.loads(Path(args.report).read_text(encoding="utf-8"))
    bands = set(args.bands_for or ["h100_sxm", "b200_sxm"])
    sys.stdout.write(render(report, _load(args.train), _load(args.test), bands))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
