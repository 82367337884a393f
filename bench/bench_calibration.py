"""What calibration costs (prints it; not a pass/fail test): fitting a profile to 50 measured
points of three groups of ``shared/validation/measured_agg_serving_cases.csv``, and a simulate
and an optimize with the profile applied against the same calls without it (in-process, memory
cache, response cache off, best of ``--repeat``).

    python -m bench.bench_calibration [--repeat 3] [--cases FILE.csv]
"""

from __future__ import annotations

import argparse
import csv
import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.core.calibration import CalibrationProfile
from app.core.validation import CASE_COLUMNS
from app.models.optimize import OptimizeRequest
from app.models.simulate import SimulateRequest
from app.services.calibration import calibrate_text
from app.services.context import create_context
from app.services.optimize import optimize as optimize_service
from app.services.simulate import simulate as simulate_service
from app.settings import Settings

CASES = (
    Path(__file__).resolve().parents[1].parent
    / "shared"
    / "validation"
    / ("measured_agg_serving_cases.csv")
)
GROUPS = (
    ("H100 SXM 80GB", "trtllm", "Qwen/Qwen3-32B"),
    ("H200 SXM 141GB", "vllm", "openai/gpt-oss-120b"),
    ("B200 180GB", "sglang", "Qwen/Qwen3.5-397B-A17B", "fp8"),
)
POINTS = 50
CALL: dict[str, Any] = {
    "model": "openai/gpt-oss-120b",
    "device": "NVIDIA_H200_SXM_141G",
    "quantize_linear_action": "MXFP4",
    "input_length": 1024,
    "output_length": 1024,
    "engine": "vllm",
}


def _group_csv(rows: list[dict[str, str]], group: tuple[str, ...]) -> str:
    chosen = [
        r
        for r in rows
        if (r["hardware"], r["engine"].split()[0], r["model"]) == group[:3]
        and (len(group) < 4 or r["gemm_quant"] == group[3])
    ]
    chosen.sort(key=lambda r: int(r["concurrency"]))
    chosen = chosen[:: max(1, len(chosen) // POINTS)][:POINTS]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, CASE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(chosen)
    return buffer.getvalue()


def _best(repeat: int, call: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cases", type=Path, default=CASES)
    args = parser.parse_args(argv)
    with args.cases.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    profiles: dict[tuple[str, ...], CalibrationProfile] = {}
    for group in GROUPS:
        started = time.perf_counter()
        profiles[group] = calibrate_text(_group_csv(rows, group))
        seconds = time.perf_counter() - started
        fit = profiles[group].fit
        print(
            f"fit {' | '.join(group)}: {fit.points} points, {seconds:.2f} s, "
            f"{fit.evaluations} evaluations, converged={fit.converged}"
        )
    profile = profiles[GROUPS[1]].to_dict()
    simulate = {**CALL, "num_devices": 1, "concurrency": 64}
    optimize = {**CALL, "num_devices": 8, "ttft_limit_ms": 2000, "tpot_limit_ms": 50}
    for name, body, run in (
        ("simulate", simulate, lambda c, r: simulate_service(c, SimulateRequest(**r))),
        ("optimize", optimize, lambda c, r: optimize_service(c, OptimizeRequest(**r))),
    ):
        for label, extra in (("plain", {}), ("calibrated", {"calibration": profile})):
            request = {**body, **extra}

            def cold(request: dict[str, Any] = request, run: Any = run) -> None:
                context = create_context(
                    Settings(cache_backend="memory", response_cache=False, log_level="warning")
                )
                run(context, request)

            warm_context = create_context(
                Settings(cache_backend="memory", response_cache=False, log_level="warning")
            )
            run(warm_context, request)

            def warm_call(
                context: Any = warm_context, request: dict[str, Any] = request, run: Any = run
            ) -> None:
                run(context, request)

            warm = _best(args.repeat, warm_call)
            print(f"{name} {label}: cold {_best(args.repeat, cold):.3f} s, warm {warm:.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
