"""Calibration validated on held-out measurements (issue 13's protocol).

    python -m bench.calibration_holdout [--cases FILE.csv] [--min-rows 12]

For every (hardware, engine family, model, quantization) group of at least ``--min-rows`` rows:
calibrate on every fourth row ordered by concurrency, predict the other three quarters; print the
held-out median absolute % errors calibrated and uncalibrated, and the share of held-out
measurements inside the 80 % intervals (see ``app/core/validation/holdout.py``), with the time.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from app.core.validation.holdout import MIN_GROUP_ROWS, run_holdout

CASES = (
    Path(__file__).resolve().parents[1].parent
    / "shared"
    / "validation"
    / ("measured_agg_serving_cases.csv")
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=Path, default=CASES)
    parser.add_argument("--min-rows", type=int, default=MIN_GROUP_ROWS)
    args = parser.parse_args()
    start = time.perf_counter()
    report = run_holdout(args.cases.read_text(encoding="utf-8"), min_group_rows=args.min_rows)
    elapsed = time.perf_counter() - start
    print(report.format_table())
    print(f"\n{len(report.groups)} groups in {elapsed:.1f} s")


if __name__ == "__main__":
    main()
