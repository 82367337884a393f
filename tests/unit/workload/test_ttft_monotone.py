"""Mean TTFT of a closed loop does not fall when clients are added (issue 34).

More clients of a work-conserving engine can only add to the work ahead of a request, so the
mean TTFT of a benchmark-style closed loop is non-decreasing in concurrency. In the RFC's lock
step it is not: every re-submission made the step right after the finish that prompted it, so
clients of fixed-length requests that started together stayed together, each wave prefilled in
one step as long as it fitted the token budget and split once it did not (75 / 140 / 89 ms at
1 / 2 / 3 clients; over the 1,080 configurations of this space, 432 dipped by more than 5 %,
the worst by 41.5 %, at 3, 5, 9 and 10 clients).

The vLLM and SGLang profiles set ``client_turnaround``: a re-submission reaches the engine a
few milliseconds after the finish, when the next step has already begun, and waits for it; an
idle engine starts on the first request alone (``docs/engine.md``, "Client turnaround"). The
waves no longer re-form: over their 480 configurations with 128- and 1,024-token outputs the
worst dip is 1.0 % with fixed lengths (main: 144 above 5 %, the worst 41.5 %) and 3.4 % with
the benchmark client's length range (``--random-range-ratio 0.8``, eight length classes; main:
4.0 %). What remains: 32-token outputs (:func:`test_short_outputs_still_dip`) and the
TensorRT-LLM profile, which keeps the lock step (:func:`test_tensorrt_llm_keeps_the_lock_step`).
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
#: The engines whose profiles set the client turnaround (a TensorRT-LLM build without a
#: recipe: its profile's defaults).
ENGINES = ("vllm 0.18.0", "sglang 0.5.9", "trtllm 1.2.0rc6")
TRTLLM = "trtllm 1.2.0rc6"
QUANTS = ("fp8", "unrecorded")
PROMPTS = (64, 256, 1024, 2048, 4096)
#: Outputs of the property. 32-token outputs are documented apart (their prefills are a large
#: part of each client's round, and which client waits behind whose prefill depends on how
#: many there are).
OUTPUTS = (128, 1024)
MAX_CLIENTS = 16
#: The benchmark client's range (InferenceX's ``--random-range-ratio``).
RATIO = 0.8
#: A dip from one client count to the next that is still "non-decreasing": the budget's edge
#: (a wave that no longer fits one step is split, then its parts drift apart) and the eight
#: length classes of a range leave up to 3.4 % over this space; the lock step dipped by up to
#: 41.5 %.
TOLERANCE = 0.05


def _ttft_by_clients(
    model: tuple[str, str],
    device: str,
    engine: str,
    quant: str,
    isl: int,
    osl: int,
    ratio: float,
    *,
    turnaround: bool | None = None,
) -> list[float]:
    """Mean TTFT at 1 to ``MAX_CLIENTS`` clients (``turnaround``: the engine option, None:
    the profile's)."""
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
    options = () if turnaround is None else (("client_turnaround", turnaround),)
    replay = ServingReplay()
    return [
        replay.predict(
            dataclasses.replace(
                row_case({**row, "concurrency": str(c)}),
                length_range_ratio=ratio,
                engine_options=options,
            )
        )[0]
        for c in range(1, MAX_CLIENTS + 1)
    ]


def _worst_dip(ttft: list[float]) -> tuple[float, int]:
    """The largest relative fall from one client count to the next, and where."""
    return min(
        (more / fewer - 1.0, c) for c, (fewer, more) in enumerate(itertools.pairwise(ttft), 2)
    )


configurations = st.tuples(
    st.sampled_from(MODELS),
    st.sampled_from(DEVICES),
    st.sampled_from(ENGINES),
    st.sampled_from(QUANTS),
    st.sampled_from(PROMPTS),
    st.sampled_from(OUTPUTS),
)


@settings(max_examples=40, deadline=None)
@given(configurations)
def test_mean_ttft_is_non_decreasing_in_concurrency(
    configuration: tuple[tuple[str, str], str, str, str, int, int],
) -> None:
    """Fixed lengths: the default workload."""
    ttft = _ttft_by_clients(*configuration, 1.0)
    dip, clients = _worst_dip(ttft)
    assert dip >= -TOLERANCE, (clients, ttft)


@settings(max_examples=25, deadline=None)
@given(configurations)
def test_mean_ttft_is_non_decreasing_with_a_length_range(
    configuration: tuple[tuple[str, str], str, str, str, int, int],
) -> None:
    ttft = _ttft_by_clients(*configuration, RATIO)
    dip, clients = _worst_dip(ttft)
    assert dip >= -TOLERANCE, (clients, ttft)


def test_the_lock_step_dips() -> None:
    """The property fails without the turnaround (the RFC's lock step, what every engine
    profile ran before): waves of clients prefilled together, split at the budget's edge."""
    args = (("Qwen/Qwen3-32B", "1"), "H100 SXM 80GB", "vllm 0.18.0", "unrecorded", 4096, 128)
    dip, clients = _worst_dip(_ttft_by_clients(*args, 1.0, turnaround=False))
    assert dip < -6 * TOLERANCE and clients == 3
    assert _worst_dip(_ttft_by_clients(*args, 1.0))[0] >= -TOLERANCE


def test_tensorrt_llm_lock_step_dips_without_the_turnaround() -> None:
    """TensorRT-LLM's loop reads new requests between steps like the others
    (``CLIENT_TURNAROUND`` in :mod:`app.core.profiles`): its profile takes the
    turnaround, and with the option turned off the lock step's dip comes back."""
    args = (("Qwen/Qwen3-32B", "1"), "H100 SXM 80GB", TRTLLM, "unrecorded", 4096, 1024)
    dip, clients = _worst_dip(_ttft_by_clients(*args, 1.0, turnaround=False))
    assert dip < -TOLERANCE and clients == 3
    assert _worst_dip(_ttft_by_clients(*args, 1.0))[0] >= -TOLERANCE


def test_short_outputs_still_dip() -> None:
    """What the turnaround leaves at 32-token outputs, pinned so that a change shows. Of the
    240 such configurations of this space 1 fixed-length one dips by more than 5 % (main: 72)
    and 112 ranged ones, by at most 8.9 % (main: none, at most 2.9 %).

    - Where the KV cache caps the running requests (Qwen3-32B BF16 on one H100 at 2,048 + 32
      tokens: 12), the 13th client queues inside the engine and is admitted in the step after a
      finish, without a client's turnaround: the queue breaks up the budget-sized groups of
      clients that below the cap keep waiting for one another's prefill steps.
    - With a length range on SGLang, whose eager prefill steps take about 110 ms (Llama-3.1-70B
      on four B200s, 64-token prompts) against decode steps of a few ms, two clients lock into
      a pattern where each re-submission lands behind the other client's prefill step; at an
      odd count one client is left over, and the mean TTFT zigzags (170 / 157 / 173 / 158 ms at
      2 / 3 / 4 / 5 clients; lock step: 110 ms at every count, no request ever waiting).
    """
    capped = (("Qwen/Qwen3-32B", "1"), "H100 SXM 80GB", "vllm 0.18.0", "unrecorded", 2048, 32)
    dip, clients = _worst_dip(_ttft_by_clients(*capped, 1.0))
    assert -0.20 < dip < -0.15 and clients == 13
    phase = (("meta-llama/Llama-3.1-70B-Instruct", "4"), "B200 180GB", "sglang 0.5.9", "fp8")
    dip, clients = _worst_dip(_ttft_by_clients(*phase, 64, 32, RATIO))
    assert -0.10 < dip < -TOLERANCE and clients % 2 == 1
