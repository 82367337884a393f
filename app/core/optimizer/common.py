"""Shared pieces of the optimizers: result rows, probes, layouts, the concurrency search."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from app.core import limits
from app.core.chunking import require_int
from app.core.cost import (
    AnyShape,
    BatchLatencyModel,
    ForwardShape,
    MemoisedLatencyModel,
    MemoryBreakdownModel,
    ServingModel,
    interrupt_of,
)
from app.core.engine import evaluate_shapes
from app.core.errors import InvalidParameterError
from app.core.parallel import ParallelLayout
from app.core.spec import WorkloadSpec

#: Default and hard cap of the per-replica batch size a search may probe.
DEFAULT_MAX_BATCH_SIZE = 4096

ServingFactory = Callable[[ParallelLayout], ServingModel]
ProbeFunction = Callable[[int], "Probe"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Deployment:
    """Labels echoed in every row."""

    model: str
    device: str
    quantization: str = "bf16"


@dataclass(frozen=True, slots=True, kw_only=True)
class Probe:
    """One evaluated (layout, batch size) point of a search."""

    layout: ParallelLayout
    batch_size: int
    concurrency: int
    feasible: bool
    reason: str | None
    ttft_ms: float | None
    tpot_ms: float | None
    throughput_tokens_s: float
    request_throughput: float
    memory_left_gb: float
    method: str

    @property
    def throughput_per_device(self) -> float:
        return self.throughput_tokens_s / self.layout.num_devices


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultRow:
    """A ranked configuration with every field the RFC lists."""

    device: str
    num_devices: int
    model: str
    quantization: str
    input_length: int
    output_length: int
    effective_input_length: int
    max_batched_tokens: int
    prefill_num_chunks: int
    concurrency: int
    batch_size: int
    ttft_ms: float | None
    tpot_ms: float | None
    throughput_tokens_s: float
    throughput_per_device: float
    request_throughput: float
    parallel: str
    tp: int
    dp: int
    ep: int
    pp: int
    memory_left_gb: float
    memory_gb: Mapping[str, float]
    method: str
    throughput_kind: str  # "output" (agg, decode) or "input" (prefill)


@dataclass(frozen=True, slots=True, kw_only=True)
class OptimizeResult:
    """Ranked best rows (one per feasible layout), every probe, and why layouts failed."""

    mode: str
    rows: tuple[ResultRow, ...]
    probes: tuple[Probe, ...]
    infeasible: Mapping[str, str]
    forward_evaluations: int

    @property
    def best(self) -> ResultRow | None:
        return self.rows[0] if self.rows else None


def enumerate_layouts(
    num_devices: int,
    tp_sizes: Sequence[int] | None = None,
    ep_sizes: Sequence[int] | None = None,
) -> tuple[ParallelLayout, ...]:
    """Layouts with ``tp * dp == num_devices``; default TP sizes are the powers of two dividing it.

    ``ep_sizes`` (MoE) default to ``(1,)``; an EP size must divide ``num_devices``.
    """
    require_int("num_devices", num_devices, 1, None)
    if tp_sizes is None:
        tp_sizes = [
            t for t in (1 << i for i in range(num_devices.bit_length())) if t <= num_devices
        ]
        tp_sizes = [t for t in tp_sizes if num_devices % t == 0]
    eps = (1,) if ep_sizes is None else tuple(ep_sizes)
    layouts: list[ParallelLayout] = []
    for tp in dict.fromkeys(tp_sizes):
        if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1 or num_devices % tp:
            raise InvalidParameterError(
                "tp_sizes", list(tp_sizes), f"integers >= 1 that divide num_devices={num_devices}"
            )
        for ep in dict.fromkeys(eps):
            if not isinstance(ep, int) or isinstance(ep, bool) or ep < 1 or num_devices % ep:
                raise InvalidParameterError(
                    "ep_sizes", list(eps), f"integers >= 1 that divide num_devices={num_devices}"
                )
            layouts.append(ParallelLayout(tp=tp, dp=num_devices // tp, ep=ep))
    if not layouts:
        raise InvalidParameterError("tp_sizes", list(tp_sizes), "a non-empty list")
    return tuple(layouts)


class MemoLatency:
    """The search's view of one layout's serving model, and its memo.

    What is memoised: the latency of every shape (forward or fused mixed step) and the memory
    left after every forward shape, keyed by the shape; for how long: one optimizer call on one
    layout (a new instance per layout). Over a :class:`MemoisedLatencyModel` (the service's
    cache-backed model, which already holds every record of its request) nothing is memoised
    twice: the calls go straight through, so there is one memo layer per request either way.
    """

    __slots__ = ("_through", "latency_ms", "memory_left", "model")

    def __init__(self, model: ServingModel) -> None:
        self.model = model
        self._through = isinstance(model, MemoisedLatencyModel)
        self.latency_ms: dict[AnyShape, float] = {}
        self.memory_left: dict[ForwardShape, float] = {}

    def forward_latencies_ms(self, shapes: Sequence[AnyShape]) -> Mapping[AnyShape, float]:
        """Latencies through the memo; a fused mixed shape the wrapped model cannot cost raises
        :class:`~app.core.errors.UnsupportedError` (from :func:`evaluate_shapes`)."""
        if self._through:
            assert isinstance(self.model, MemoisedLatencyModel)
            return self.model.forward_latencies_ms(shapes)
        missing = [s for s in dict.fromkeys(shapes) if s not in self.latency_ms]
        if missing:
            if isinstance(self.model, BatchLatencyModel):
                found = self.model.forward_latencies_ms(missing)
                self.latency_ms.update((s, float(found[s])) for s in missing)
            else:
                self.latency_ms.update(evaluate_shapes(missing, self.model))
        return {s: self.latency_ms[s] for s in shapes}

    def prefill_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        shape = ForwardShape(
            is_decode=False, concurrency=concurrency, query_len=query_len, seq_len=seq_len
        )
        return self.forward_latencies_ms([shape])[shape]

    def decode_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        shape = ForwardShape(
            is_decode=True, concurrency=concurrency, query_len=query_len, seq_len=seq_len
        )
        return self.forward_latencies_ms([shape])[shape]

    def _model_memory_left_gb(self, shape: ForwardShape) -> float:
        return float(
            self.model.memory_left_gb(
                shape.is_decode, shape.concurrency, shape.query_len, shape.seq_len
            )
        )

    def memory_left_gb(self, shape: ForwardShape) -> float:
        if self._through:
            return self._model_memory_left_gb(shape)
        value = self.memory_left.get(shape)
        if value is None:
            value = self.memory_left[shape] = self._model_memory_left_gb(shape)
        return value

    def check_deadline(self) -> None:
        """The wrapped model's deadline check (none: nothing to check)."""
        check = interrupt_of(self.model)
        if check is not None:
            check()

    def memory_breakdown_gb(self, shape: ForwardShape) -> Mapping[str, float]:
        if isinstance(self.model, MemoryBreakdownModel):
            return dict(
                self.model.memory_breakdown_gb(
                    shape.is_decode, shape.concurrency, shape.query_len, shape.seq_len
                )
            )
        return {}

    @property
    def evaluations(self) -> int:
        """Distinct shapes evaluated (the memoised model's own count when passing through)."""
        if self._through:
            assert isinstance(self.model, MemoisedLatencyModel)
            return self.model.shapes_seen
        return len(self.latency_ms)


def refused_probe(
    layout: ParallelLayout, batch_size: int, reason: str, left_gb: float = 0.0
) -> Probe:
    """An infeasible probe that was not simulated, with its reason."""
    return Probe(
        layout=layout,
        batch_size=batch_size,
        concurrency=batch_size * layout.dp,
        feasible=False,
        reason=reason,
        ttft_ms=None,
        tpot_ms=None,
        throughput_tokens_s=0.0,
        request_throughput=0.0,
        memory_left_gb=left_gb,
        method="none",
    )


def out_of_memory_probe(layout: ParallelLayout, batch_size: int, left_gb: float) -> Probe:
    """An infeasible probe: the forward does not fit in device memory (nothing simulated)."""
    return refused_probe(layout, batch_size, f"memory: {left_gb:.2f} GB left per device", left_gb)


#: How far a probe is past its limits: ``max(value / limit) - 1`` over the limits it has
#: (<= 0 within them), or None when it has no such figure (refused for memory or a cap).
ProbeMargin = Callable[["Probe"], float | None]


def limit_margin(data: WorkloadSpec) -> ProbeMargin:
    """The :data:`ProbeMargin` of ``data``'s TTFT and TPOT limits."""
    limits_ms = ((data.ttft_limit_ms, "ttft_ms"), (data.tpot_limit_ms, "tpot_ms"))

    def margin(probe: Probe) -> float | None:
        ratios = [
            value / limit - 1.0
            for limit, name in limits_ms
            if limit is not None and (value := getattr(probe, name)) is not None
        ]
        return max(ratios) if ratios else None

    return margin


#: Interpolated probes in a row that may leave more than half the bracket before a bisection
#: step (a curved margin moves an end a little at a time, regula falsi's known stall).
MAX_SLOW_INTERPOLATIONS = 2


def _interpolated(lo: Probe, hi: Probe, margin: ProbeMargin) -> int | None:
    """The last batch size before the limits are crossed, read off the straight line between a
    feasible and an infeasible probe's margins (None when either has none)."""
    g_lo, g_hi = margin(lo), margin(hi)
    if g_lo is None or g_hi is None or not g_lo <= 0.0 < g_hi:
        return None
    crossing = lo.batch_size + (hi.batch_size - lo.batch_size) * -g_lo / (g_hi - g_lo)
    return min(max(int(crossing), lo.batch_size + 1), hi.batch_size - 1)


def search_batch_sizes(
    evaluate: Callable[[int], Probe], max_batch_size: int, margin: ProbeMargin | None = None
) -> list[Probe]:
    """Probe 1, 2, 4, ... until infeasible (or the cap), then search the boundary.

    Every probe is memoised and returned in the order evaluated. Feasibility is assumed
    monotone in the batch size (more requests never make a probe feasible again). Without
    ``margin`` the boundary is bisected. With it, the next size is where the margin's straight
    line between the bracket's ends crosses zero (regula falsi, kept strictly inside the
    bracket: a near-linear TTFT or TPOT closes it in two probes, the guess and its neighbour);
    after :data:`MAX_SLOW_INTERPOLATIONS` probes in a row that do not halve the bracket comes a
    bisection step, so at most three probes halve it.
    """
    probes: dict[int, Probe] = {}

    def probe(batch_size: int) -> Probe:
        if batch_size not in probes:
            probes[batch_size] = evaluate(batch_size)
        return probes[batch_size]

    lo, hi = 0, None  # lo: largest feasible so far, hi: smallest infeasible so far
    batch_size = 1
    while batch_size <= max_batch_size:
        if probe(batch_size).feasible:
            lo = batch_size
            if batch_size == max_batch_size:
                break
            batch_size = min(batch_size * 2, max_batch_size)
        else:
            hi = batch_size
            break
    if not lo or hi is None:
        return list(probes.values())
    slow = 0  # interpolated probes in a row that did not halve the bracket
    while hi - lo > 1:
        width = hi - lo
        guess = None
        if margin is not None and slow < MAX_SLOW_INTERPOLATIONS:
            guess = _interpolated(probes[lo], probes[hi], margin)
        if guess is None:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if probe(mid).feasible else (lo, mid)
            slow = 0
            continue
        lo, hi = (guess, hi) if probe(guess).feasible else (lo, guess)
        slow = 0 if 2 * (hi - lo) <= width else slow + 1
    return list(probes.values())


def make_row(
    data: WorkloadSpec,
    deployment: Deployment,
    probe: Probe,
    memory_gb: Mapping[str, float],
    throughput_kind: str,
) -> ResultRow:
    layout = probe.layout
    return ResultRow(
        device=deployment.device,
        num_devices=layout.num_devices,
        model=deployment.model,
        quantization=deployment.quantization,
        input_length=data.input_length,
        output_length=data.output_length,
        effective_input_length=data.effective_input_length,
        max_batched_tokens=data.max_batched_tokens,
        prefill_num_chunks=data.prefill_num_chunks,
        concurrency=probe.concurrency,
        batch_size=probe.batch_size,
        ttft_ms=probe.ttft_ms,
        tpot_ms=probe.tpot_ms,
        throughput_tokens_s=probe.throughput_tokens_s,
        throughput_per_device=probe.throughput_per_device,
        request_throughput=probe.request_throughput,
        parallel=layout.label,
        tp=layout.tp,
        dp=layout.dp,
        ep=layout.ep,
        pp=layout.pp,
        memory_left_gb=probe.memory_left_gb,
        memory_gb=memory_gb,
        method=probe.method,
        throughput_kind=throughput_kind,
    )


def rank_rows(rows: Iterable[ResultRow]) -> tuple[ResultRow, ...]:
    """Highest throughput first; ties by lower TTFT, then lower TPOT, then fewer TP ranks."""
    return tuple(
        sorted(
            rows,
            key=lambda r: (
                -r.throughput_tokens_s,
                r.ttft_ms if r.ttft_ms is not None else 0.0,
                r.tpot_ms if r.tpot_ms is not None else 0.0,
                r.tp,
                r.ep,
            ),
        )
    )


def best_probe(probes: Iterable[Probe]) -> Probe | None:
    feasible = [p for p in probes if p.feasible]
    if not feasible:
        return None
    return max(feasible, key=lambda p: (p.throughput_tokens_s, -p.batch_size))


def run_layout_searches(
    mode: str,
    data: WorkloadSpec,
    deployment: Deployment,
    layouts: Sequence[ParallelLayout],
    serving_for: ServingFactory,
    evaluate_for: Callable[
        [ParallelLayout, MemoLatency], tuple[Callable[[int], Probe], ForwardShape]
    ],
    throughput_kind: str,
    max_batch_size: int,
) -> OptimizeResult:
    """Search every layout, keep each layout's best probe as a row, rank the rows.

    ``evaluate_for`` returns the probe function of a layout and the shape whose memory picture
    describes a row (called with the row's batch size substituted).
    """
    require_int("max_batch_size", max_batch_size, 1, limits.MAX_SEARCH_BATCH_SIZE)
    rows: list[ResultRow] = []
    all_probes: list[Probe] = []
    infeasible: dict[str, str] = {}
    evaluations = 0
    for layout in layouts:
        memo = MemoLatency(serving_for(layout))
        evaluate, memory_shape = evaluate_for(layout, memo)
        probes = search_batch_sizes(evaluate, max_batch_size, limit_margin(data))
        all_probes.extend(probes)
        evaluations += memo.evaluations
        best = best_probe(probes)
        if best is None:
            first = probes[0]
            infeasible[layout.label] = first.reason or "infeasible"
            continue
        shape = ForwardShape(
            is_decode=memory_shape.is_decode,
            concurrency=best.batch_size,
            query_len=memory_shape.query_len,
            seq_len=memory_shape.seq_len,
        )
        rows.append(
            make_row(data, deployment, best, memo.memory_breakdown_gb(shape), throughput_kind)
        )
    return OptimizeResult(
        mode=mode,
        rows=rank_rows(rows),
        probes=tuple(all_probes),
        infeasible=infeasible,
        forward_evaluations=evaluations,
    )
