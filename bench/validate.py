"""Replay the published single-forward measurements (issue 3). Run: ``python -m bench.validate``.

Same as ``chunkwise validate``: per-device median / p90 absolute percentage error of the
``ttft_bs1`` points of ``app/core/catalog/data/published_points.csv`` (TensorRT-LLM v0.9
performance overview), then a CSV of predictions next to measurements (``--csv PATH`` writes
it to a file instead). ``--all`` adds the other case kinds (msmodeling's Ascend per-forward
baselines). Exit code 1 when the targets (median <= 15 %, every device <= 25 %) fail.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.core.validation import LOADERS, TARGET_KIND, run_validation


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--csv", type=Path, default=None, help="write the CSV here")
    parser.add_argument("--all", action="store_true", help="every case kind, not only ttft_bs1")
    args = parser.parse_args(argv)
    report = run_validation(kinds=tuple(LOADERS) if args.all else (TARGET_KIND,))
    print(report.format_table())
    if args.csv is None:
        print()
        print(report.to_csv(), end="")
    else:
        args.csv.write_text(report.to_csv(), encoding="utf-8")
        print(f"predictions vs measurements: {args.csv}")
    worst = sorted(report.results, key=lambda r: r.ape_pct, reverse=True)[:5]
    print("\nworst cases:", file=sys.stderr)
    for r in worst:
        print(
            f"  {r.case.label}: measured {r.case.measured:g} {r.case.unit}, "
            f"predicted {r.predicted:.1f} ({r.error_pct:+.1f}%)",
            file=sys.stderr,
        )
    return 0 if report.targets_met else 1


if __name__ == "__main__":
    sys.exit(main())
