"""Record or check the golden corpus: ``python -m scripts.golden [--write] [NAME ...]``.

Without ``--write`` it prints the cases whose output differs from ``tests/golden/expected``.
"""

from __future__ import annotations

import argparse
import sys

from tests.golden.harness import EXPECTED_DIR, all_cases, expected_path, render


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="record the outputs")
    parser.add_argument("names", nargs="*", help="only these cases")
    args = parser.parse_args(argv)
    EXPECTED_DIR.mkdir(exist_ok=True)
    differ = 0
    for case in all_cases():
        if args.names and case.name not in args.names:
            continue
        text = render(case)
        path = expected_path(case.name)
        if args.write:
            path.write_text(text)
        elif not path.exists() or path.read_text() != text:
            differ += 1
            print(f"differs: {case.name}")
    print(f"{differ} differing" if not args.write else f"recorded in {EXPECTED_DIR}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
