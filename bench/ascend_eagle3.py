"""Replay the Atlas 800I A2 serving points of ``published_points.csv`` (issue 12, mechanism 8):
Qwen3-32B under SGLang's Ascend backend with EAGLE-3 speculative decoding, as the source page
ran them, through ``services.simulate`` (the product's own answer to that request).

    python -m bench.ascend_eagle3 [--device ATLAS_800_A2_280T_64G]

Each configuration's launch and benchmark settings are facts from the source
(``sgl-project/sglang docs/platforms/ascend_npu_best_practice.md``, the "Qwen3 32B A2"
sections): ``--tp-size``, ``--mem-fraction-static``, ``--max-running-requests``,
``--max-prefill-tokens`` with ``--chunked-prefill-size -1`` (no chunking: the prefill budget is
the step's), ``--speculative-num-steps`` (draft tokens per step, top-k 1), the benchmark's
``--max-concurrency`` and ``--num-prompts`` (requests per client = prompts / concurrency), and
the accept length it printed (mean tokens a step emits: 1 + the drafts accepted). The
acceptance is spread evenly over the draft positions: only its sum moves the mean (the
verification cost depends on the draft count). The device is an Atlas 800I A2 card, Ascend
910B4 (280 TFLOPS FP16, 64 GB): ``ATLAS_800_A2_280T_64G``. Target: TPOT within 15 %.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from app.models.simulate import SimulateRequest, SimulateResponse
from app.services.context import create_context
from app.services.simulate import simulate
from app.settings import Settings

TPOT_TARGET_PCT = 15.0
#: The source's cards: Atlas 800I A2, Ascend 910B4 (280 TFLOPS FP16, 64 GB).
DEVICE = "ATLAS_800_A2_280T_64G"


@dataclass(frozen=True, slots=True)
class Point:
    """One published configuration and what its benchmark printed."""

    name: str  # the source's configuration label (the notes of published_points.csv)
    quantization: str  # W8A8 (modelslim) or BF16
    tp: int
    isl: int
    osl: int
    concurrency: int
    num_prompts: int
    mem_fraction_static: float
    max_running_requests: int
    max_prefill_tokens: int
    speculative_num_steps: int
    accept_length: float
    ttft_ms: float
    tpot_ms: float
    output_tokens_s: float


POINTS: tuple[Point, ...] = (
    Point("Q32A2-LL18", "W8A8_DYNAMIC", 8, 6000, 1500, 32, 32, 0.72, 32, 135168, 4, 2.11,
          11544.97, 16.46, 1184.62),
    Point("Q32A2-LL11", "DISABLED", 8, 4096, 1500, 1, 4, 0.72, 32, 65536, 4, 2.04,
          312.47, 10.18, 96.26),
    Point("Q32A2-HT50-1", "W8A8_DYNAMIC", 4, 3500, 1500, 78, 312, 0.72, 78, 65536, 3, 2.05,
          5786.98, 48.97, 1395.33),
    Point("Q32A2-HT50-2", "W8A8_DYNAMIC", 4, 2000, 2000, 120, 120, 0.70, 120, 49152, 3, 1.69,
          17096.53, 45.88, 2048.10),
)  # fmt: skip


def request(point: Point, device: str) -> SimulateRequest:
    drafts = point.speculative_num_steps
    return SimulateRequest.model_validate(
        {
            "model": "Qwen/Qwen3-32B",
            "device": device,
            "engine": "sglang",
            "engine_options": {
                "memory_fraction": point.mem_fraction_static,
                "max_num_seqs": point.max_running_requests,
            },
            "quantize_linear_action": point.quantization,
            "tp_size": point.tp,
            "num_devices": point.tp,
            "input_length": point.isl,
            "output_length": point.osl,
            "max_batched_tokens": point.max_prefill_tokens,
            "concurrency": point.concurrency,
            "requests_per_client": max(1, point.num_prompts // point.concurrency),
            "num_mtp_tokens": drafts,
            "mtp_acceptance_rates": [(point.accept_length - 1.0) / drafts] * drafts,
        }
    )


def error_pct(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured * 100.0


def replay(device: str) -> list[dict[str, Any]]:
    context = create_context(Settings(cache_backend="memory", log_level="warning"))
    rows = []
    for point in POINTS:
        result = simulate(context, request(point, device))
        assert isinstance(result, SimulateResponse)
        rows.append(
            {
                "name": point.name,
                "ttft_ms": (point.ttft_ms, result.ttft_ms),
                "tpot_ms": (point.tpot_ms, result.tpot_ms),
                "output_tokens_s": (point.output_tokens_s, result.output_throughput),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=DEVICE)
    args = parser.parse_args(argv)
    within = 0
    rows = replay(args.device)
    for row in rows:
        cells = []
        for metric in ("ttft_ms", "tpot_ms", "output_tokens_s"):
            measured, predicted = row[metric]
            cells.append(
                f"{metric} {measured:,.2f} -> {predicted:,.2f} "
                f"({error_pct(predicted, measured):+.1f}%)"
            )
        measured, predicted = row["tpot_ms"]
        within += abs(error_pct(predicted, measured)) <= TPOT_TARGET_PCT
        print(f"{row['name']:<13} " + "  ".join(cells))
    print(f"TPOT within {TPOT_TARGET_PCT:g} %: {within} of {len(rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
