"""Regenerate ``app/core/calibration/residuals.json``: the product's own validation residuals
per group (the spread of uncalibrated 80 % intervals).

    python -m scripts.residuals            # print the table
    python -m scripts.residuals --write    # write it

It replays every row of ``shared/validation/measured_agg_serving_cases.csv`` (uncalibrated, the
way ``chunkwise validate --cases`` does) and the published Ascend serving points of
``bench/ascend_serving.py`` and ``bench/ascend_eagle3.py`` (through ``services.simulate``, the
way a user's request is answered; their vendor's groups only), and keeps the groups with enough
errors (``app/core/calibration/residuals.py``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from app.core.calibration.residuals import RESIDUALS_FILE, build_table
from app.core.errors import ChunkwiseError
from app.core.validation.case_file import _measured, read_case_rows, row_case
from app.core.validation.intervals import replay_residuals
from bench import ascend_serving

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "app" / "core" / "calibration" / RESIDUALS_FILE
#: The measured serving file (the shared validation data beside the repository).
CASES = ROOT.parent / "shared" / "validation" / "measured_agg_serving_cases.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {TABLE}")
    parser.add_argument("--cases", type=Path, default=CASES, help="the measurement file")
    args = parser.parse_args()
    points = []
    for row in read_case_rows(args.cases.read_text(encoding="utf-8")):
        try:
            points.append((row_case(row), _measured(row, "tpot_ms")))
        except ChunkwiseError:
            continue
    residuals = replay_residuals(points) + ascend_serving.ascend_residuals()
    text = json.dumps(build_table(residuals), indent=1, sort_keys=True) + "\n"
    if args.write:
        TABLE.write_text(text, encoding="utf-8")
        print(f"wrote {TABLE}")
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
