"""Building a disaggregated deployment for :func:`~app.core.workload.disagg_serving.
simulate_disagg_serving`: the pieces the replay of a measured file
(:mod:`app.core.validation.disagg_file`) and ``POST /v1/simulate`` with ``mode: disagg``
(:mod:`app.services.disagg_simulate`) share, so a replayed row and a simulated request of the
same deployment run the same simulation.

- :data:`FIRST_TOKEN_RULE`: when the client's first token arrives, per engine profile;
- :data:`KV_TRANSFER_FIXED_MS` and :func:`tier_kv_transfer`: one KV transfer over the
  interconnect tier between the pools (the bytes one device sends: its KV share times
  :func:`~app.core.runner.plan.kv_send_copies`);
- :class:`PoolWorker` and :func:`disagg_pools`: each pool's engine units, running caps and the
  refusal of a worker that cannot hold one prompt's (prefill) or one request's (decode) KV.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from app.core.chunking import require_int
from app.core.cost import LatencyModel
from app.core.errors import InfeasibleError
from app.core.limits import FirstToken
from app.core.workload.disagg_serving import DecodePool, KvTransfer, PrefillPool
from app.core.workload.metrics import MAX_REQUESTS

#: Bytes per GB of an interconnect tier's ``bandwidth_gb_s`` (decimal, as the catalog's).
BYTES_PER_GB = 1e9

#: Fixed cost of one KV transfer, besides its bytes: the decode worker allocating blocks and
#: the two sides exchanging block descriptors and a completion notice over the control plane
#: (ZMQ / TCP messages between hosts, ~0.1-0.5 ms each, in NIXL, Mooncake and TensorRT-LLM's
#: cache transceiver alike) and posting the RDMA work requests. One millisecond: a few
#: control-plane round trips. The decode side's wait for its next scheduler iteration is not
#: in it (the simulation admits an arrived request at a step boundary).
KV_TRANSFER_FIXED_MS = 1.0

#: When the client's first token arrives, per engine profile (:data:`~app.core.workload.
#: disagg_serving.FirstToken`). The client streams from the decode side in all three engines:
#: - TensorRT-LLM (``trtllm-serve disaggregated``; Dynamo's TRT-LLM workers alike): the context
#:   server runs the prompt (non-streaming) and hands the generation server the request with the
#:   context's first token and KV handle; the generation server returns that token before its
#:   first forward with the request: every executor loop of the PyTorch executor calls
#:   ``_handle_first_token_response`` right after ``_prepare_disagg_gen_transmission_complete``
#:   (which sets ``py_decoding_iter = 1`` and adds the context's token), before
#:   ``_forward_step`` (``_handle_responses`` skips a generation-only request's first
#:   overlapped iteration: "first token has already been emitted previously";
#:   ``tensorrt_llm/_torch/pyexecutor/py_executor.py``, read at the fork snapshot
#:   jthomson04/TensorRT-LLM@0304e1a416 and in later stored versions). So the token streams
#:   when the generation server schedules the request after its KV arrived, whatever the
#:   recipe's ``stream_interval`` ("admission"), and ``output - 1`` decode steps follow.
#: - SGLang (PD disaggregation): the prefill's token comes with the KV; the decode server's
#:   prebuilt batch streams it when it merges the request into its running batch, without a
#:   forward of its own ("admission").
#: - vLLM (``NixlConnector`` behind the P/D proxy): the prefiller runs with ``max_tokens=1``
#:   and the proxy drops its token; the decoder loads the remote KV and computes the first token
#:   in its own first step ("decode_step"). msmodeling (no disaggregated engine of its own)
#:   takes the same rule.
#: The "prefill" rule (a front end that streams the prefill worker's token at once) is no
#: engine's here.
FIRST_TOKEN_RULE: Mapping[str, FirstToken] = {
    "trtllm": "admission",
    "sglang": "admission",
    "vllm": "decode_step",
    "msmodeling": "decode_step",
}

#: What each first-token rule puts in TTFT (the response's ``first_token_rule``).
FIRST_TOKEN_TEXT: Mapping[FirstToken, str] = {
    "decode_step": "TTFT = prefill queue + prefill + KV transfer + decode admission wait + "
    "the first decode step (the decode worker emits the first token)",
    "admission": "TTFT = prefill queue + prefill + KV transfer + decode admission wait (the "
    "prefill's token comes with the KV and streams when the decode worker admits the request)",
    "prefill": "TTFT = prefill queue + prefill (the front end streams the prefill worker's "
    "token; the transfer and the decode wait count in TPOT)",
}


class Tier(Protocol):
    """The numbers of an interconnect tier a transfer needs (the catalog's
    ``InterconnectTier``): one device's link, per direction, and its efficiency."""

    @property
    def bandwidth_gb_s(self) -> float: ...

    @property
    def efficiency(self) -> float: ...


def tier_kv_transfer(tier: Tier, bytes_per_request: float) -> KvTransfer:
    """One prompt's KV (``bytes_per_request`` on one prefill device) over one device's link of
    ``tier``, efficiency included, plus :data:`KV_TRANSFER_FIXED_MS`."""
    return KvTransfer(
        bytes_per_request=bytes_per_request,
        bandwidth_bytes_per_s=tier.bandwidth_gb_s * BYTES_PER_GB * tier.efficiency,
        fixed_ms=KV_TRANSFER_FIXED_MS,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolWorker:
    """One pool as its engine runs it: ``workers`` workers of ``ranks`` attention
    data-parallel ranks (``coupled``: the ranks step together), ``latency`` one rank's model,
    ``kv_requests`` the requests whose KV (the prompt's for prefill, prompt + output for
    decode) fits one rank's pool; ``label`` names the worker in a refusal."""

    workers: int
    ranks: int
    coupled: bool
    latency: LatencyModel
    kv_requests: int
    label: str

    def __post_init__(self) -> None:
        require_int("workers", self.workers, 1, MAX_REQUESTS)
        require_int("ranks", self.ranks, 1, MAX_REQUESTS)
        require_int("kv_requests", self.kv_requests, 0, None)


def disagg_pools(
    prefill: PoolWorker,
    decode: PoolWorker,
    *,
    input_length: int,
    output_length: int,
    running_cap: int | None,
) -> tuple[PrefillPool, DecodePool]:
    """The simulation's pools: a prefill job holds at most the prompts whose KV fits the
    worker; a decode rank runs at most ``running_cap`` requests (the engine's
    ``max_num_seqs``; ``None``: only the KV pool) and what its KV pool holds.

    Raises :class:`InfeasibleError` when a worker cannot hold one prompt's (prefill) or one
    request's (decode) KV beside its weights.
    """
    if prefill.kv_requests < 1:
        raise InfeasibleError(
            f"prefill worker {prefill.label}: no room for one prompt's KV ({input_length} "
            "tokens) beside the weights"
        )
    if decode.kv_requests < 1:
        raise InfeasibleError(
            f"decode worker {decode.label}: no room for one request's KV "
            f"({input_length + output_length} tokens) beside the weights"
        )
    max_running = (
        decode.kv_requests if running_cap is None else min(running_cap, decode.kv_requests)
    )
    return (
        PrefillPool(
            workers=prefill.workers,
            latency=prefill.latency,
            ranks=prefill.ranks,
            coupled=prefill.coupled,
            max_requests_per_rank=min(prefill.kv_requests, MAX_REQUESTS),
        ),
        DecodePool(
            workers=decode.workers,
            latency=decode.latency,
            ranks=decode.ranks,
            coupled=decode.coupled,
            max_running=min(max_running, MAX_REQUESTS),
        ),
    )
