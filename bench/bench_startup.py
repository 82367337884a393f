"""Start-up benchmark: whole-process wall time of ``chunkwise optimize`` (prints figures; not a
pass/fail test).

msmodeling's A1 query -- Qwen3-32B on one ATLAS_800_A2_376T_64G, 3500/1500 tokens, TPOT <= 50 ms,
W8A8_DYNAMIC, burst workload, the in-process cache -- run as ``python -m app.cli optimize ...``,
against ``python -c "import json"`` (the interpreter's own start-up) in the same run, best of N
each. Target: the optimize at most 5x the bare interpreter.

    PYTHONPATH=$PWD python -m bench.bench_startup            # best of 5
    PYTHONPATH=$PWD python -m bench.bench_startup --runs 9 --json bench/out/startup.json
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
A1_QUERY = (
    "optimize",
    "Qwen/Qwen3-32B",
    "--device",
    "ATLAS_800_A2_376T_64G",
    "--num-devices",
    "1",
    "--input-length",
    "3500",
    "--output-length",
    "1500",
    "--tpot-limit",
    "50",
    "--quantize-linear-action",
    "W8A8_DYNAMIC",
    "--workload",
    "burst",
)
BASELINE = ("-c", "import json")
TARGET_RATIO = 5.0


def wall_s(argv: tuple[str, ...], env: dict[str, str]) -> float:
    """One whole process, from spawn to exit; a failing command stops the benchmark."""
    started = time.perf_counter()
    subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def best_of(runs: int, argv: tuple[str, ...], env: dict[str, str]) -> float:
    return min(wall_s(argv, env) for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="best of this many runs each")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "APP_CACHE_BACKEND": "memory"}
    # An installed package runs from bytecode (pip compiles it); a checkout under
    # PYTHONDONTWRITEBYTECODE=1 would recompile every module on every run (~0.13 s here).
    compileall.compile_dir(ROOT / "app", quiet=1)
    wall_s(("-m", "app.cli", *A1_QUERY), env)  # warm the file cache
    baseline = best_of(args.runs, BASELINE, env)
    optimize = best_of(args.runs, ("-m", "app.cli", *A1_QUERY), env)
    ratio = optimize / baseline
    figures = {
        "runs": args.runs,
        "python_import_json_s": round(baseline, 4),
        "chunkwise_optimize_s": round(optimize, 4),
        "ratio": round(ratio, 2),
        "target_ratio": TARGET_RATIO,
    }
    print(f'python -c "import json"   {baseline:.3f} s (best of {args.runs})')
    print(f"chunkwise optimize (A1)   {optimize:.3f} s (best of {args.runs})")
    verdict = "meets" if ratio <= TARGET_RATIO else "misses"
    print(f"ratio                     {ratio:.2f}x ({verdict} the {TARGET_RATIO:g}x target)")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
