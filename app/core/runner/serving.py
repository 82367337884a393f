"""Adapter from :class:`ModelRunner` to the engine's ``ServingModel`` protocol."""

from __future__ import annotations

import math
from collections.abc import Sequence

from app.core.catalog.hardware import BYTES_PER_GB
from app.core.cost import ForwardShape, MixedShape
from app.core.errors import InvalidParameterError
from app.core.runner.runner import MemoryBreakdown, ModelRunner


class RunnerServingModel:
    """``prefill_ms`` / ``decode_ms`` / ``mixed_ms`` / ``memory_left_gb`` over a
    :class:`ModelRunner`.

    MTP folding: a decode step verifies ``1 + num_mtp_tokens`` tokens per request (the query
    length is raised to that if the caller passed less) and costs the main forward plus the
    draft passes; it emits ``1 + sum(mtp_acceptance_rates[:num_mtp_tokens])`` tokens on average,
    so ``decode_ms`` returns the step time divided by that: the time per emitted token.
    ``mixed_ms`` folds the same way, the decode part only: the prefill forward plus the fused
    forward's extra time over it, divided by the tokens per decode step (so a fused step with
    no decodes is ``prefill_ms``, with no prefill ``decode_ms``, and it lies between
    ``max(prefill_ms, decode_ms)`` and ``prefill_ms + decode_ms`` whenever the unfolded forward
    does).
    """

    __slots__ = ("_tokens_per_step", "mtp_acceptance_rates", "num_mtp_tokens", "runner")

    def __init__(
        self,
        runner: ModelRunner,
        num_mtp_tokens: int = 0,
        mtp_acceptance_rates: Sequence[float] = (),
    ) -> None:
        if isinstance(num_mtp_tokens, bool) or not isinstance(num_mtp_tokens, int):
            raise InvalidParameterError("num_mtp_tokens", num_mtp_tokens, "an integer >= 0")
        if num_mtp_tokens < 0:
            raise InvalidParameterError("num_mtp_tokens", num_mtp_tokens, "an integer >= 0")
        rates = tuple(float(r) for r in mtp_acceptance_rates)
        if len(rates) < num_mtp_tokens:
            raise InvalidParameterError(
                "mtp_acceptance_rates", rates, f"at least num_mtp_tokens={num_mtp_tokens} values"
            )
        if any(not 0.0 <= r <= 1.0 for r in rates):
            raise InvalidParameterError("mtp_acceptance_rates", rates, "values in [0, 1]")
        self.runner = runner
        self.num_mtp_tokens = num_mtp_tokens
        self.mtp_acceptance_rates = rates
        self._tokens_per_step = 1.0 + math.fsum(rates[:num_mtp_tokens])

    @property
    def tokens_per_decode_step(self) -> float:
        return self._tokens_per_step

    def identity(self) -> str:
        rates = ",".join(f"{r:.6g}" for r in self.mtp_acceptance_rates[: self.num_mtp_tokens])
        return f"{self.runner.identity()}|mtp={self.num_mtp_tokens}:{rates}"

    @staticmethod
    def _prefill_shape(concurrency: int, query_len: int, seq_len: int) -> ForwardShape:
        return ForwardShape(
            is_decode=False, concurrency=concurrency, query_len=query_len, seq_len=seq_len
        )

    def prefill_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        shape = self._prefill_shape(concurrency, query_len, seq_len)
        return self.runner.run_inference(shape).latency_ms

    def _decode_shape(self, concurrency: int, query_len: int, seq_len: int) -> ForwardShape:
        """The verify step: at least ``1 + num_mtp_tokens`` tokens per request."""
        query = max(query_len, 1 + self.num_mtp_tokens)
        return ForwardShape(
            is_decode=True, concurrency=concurrency, query_len=query, seq_len=max(seq_len, query)
        )

    def decode_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        shape = self._decode_shape(concurrency, query_len, seq_len)
        step = self.runner.run_inference(shape, mtp_draft_tokens=self.num_mtp_tokens)
        return step.latency_ms / self._tokens_per_step

    def _mixed_shape(self, shape: MixedShape) -> MixedShape:
        p, d = shape.prefill, shape.decode
        return MixedShape(
            prefill=self._prefill_shape(p.concurrency, p.query_len, p.seq_len),
            decode=self._decode_shape(d.concurrency, d.query_len, d.seq_len),
        )

    def mixed_ms(self, shape: MixedShape) -> float:
        """A fused mixed step: one forward over the prefill chunk and the decodes."""
        mixed = self._mixed_shape(shape)
        fused_ms = self.runner.run_mixed(mixed, mtp_draft_tokens=self.num_mtp_tokens).latency_ms
        if self._tokens_per_step == 1.0:
            return fused_ms
        prefill_ms = self.runner.run_inference(mixed.prefill).latency_ms
        return prefill_ms + (fused_ms - prefill_ms) / self._tokens_per_step

    def mixed_memory(self, shape: MixedShape) -> MemoryBreakdown:
        """Device memory while the fused mixed step runs (both parts' KV and activations)."""
        return self.runner.memory(self._mixed_shape(shape))

    def memory_left_gb(
        self, is_decode: bool, concurrency: int, query_len: int, seq_len: int
    ) -> float:
        if is_decode:
            shape = self._decode_shape(concurrency, query_len, seq_len)
        else:
            shape = self._prefill_shape(concurrency, query_len, seq_len)
        return self.runner.memory(shape).available_gb

    def kv_capacity_requests(
        self, context_len: int, max_batched_tokens: int, *, kv_memory_fraction: float = 1.0
    ) -> int:
        """Requests whose KV cache of ``context_len`` tokens (in blocks) fits on the device,
        each with its linear-attention state (SSM + conv, one per running request, see
        :meth:`ModelRunner.state_bytes_per_request`) when the model has such layers.

        What is left after the weights, the reserve and the activations of the largest
        forward (a prefill of ``max_batched_tokens`` tokens) holds the KV cache, or the
        fraction ``kv_memory_fraction`` of it that an engine gives its KV pool; 0 when even
        one request does not fit.
        """
        runner = self.runner
        peak = ForwardShape(
            is_decode=False,
            concurrency=1,
            query_len=max_batched_tokens,
            seq_len=max(max_batched_tokens, context_len),
        )
        memory = runner.memory(peak)
        free_gb = (memory.available_gb + memory.kv_cache_gb) * kv_memory_fraction
        per_request_gb = runner.kv_cache_bytes(1, context_len) / BYTES_PER_GB
        if free_gb <= 0 or per_request_gb <= 0:
            return 0
        return math.floor(free_gb / per_request_gb)
