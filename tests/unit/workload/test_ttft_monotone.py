"""Mean TTFT of a closed loop does not fall when clients are added (issue 34).

More clients of a work-conserving engine can only add to the work ahead of a request, so the
mean TTFT of a benchmark-style closed loop is non-decreasing in concurrency. With fixed lengths
it is not: the clients re-submit in lock step, so waves of 2 prefilled together and a wave of 3
split by the budget gave 75 / 140 / 89 ms at 1 / 2 / 3 clients, and a third of the dense
configurations below dip by 27-39 % somewhere between 1 and 16 clients. The benchmark client
draws its lengths from a range (``--random-range-ratio 0.8``): with the workload's
``length_range_ratio`` the outputs run as length classes, the clients drift apart, and the dips
stay within :data:`TOLERANCE` (at most 3.8 % over 400 of these configurations).
"""

from __future__ import annotations

import dataclasses
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.validation import ServingReplay
from app.core.validation.case_file import row_case

MODELS = (
    ("meta-llama/Llama-3.1-8B-Instruct", "1"),
    ("Qwen/Qwen3-32B", "1"),
    ("Qwen/Qwen3-32B", "2"),
    ("meta-llama/Llama-3.1-70B-Instruct", "4"),
)
DEVICES = ("H100 SXM 80GB", "H200 SXM 141GB", "B200 180GB")
ENGINES = ("vllm 0.18.0", "sglang 0.5.9", "trtllm 1.0.0rc3")
MAX_CLIENTS = 16
#: The benchmark client's range (InferenceX's ``--random-range-ratio``).
RATIO = 0.8
#: A dip from one client count to the next that is still "non-decreasing": what eight length
#: classes leave of the first wave's lock step (every client starts at t = 0).
TOLERANCE = 0.05


def _ttft_by_clients(
    model: tuple[str, str], device: str, engine: str, quant: str, isl: int, osl: int, ratio: float
) -> list[float]:
    name, tp = model
    row = {
        "case_id": "m",
        "model": name,
        "hardware": device,
        "engine": engine,
        "gemm_quant": quant,
        "moe_quant": "",
        "tp": tp,
        "pp": "1",
        "attn_dp": "1",
        "moe_tp": "1",
        "moe_ep": "0",
        "num_devices": tp,
        "isl": str(isl),
        "osl": str(osl),
        "concurrency": "1",
        "ttft_ms": "1",
        "tpot_ms": "1",
    }
    replay = ServingReplay()
    return [
        replay.predict(
            dataclasses.replace(row_case({**row, "concurrency": str(c)}), length_range_ratio=ratio)
        )[0]
        for c in range(1, MAX_CLIENTS + 1)
    ]


def _worst_dip(ttft: list[float]) -> tuple[float, int]:
    """The largest relative fall from one client count to the next, and where."""
    return min(
        (more / fewer - 1.0, c) for c, (fewer, more) in enumerate(itertools.pairwise(ttft), 2)
    )


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(MODELS),
    st.sampled_from(DEVICES),
    st.sampled_from(ENGINES),
    st.sampled_from(("fp8", "unrecorded")),
    st.sampled_from((64, 256, 1024, 2048, 4096)),
    st.sampled_from((32, 128, 1024)),
)
def test_mean_ttft_is_non_decreasing_in_concurrency(
    model: tuple[str, str], device: str, engine: str, quant: str, isl: int, osl: int
) -> None:
    ttft = _ttft_by_clients(model, device, engine, quant, isl, osl, RATIO)
    dip, clients = _worst_dip(ttft)
    assert dip >= -TOLERANCE, (clients, ttft)


def test_fixed_lengths_dip_in_lock_step() -> None:
    """The property fails without the range: fixed lengths on the same kind of configuration
    dip by far more than the tolerance (waves of clients prefilled together)."""
    args = (("Qwen/Qwen3-32B", "1"), "H100 SXM 80GB", "vllm 0.18.0", "unrecorded", 4096, 128)
    dip, clients = _worst_dip(_ttft_by_clients(*args, 1.0))
    assert dip < -6 * TOLERANCE and clients == 3
    assert _worst_dip(_ttft_by_clients(*args, RATIO))[0] >= -TOLERANCE
