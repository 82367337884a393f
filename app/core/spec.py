"""The workload spec: lengths, budget, prefix-cache hit rate, MTP and limits, validated once.

Built at the boundary (the service layer) from a request and passed whole to the optimizers and
simulations; its chunk plan is derived once, on construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from app.core import limits
from app.core.chunking import (
    PrefillChunk,
    decode_query_len,
    decode_seq_len,
    effective_input_length,
    prefill_chunk_plan,
    require_hit_rate,
    require_int,
    require_limit,
    require_number,
)
from app.core.cost import ForwardShape
from app.core.errors import InvalidParameterError

#: When a streaming request's first token reaches the client under a stream interval ``N``
#: (docs/engine_defaults.md): ``immediate`` with the first token, then every ``N`` tokens
#: (SGLang's ``len(output_ids) % N == 1`` rule, in 0.4.10 to 0.5.10.post1; vLLM's stream
#: interval, vllm-project/vllm#27869; TensorRT-LLM since NVIDIA/TensorRT-LLM#5836);
#: ``interval`` with the ``N``-th token (SGLang 0.4.6's ``% N == 0`` rule: the first chunk
#: waits for ``N`` tokens).
StreamFirstToken = Literal["immediate", "interval"]
STREAM_FIRST_TOKEN_RULES: tuple[StreamFirstToken, ...] = ("immediate", "interval")


def require_length_range_ratio(value: object) -> None:
    """A length range ratio: a number in ``(0, 1]`` (:data:`~app.core.limits.
    DEFAULT_LENGTH_RANGE_RATIO`)."""
    low, high = limits.MIN_LENGTH_RANGE_RATIO_EXCLUSIVE, limits.MAX_LENGTH_RANGE_RATIO
    if isinstance(value, bool) or not (isinstance(value, int | float) and low < value <= high):
        raise InvalidParameterError("length_range_ratio", value, f"a number in ({low:g}, {high:g}]")


def length_classes(
    length: int, ratio: float, classes: int = limits.LENGTH_CLASSES
) -> tuple[int, ...]:
    """A length drawn uniformly from the integers ``[max(1, int(length * ratio)), length]``
    (vLLM ``benchmark_serving.py``'s random dataset: ``np.random.randint(int(L * r), L + 1)``)
    as ``classes`` equal-probability classes, each at its midpoint quantile, ascending;
    ``(length,)`` for a ratio of 1 (fixed lengths)."""
    if ratio >= limits.MAX_LENGTH_RANGE_RATIO:
        return (length,)
    low = max(1, int(length * ratio))
    span = length - low + 1
    return tuple(low + (2 * k + 1) * span // (2 * classes) for k in range(classes))


def _mean(lengths: tuple[int, ...]) -> int:
    """The nearest whole mean of ``lengths``."""
    return (2 * sum(lengths) + len(lengths)) // (2 * len(lengths))


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadSpec:
    """Everything a simulation or search needs about the workload, validated on construction."""

    input_length: int
    output_length: int
    max_batched_tokens: int
    prefix_cache_hit_rate: float = 0.0
    ttft_limit_ms: float | None = None
    tpot_limit_ms: float | None = None
    num_mtp_tokens: int = 0
    mtp_acceptance_rates: tuple[float, ...] = ()
    num_devices: int = 1
    #: Time every request spends outside the engine before its first token (an engine
    #: profile's front-end time: HTTP, tokenization, detokenizing the first token); added to
    #: every TTFT a simulation or search reports.
    ttft_overhead_ms: float = 0.0
    #: A closed loop's arrival spread (an engine profile's ``arrival_spread``): the share of
    #: the requests finishing together whose successors reach the engine one step later.
    arrival_spread: float = 0.0
    #: A closed loop's re-submission lag (an engine profile's ``resubmit_steps``): every
    #: successor reaches the scheduler that many steps after its predecessor finished
    #: (:class:`~app.core.engine.arrivals.ClosedLoop`); 0: at once.
    resubmit_steps: int = 0
    #: A closed loop's client turnaround (an engine profile's ``client_turnaround``): a
    #: re-submission waits for the step that started when it was sent, and an idle engine
    #: starts on the first one alone (:class:`~app.core.engine.arrivals.ClosedLoop`).
    client_turnaround: bool = False
    #: The engine's scheduler receive interval (a profile's ``scheduler_recv_interval``): new
    #: requests are seen once per that many decode steps (:class:`~app.core.engine.loop.Engine`).
    recv_interval: int = 1
    #: TensorRT-LLM's batch wait (a profile's ``batch_wait_iters`` and
    #: ``batch_wait_max_tokens_ratio``): new requests wait while decodes run, up to that many
    #: iterations or until their prompts and the decodes reach the ratio of the token budget
    #: (:class:`~app.core.engine.loop.Engine`); both 0 (or either): no wait.
    batch_wait_iters: int = 0
    batch_wait_max_tokens_ratio: float = 0.0
    #: A streaming client's view (a profile's ``stream_interval`` and ``stream_first_token``):
    #: tokens reach it every ``stream_interval`` tokens, the first one with the first token
    #: (``immediate``) or with the ``stream_interval``-th (``interval``): :meth:`client_view`.
    stream_interval: int = 1
    stream_first_token: StreamFirstToken = "immediate"
    #: The workload's length range (vLLM ``--random-range-ratio``): prompts and outputs drawn
    #: uniformly in ``[ratio, 1]`` x the nominal lengths (1: fixed lengths). Outputs run as
    #: :data:`~app.core.limits.LENGTH_CLASSES` classes through the engine loop
    #: (:attr:`output_classes`), so closed-loop clients finish at different steps and drift
    #: apart; every prompt is prefilled at the range's mean (:attr:`mean_input_length`: one
    #: step's prefill forward has one shape).
    length_range_ratio: float = limits.DEFAULT_LENGTH_RANGE_RATIO
    _plan: tuple[PrefillChunk, ...] = field(init=False, repr=False, compare=False)
    _decode_query_len: int = field(init=False, repr=False, compare=False)
    _decode_seq_len: int = field(init=False, repr=False, compare=False)
    _output_classes: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _mean_input_length: int = field(init=False, repr=False, compare=False)
    _mean_output_length: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        require_int("input_length", self.input_length, 1)
        require_int("output_length", self.output_length, 1)
        require_int("max_batched_tokens", self.max_batched_tokens, 1)
        require_hit_rate(self.prefix_cache_hit_rate)
        require_limit("ttft_limit_ms", self.ttft_limit_ms)
        require_limit("tpot_limit_ms", self.tpot_limit_ms)
        require_int("num_mtp_tokens", self.num_mtp_tokens, 0, limits.MAX_MTP_TOKENS)
        require_int("num_devices", self.num_devices, 1, 1_000_000)
        require_number("ttft_overhead_ms", self.ttft_overhead_ms, 0.0, limits.MAX_TTFT_OVERHEAD_MS)
        require_number("arrival_spread", self.arrival_spread, 0.0, limits.MAX_ARRIVAL_SPREAD)
        require_int("resubmit_steps", self.resubmit_steps, 0, limits.MAX_RESUBMIT_STEPS)
        if not isinstance(self.client_turnaround, bool):
            raise InvalidParameterError("client_turnaround", self.client_turnaround, "a boolean")
        require_int("recv_interval", self.recv_interval, 1, limits.MAX_RECV_INTERVAL)
        require_int("batch_wait_iters", self.batch_wait_iters, 0, limits.MAX_RECV_INTERVAL)
        require_number("batch_wait_max_tokens_ratio", self.batch_wait_max_tokens_ratio, 0.0, 1.0)
        if self.recv_interval > 1 and self.batch_wait_iters and self.batch_wait_max_tokens_ratio:
            raise InvalidParameterError(
                "batch_wait_iters",
                self.batch_wait_iters,
                "0 with a receive interval above 1 (SGLang's polling and TensorRT-LLM's batch "
                "wait are different engines' rules)",
            )
        require_int("stream_interval", self.stream_interval, 1, limits.MAX_STREAM_INTERVAL)
        require_length_range_ratio(self.length_range_ratio)
        if self.stream_first_token not in STREAM_FIRST_TOKEN_RULES:
            raise InvalidParameterError(
                "stream_first_token", self.stream_first_token, f"one of {STREAM_FIRST_TOKEN_RULES}"
            )
        rates = self.mtp_acceptance_rates
        if not isinstance(rates, tuple) or not all(
            isinstance(r, int | float) and not isinstance(r, bool) and 0.0 <= r <= 1.0
            for r in rates
        ):
            raise InvalidParameterError(
                "mtp_acceptance_rates", rates, "a tuple of numbers in [0, 1]"
            )
        if self.num_mtp_tokens and len(rates) < self.num_mtp_tokens:
            raise InvalidParameterError(
                "mtp_acceptance_rates",
                rates,
                f"at least num_mtp_tokens={self.num_mtp_tokens} rates",
            )
        ratio = self.length_range_ratio
        outputs = length_classes(self.output_length, ratio)
        mean_input = _mean(length_classes(self.input_length, ratio))
        mean_output = _mean(outputs)
        plan = prefill_chunk_plan(
            effective_input_length(mean_input, self.prefix_cache_hit_rate),
            self.max_batched_tokens,
        )
        object.__setattr__(self, "_plan", plan)
        object.__setattr__(self, "_output_classes", outputs)
        object.__setattr__(self, "_mean_input_length", mean_input)
        object.__setattr__(self, "_mean_output_length", mean_output)
        object.__setattr__(self, "_decode_query_len", decode_query_len(self.num_mtp_tokens))
        object.__setattr__(
            self,
            "_decode_seq_len",
            decode_seq_len(mean_input, mean_output, self.num_mtp_tokens),
        )

    @property
    def output_classes(self) -> tuple[int, ...]:
        """Output lengths of the length classes (:func:`length_classes`; one: fixed),
        ascending: the order requests take them in turn."""
        return self._output_classes

    @property
    def mean_input_length(self) -> int:
        """The prompt every request prefills: the nominal one, or a range's mean."""
        return self._mean_input_length

    @property
    def mean_output_length(self) -> int:
        """The mean output: the nominal one, or a range's mean over its classes."""
        return self._mean_output_length

    def reported_ttft_ms(self, simulated_ms: float) -> float:
        """The TTFT a client sees: the simulated one plus the per-request overhead."""
        return simulated_ms + self.ttft_overhead_ms

    def first_chunk_tokens(self) -> int:
        """The token with which a streaming client sees its first output: the first, or under
        the ``interval`` rule the ``stream_interval``-th (the whole answer when shorter)."""
        if self.stream_first_token == "immediate":
            return 1
        return min(self.stream_interval, self.mean_output_length)

    def client_view(self, ttft_ms: float, tpot_ms: float) -> tuple[float, float]:
        """The TTFT and TPOT a streaming benchmark client computes (``tpot = (e2e - ttft) /
        (output - 1)``) from the engine's first-token time and mean time per output token,
        when its first chunk carries ``k`` = :meth:`first_chunk_tokens` tokens: the first
        chunk arrives ``k - 1`` decode steps after the first token, and those steps leave the
        client's TPOT."""
        k = self.first_chunk_tokens()
        if k == 1:
            return ttft_ms, tpot_ms
        decode_tokens = self.mean_output_length - 1
        return ttft_ms + (k - 1) * tpot_ms, tpot_ms * (decode_tokens - (k - 1)) / decode_tokens

    def get_prefill_chunk_plan(self) -> tuple[PrefillChunk, ...]:
        return self._plan

    @property
    def effective_input_length(self) -> int:
        """Tokens prefill computes (the uncached part); decode keeps ``input_length`` as
        context."""
        return self._plan[-1].seq_len

    @property
    def prefill_num_chunks(self) -> int:
        return len(self._plan)

    @property
    def decode_query_len(self) -> int:
        """Tokens per request in a decode forward (:func:`decode_query_len`)."""
        return self._decode_query_len

    @property
    def decode_seq_len(self) -> int:
        """Context of a representative decode forward (:func:`decode_seq_len`)."""
        return self._decode_seq_len

    def decode_shape(self, concurrency: int) -> ForwardShape:
        """The representative decode forward of ``concurrency`` requests (the one builder of it:
        the engine's plans, the closed-form waves, the optimizers and the Poisson clock)."""
        return ForwardShape(
            is_decode=True,
            concurrency=concurrency,
            query_len=self.decode_query_len,
            seq_len=self.decode_seq_len,
        )
