"""Service functions: request model -> domain call (through the latency cache) -> response model.

The API and the CLI are thin adapters over these functions. Every function here is synchronous
and CPU-bound; the API runs them in a worker thread (``anyio.to_thread.run_sync``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pydantic import ValidationError

from app.cache import (
    JSONObject,
    JSONValue,
    LatencyCache,
    create_cache,
    identity_digest,
    response_key,
    shape_key,
)
from app.core.catalog import (
    SUPPORTED_MODEL_TYPES,
    Device,
    ModelArchitecture,
    Quantization,
    attention_actions,
    device_from_dict,
    get_device,
    get_model,
    linear_actions,
    model_from_config,
    model_names,
    parse_quantization,
    resolve_model_name,
)
from app.core.catalog import list_devices as catalog_devices
from app.core.catalog import list_models as catalog_models
from app.core.chunking import effective_input_length, prefill_chunk_plan
from app.core.cost import AnyShape, ForwardShape, MixedShape
from app.core.engine import (
    SimulationResult,
    StepRecord,
    combine_replicas,
    plan_serving,
    replay,
)
from app.core.errors import (
    ChunkwiseError,
    DeadlineExceededError,
    InfeasibleError,
    InvalidParameterError,
    SearchLimitError,
    UnknownModelError,
    UnsupportedError,
)
from app.core.optimizer import (
    Deployment,
    OptimizeResult,
    Probe,
    ResultRow,
    enumerate_layouts,
    optimize_agg,
    optimize_disagg_decode,
    optimize_disagg_prefill,
    optimize_pd_ratio,
)
from app.core.optimizer.agg import (
    SEARCHED_WORKLOADS,
    largest_prefill_shape,
    limit_reason,
)
from app.core.parallel import ParallelLayout, split_over_replicas
from app.core.runner import (
    DEFAULT_RESERVED_MEMORY_GB,
    RUNNER_MODEL_VERSION,
    ModelRunner,
    RequestInfo,
    RunnerServingModel,
    forward_request,
    forward_to_dict,
    parallel_layout,
)
from app.core.scheduler import (
    SMALL_DEVICE_BATCHED_TOKENS,
    Scheduler,
    default_max_batched_tokens,
)
from app.core.scheduler import make_scheduler as core_make_scheduler
from app.core.spec import WorkloadSpec
from app.core.workload import (
    DEFAULT_POISSON_REQUESTS,
    ServingResult,
    poisson_shares,
    simulate_poisson_serving,
    simulate_serving,
)
from app.models import limits
from app.models.catalog import DeviceInfo, DeviceList, ModelInfo, ModelList
from app.models.common import CacheCounters
from app.models.forward import ForwardRequest, ForwardResponse
from app.models.optimize import (
    InfeasibleLayout,
    InstanceSplitOut,
    OptimizeRequest,
    OptimizeResponse,
    PdRatioOut,
    ProbeOut,
    ResultRowOut,
    Role,
    RunStats,
)
from app.models.plan import Chunk, ChunkPlanRequest, ChunkPlanResponse
from app.models.simulate import (
    ForwardShapeOut,
    ReplicaShare,
    SimulateRequest,
    SimulateResponse,
    StepOut,
)
from app.models.workload import (
    CustomDevice,
    DeploymentMixin,
    InlineModel,
    SchedulerOptions,
    WorkloadMixin,
)
from app.settings import Settings

logger = logging.getLogger("chunkwise.services")


class ServiceStats:
    """Thread-safe counters exported by ``/metrics``."""

    __slots__ = ("_lock", "forward_evaluations", "response_cache_hits")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.forward_evaluations = 0
        self.response_cache_hits = 0

    def add(self, *, forward_evaluations: int = 0, response_cache_hits: int = 0) -> None:
        with self._lock:
            self.forward_evaluations += forward_evaluations
            self.response_cache_hits += response_cache_hits


class RunnerMemo:
    """Process-wide LRU of built runners: building one costs ~0.3 ms (sharding + identity)."""

    def __init__(self, max_entries: int = 256) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, RunnerServingModel] = OrderedDict()
        self._max_entries = max_entries

    def get_or_build(
        self, key: Hashable, build: Callable[[], RunnerServingModel]
    ) -> RunnerServingModel:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found
        built = build()  # outside the lock; a rare duplicate build is harmless
        with self._lock:
            self._entries[key] = built
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)
        return built


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceContext:
    """What every service function needs; built once per process by the app lifespan or CLI."""

    settings: Settings
    cache: LatencyCache
    stats: ServiceStats = field(default_factory=ServiceStats)
    runners: RunnerMemo = field(default_factory=RunnerMemo)

    def close(self) -> None:
        self.cache.close()


def create_context(settings: Settings) -> ServiceContext:
    return ServiceContext(settings=settings, cache=create_cache(settings))


# --------------------------------------------------------------------------------------------
# The caching latency model


#: Order of the memory figures in a compact cache record (the runner's MemoryBreakdown fields).
MEMORY_KEYS = (
    "capacity_gb",
    "weights_gb",
    "kv_cache_gb",
    "activation_gb",
    "reserved_gb",
    "available_gb",
)


@dataclass(frozen=True, slots=True)
class ForwardRecord:
    """What the engine needs from one forward: latency, memory left and the memory picture.

    Cached as a flat JSON array ``[latency_ms, memory_left_gb, *memory figures]`` (compact and
    fast to decode; thousands are read per request).
    """

    latency_ms: float
    memory_left_gb: float
    memory_gb: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> list[float]:
        memory = [float(self.memory_gb.get(key, 0.0)) for key in MEMORY_KEYS]
        return [self.latency_ms, self.memory_left_gb, *memory]

    @classmethod
    def from_json(cls, value: JSONValue) -> ForwardRecord | None:
        if not isinstance(value, list) or len(value) != 2 + len(MEMORY_KEYS):
            return None
        try:
            numbers = [float(v) for v in value]
        except (TypeError, ValueError):
            return None
        return cls(numbers[0], numbers[1], dict(zip(MEMORY_KEYS, numbers[2:], strict=True)))


class ShapeEvaluator(Protocol):
    """Computes forwards for one deployment (model, device, layout, quantization, ...)."""

    def identity(self) -> str:
        """Stable description of everything but the shape (goes into the cache key)."""
        ...

    def evaluate(self, shape: AnyShape) -> ForwardRecord: ...

    def kv_capacity_requests(self, context_len: int, max_batched_tokens: int) -> int:
        """Requests whose KV cache of ``context_len`` tokens fits on one replica."""
        ...


@dataclass(slots=True)
class CacheUsage:
    """Cache activity of one request."""

    hits: int = 0
    misses: int = 0
    computed: int = 0
    round_trips: int = 0


class CachedServingModel:
    """A ``ServingModel`` (and the engine's batch latency interface) over the latency cache.

    Each batch of shapes costs one ``MGET`` for the shapes this object has not seen yet; misses
    are computed by the evaluator; new records are written back by :meth:`flush` in one
    pipeline. One instance serves one request (it memoises locally and is not shared).
    """

    def __init__(
        self,
        evaluator: ShapeEvaluator,
        cache: LatencyCache,
        *,
        usage: CacheUsage | None = None,
        stats: ServiceStats | None = None,
        deadline: float | None = None,
        on_deadline: Callable[[], None] | None = None,
        preloaded: Mapping[str, JSONValue] | None = None,
    ) -> None:
        self._evaluator = evaluator
        self._on_deadline = on_deadline
        self._preloaded = preloaded if preloaded is not None else {}
        self.keys_seen: list[str] = []
        self._cache = cache
        self._digest = identity_digest(evaluator.identity())
        self._local: dict[AnyShape, ForwardRecord] = {}
        self._pending: dict[str, JSONValue] = {}
        self._stats = stats
        self._deadline = deadline
        self.usage = usage if usage is not None else CacheUsage()

    # -- batching ------------------------------------------------------------------------
    def prefetch(self, shapes: Iterable[AnyShape]) -> None:
        """Make every shape available locally: one MGET, then compute the misses."""
        wanted = [s for s in dict.fromkeys(shapes) if s not in self._local]
        if not wanted:
            return
        self._check_deadline()
        keys = [shape_key(self._digest, s) for s in wanted]
        self.keys_seen.extend(keys)
        preloaded = self._preloaded
        values: list[JSONValue | None] = [preloaded.get(key) for key in keys]
        missing = [i for i, value in enumerate(values) if value is None]
        if missing:  # one MGET for what the request's manifest did not bring
            fetched = self._cache.get_many([keys[i] for i in missing])
            self.usage.round_trips += 1
            for i, value in zip(missing, fetched, strict=True):
                values[i] = value
        computed = 0
        for shape, key, value in zip(wanted, keys, values, strict=True):
            record = ForwardRecord.from_json(value) if value is not None else None
            if record is not None:
                self.usage.hits += 1
            else:
                self.usage.misses += 1
                record = self._evaluator.evaluate(shape)
                computed += 1
                self._pending[key] = record.to_json()
                if computed % 64 == 0:
                    self._check_deadline()
            self._local[shape] = record
        self.usage.computed += computed
        if self._stats is not None and computed:
            self._stats.add(forward_evaluations=computed)

    def take_pending(self) -> dict[str, JSONValue]:
        """The records computed since the last call (for a caller that batches writes)."""
        pending, self._pending = self._pending, {}
        return pending

    def flush(self) -> None:
        """Write the newly computed records back (one pipelined write with TTL)."""
        pending = self.take_pending()
        if pending:
            self._cache.set_many(pending)

    def records(self, shapes: Sequence[AnyShape]) -> list[ForwardRecord]:
        self.prefetch(shapes)
        return [self._local[s] for s in shapes]

    def _record(self, shape: AnyShape) -> ForwardRecord:
        record = self._local.get(shape)
        if record is None:
            self.prefetch((shape,))
            record = self._local[shape]
        return record

    def _check_deadline(self) -> None:
        if self._deadline is not None and time.monotonic() > self._deadline:
            if self._on_deadline is not None:
                self._on_deadline()  # keep what was computed: a narrower retry reuses it
            raise DeadlineExceededError(
                "the computation ran past its deadline; narrow the search (fewer layouts, "
                "shorter lengths or a larger max_batched_tokens)"
            )

    # -- engine interfaces ---------------------------------------------------------------
    def forward_latencies_ms(self, shapes: Sequence[AnyShape]) -> Mapping[AnyShape, float]:
        self.prefetch(shapes)
        return {s: self._local[s].latency_ms for s in shapes}

    def mixed_ms(self, shape: MixedShape) -> float:
        return self._record(shape).latency_ms

    def prefill_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        shape = ForwardShape(
            is_decode=False, concurrency=concurrency, query_len=query_len, seq_len=seq_len
        )
        return self._record(shape).latency_ms

    def decode_ms(self, concurrency: int, query_len: int, seq_len: int) -> float:
        shape = ForwardShape(
            is_decode=True, concurrency=concurrency, query_len=query_len, seq_len=seq_len
        )
        return self._record(shape).latency_ms

    def memory_left_gb(
        self, is_decode: bool, concurrency: int, query_len: int, seq_len: int
    ) -> float:
        shape = ForwardShape(
            is_decode=is_decode, concurrency=concurrency, query_len=query_len, seq_len=seq_len
        )
        return self._record(shape).memory_left_gb

    def memory_breakdown_gb(
        self, is_decode: bool, concurrency: int, query_len: int, seq_len: int
    ) -> Mapping[str, float]:
        shape = ForwardShape(
            is_decode=is_decode, concurrency=concurrency, query_len=query_len, seq_len=seq_len
        )
        return self._record(shape).memory_gb

    def kv_capacity_requests(self, context_len: int, max_batched_tokens: int) -> int:
        """KV admission (closed-loop workloads): asked of the evaluator, not cached."""
        return self._evaluator.kv_capacity_requests(context_len, max_batched_tokens)

    @property
    def shapes_seen(self) -> int:
        return len(self._local)


# --------------------------------------------------------------------------------------------
# POST /v1/chunk-plan


def chunk_plan(request: ChunkPlanRequest) -> ChunkPlanResponse:
    effective = effective_input_length(request.input_length, request.prefix_cache_hit_rate)
    num_chunks = math.ceil(effective / request.max_batched_tokens)
    if num_chunks > limits.MAX_PLAN_CHUNKS:
        raise InvalidParameterError(
            "max_batched_tokens",
            request.max_batched_tokens,
            f">= {math.ceil(effective / limits.MAX_PLAN_CHUNKS)} for effective_input_length "
            f"{effective} (at most {limits.MAX_PLAN_CHUNKS} chunks)",
        )
    plan = prefill_chunk_plan(effective, request.max_batched_tokens)
    return ChunkPlanResponse(
        input_length=request.input_length,
        prefix_cache_hit_rate=request.prefix_cache_hit_rate,
        max_batched_tokens=request.max_batched_tokens,
        cached_prefix_tokens=request.input_length - effective,
        effective_input_length=effective,
        prefill_num_chunks=len(plan),
        chunks=[
            Chunk(
                index=c.index,
                query_len=c.query_len,
                seq_len=c.seq_len,
                is_last_chunk=c.is_last_chunk,
            )
            for c in plan
        ],
    )


# --------------------------------------------------------------------------------------------
# Resolving the deployment (model, device, quantization)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedDeployment:
    """The catalog objects a request names, and the knobs that change a forward's cost."""

    model: ModelArchitecture
    device: Device
    quantization: Quantization
    reserved_memory_gb: float | None
    num_mtp_tokens: int
    mtp_acceptance_rates: tuple[float, ...]

    @property
    def label(self) -> Deployment:
        return Deployment(
            model=self.model.name, device=self.device.name, quantization=self.quantization.label
        )

    def runner(self, layout: ParallelLayout) -> ModelRunner:
        reserved = self.reserved_memory_gb
        return ModelRunner(
            self.model,
            self.device,
            layout,
            self.quantization,
            reserved_memory_gb=DEFAULT_RESERVED_MEMORY_GB if reserved is None else reserved,
            num_mtp_tokens=self.num_mtp_tokens,
        )


def build_serving_model(
    deployment: ResolvedDeployment, layout: ParallelLayout
) -> RunnerServingModel:
    """The runner's serving adapter (MTP folded into decode latency) for one layout."""
    return RunnerServingModel(
        deployment.runner(layout),
        num_mtp_tokens=deployment.num_mtp_tokens,
        mtp_acceptance_rates=deployment.mtp_acceptance_rates,
    )


def evaluate_forward(serving: RunnerServingModel, shape: AnyShape) -> ForwardRecord:
    """Latency (MTP-folded for decode), memory left and the memory picture of one shape."""
    if isinstance(shape, MixedShape):
        mixed = serving.mixed_memory(shape)
        return ForwardRecord(
            latency_ms=serving.mixed_ms(shape),
            memory_left_gb=mixed.available_gb,
            memory_gb=mixed.to_dict(),
        )
    c, q, s = shape.concurrency, shape.query_len, shape.seq_len
    latency_ms = serving.decode_ms(c, q, s) if shape.is_decode else serving.prefill_ms(c, q, s)
    memory = serving.runner.memory(
        RequestInfo(is_decode=shape.is_decode, concurrency=c, query_len=q, seq_len=max(s, q))
    )
    return ForwardRecord(
        latency_ms=latency_ms,
        memory_left_gb=serving.memory_left_gb(shape.is_decode, c, q, s),
        memory_gb=memory.to_dict(),
    )


#: What a hostile inline config.json or custom device can make the catalog raise besides its
#: domain errors (a string where a number belongs, a list where a mapping belongs, ...).
_MALFORMED = (ValueError, TypeError, AttributeError, LookupError, ArithmeticError)
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "num_nextn_predict_layers")


def _check_inline_numbers(field: str, value: object, path: str = "") -> None:
    """Every number of an inline object finite and at most ``MAX_INLINE_NUMBER`` (422 otherwise)."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            _check_inline_numbers(field, item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_inline_numbers(field, item, f"{path}[{index}]")
    elif (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and not (math.isfinite(value) and abs(value) <= limits.MAX_INLINE_NUMBER)
    ):
        raise InvalidParameterError(
            f"{field}.{path}", value, f"a finite number of at most {limits.MAX_INLINE_NUMBER}"
        )


def _inline_model(ref: InlineModel) -> ModelArchitecture:
    """``model_from_config`` on a client's config.json: bounded, and any failure is a 422."""
    _check_inline_numbers("model.config", ref.config)
    for key in _LAYER_KEYS:
        layers = ref.config.get(key)
        if isinstance(layers, int | float) and layers > limits.MAX_INLINE_LAYERS:
            raise InvalidParameterError(
                f"model.config.{key}", layers, f"at most {limits.MAX_INLINE_LAYERS}"
            )
    try:
        return model_from_config(ref.config, name=ref.name or "inline")
    except ChunkwiseError:
        raise
    except _MALFORMED as exc:
        raise InvalidParameterError(
            "model.config", "<inline config.json>", f"a well-formed config.json ({exc})"
        ) from exc


def resolve_model(ref: str | InlineModel, *, allow_paths: bool = False) -> ModelArchitecture:
    """A catalog name / HF id, or an inline config. Local paths only when ``allow_paths``."""
    if isinstance(ref, InlineModel):
        return _inline_model(ref)
    hf_id = resolve_model_name(ref)
    if hf_id is not None:
        return get_model(hf_id)
    if allow_paths:
        return get_model(ref)  # a directory or config.json path (CLI only)
    raise UnknownModelError(ref, model_names())


def resolve_device(ref: str | CustomDevice) -> Device:
    if isinstance(ref, CustomDevice):
        fields = ref.model_dump(exclude_none=True)
        _check_inline_numbers("device", fields)
        try:
            return device_from_dict(fields)
        except ChunkwiseError:
            raise
        except _MALFORMED as exc:
            raise InvalidParameterError(
                "device", ref.name, f"a well-formed custom device ({exc})"
            ) from exc
    return get_device(ref)


def resolve_deployment(
    request: DeploymentMixin, *, allow_paths: bool = False
) -> ResolvedDeployment:
    num_mtp_tokens = int(getattr(request, "num_mtp_tokens", 0))
    rates = tuple(float(r) for r in getattr(request, "mtp_acceptance_rates", ()))
    return ResolvedDeployment(
        model=resolve_model(request.model, allow_paths=allow_paths),
        device=resolve_device(request.device),
        quantization=parse_quantization(
            request.quantize_linear_action, request.quantize_attention_action
        ),
        reserved_memory_gb=request.reserved_memory_gb,
        num_mtp_tokens=num_mtp_tokens,
        mtp_acceptance_rates=rates,
    )


def engine_budget(request: WorkloadMixin) -> int:
    """``max_batched_tokens``, or the engine default for the request's device when omitted
    (an unknown device falls back to the small-device default; resolving it fails later with
    the valid names)."""
    if request.max_batched_tokens is not None:
        return request.max_batched_tokens
    device = getattr(request, "device", None)
    try:
        resolved = resolve_device(device) if device is not None else None
    except ChunkwiseError:
        resolved = None
    if resolved is None:
        return SMALL_DEVICE_BATCHED_TOKENS
    return default_max_batched_tokens(resolved.hbm_capacity_gb, resolved.name)


RequestT = TypeVar("RequestT", bound=WorkloadMixin)


def with_engine_budget(request: RequestT) -> RequestT:
    """The request with ``max_batched_tokens`` filled in, so the echo shows what was used."""
    if request.max_batched_tokens is not None:
        return request
    return request.model_copy(update={"max_batched_tokens": engine_budget(request)})


def optimizer_data(request: WorkloadMixin, num_devices: int) -> WorkloadSpec:
    return WorkloadSpec(
        input_length=request.input_length,
        output_length=request.output_length,
        max_batched_tokens=engine_budget(request),
        prefix_cache_hit_rate=request.prefix_cache_hit_rate,
        ttft_limit_ms=getattr(request, "ttft_limit_ms", None),
        tpot_limit_ms=getattr(request, "tpot_limit_ms", None),
        num_mtp_tokens=request.num_mtp_tokens,
        mtp_acceptance_rates=tuple(request.mtp_acceptance_rates),
        num_devices=num_devices,
    )


def check_simulation_size(
    data: WorkloadSpec, requests: int, field: str, *, replicas: int = 1
) -> None:
    """Refuse simulations whose cost would pin a worker (bounds documented in README).

    ``requests`` is the busiest replica's share; with ``replicas > 1`` the advice names the
    total over the replicas (what ``field`` holds in ``/v1/simulate``).
    """
    chunks = data.prefill_num_chunks
    if chunks > limits.MAX_PREFILL_CHUNKS:
        raise SearchLimitError(
            f"the prompt needs {chunks} prefill chunks (effective_input_length "
            f"{data.effective_input_length} / max_batched_tokens {data.max_batched_tokens}); at "
            f"most {limits.MAX_PREFILL_CHUNKS}: raise max_batched_tokens"
        )
    if chunks * requests > limits.MAX_CHUNK_REQUESTS:
        raise SearchLimitError(
            f"prefill_num_chunks x {_per_replica(field, replicas)} = {chunks} x {requests} "
            f"exceeds {limits.MAX_CHUNK_REQUESTS}: lower {field} to <= "
            f"{limits.MAX_CHUNK_REQUESTS // chunks * replicas} or raise max_batched_tokens"
        )


def check_closed_loop_size(
    data: WorkloadSpec, clients: int, requests_per_client: int, field: str, *, replicas: int = 1
) -> None:
    """The closed loop's planning cost: requests sent per replica x prefill chunks."""
    chunks = data.prefill_num_chunks
    sent = clients * requests_per_client
    if sent * chunks > limits.MAX_CLOSED_LOOP_REQUEST_CHUNKS:
        most = max(1, limits.MAX_CLOSED_LOOP_REQUEST_CHUNKS // (requests_per_client * chunks))
        raise SearchLimitError(
            f"a closed loop of {clients} clients{_per_replica('', replicas)} x "
            f"{requests_per_client} requests x {chunks} prefill chunks exceeds "
            f"{limits.MAX_CLOSED_LOOP_REQUEST_CHUNKS}: lower {field} to <= {most * replicas}, "
            "requests_per_client, or raise max_batched_tokens"
        )


def check_poisson_size(data: WorkloadSpec, requests: int, *, replicas: int = 1) -> None:
    """A poisson run's planning cost: requests per replica x prefill chunks (arrivals cut the
    engine's runs, so it follows requests and chunks)."""
    check_simulation_size(data, 1, "num_requests")  # the chunk bound
    chunks = data.prefill_num_chunks
    if requests * chunks > limits.MAX_POISSON_REQUEST_CHUNKS:
        most = max(1, limits.MAX_POISSON_REQUEST_CHUNKS // chunks)
        raise SearchLimitError(
            f"a poisson run of {requests} requests{_per_replica('', replicas)} x {chunks} "
            f"prefill chunks exceeds {limits.MAX_POISSON_REQUEST_CHUNKS}: lower num_requests to "
            f"<= {most * replicas} or raise max_batched_tokens"
        )


def _per_replica(text: str, replicas: int) -> str:
    return f"{text} per replica" if replicas > 1 else text


def search_cap(request: OptimizeRequest, data: WorkloadSpec) -> int:
    """The optimizer's batch-size cap: the default shrinks to the bound, an explicit one not."""
    closed = request.workload == "closed_loop"
    if "max_batch_size" in request.model_fields_set:
        check_simulation_size(data, request.max_batch_size, "max_batch_size")
        if closed:
            check_closed_loop_size(
                data, request.max_batch_size, request.requests_per_client, "max_batch_size"
            )
        return request.max_batch_size
    check_simulation_size(data, 1, "max_batch_size")
    cap = min(request.max_batch_size, limits.MAX_CHUNK_REQUESTS // data.prefill_num_chunks)
    if closed:
        check_closed_loop_size(data, 1, request.requests_per_client, "max_batch_size")
        per_client = request.requests_per_client * data.prefill_num_chunks
        cap = min(cap, limits.MAX_CLOSED_LOOP_REQUEST_CHUNKS // per_client)
    return cap


def make_scheduler(options: SchedulerOptions) -> Scheduler:
    return core_make_scheduler(
        options.name,
        max_num_seqs=options.max_num_seqs,
        mixed_latency=options.mixed_latency,
        slack_ratio=options.slack_ratio,
        prefill_order=options.prefill_order,
    )


class _RunnerEvaluator:
    """The runner's serving adapter for one layout, seen as a :class:`ShapeEvaluator`."""

    def __init__(self, serving: RunnerServingModel) -> None:
        self._identity = serving.identity()  # model, device, layout, quantization, MTP
        self._serving = serving

    def identity(self) -> str:
        return self._identity

    def evaluate(self, shape: AnyShape) -> ForwardRecord:
        return evaluate_forward(self._serving, shape)

    def kv_capacity_requests(self, context_len: int, max_batched_tokens: int) -> int:
        return self._serving.kv_capacity_requests(context_len, max_batched_tokens)


def deadline_from(settings: Settings) -> float:
    return time.monotonic() + settings.request_deadline_s


class ModelFactory:
    """Builds one caching serving model per layout for one request, and totals its usage."""

    def __init__(self, context: ServiceContext, deployment: ResolvedDeployment) -> None:
        self.context = context
        self.deployment = deployment
        self.usage = CacheUsage()
        self.deadline = deadline_from(context.settings)
        self.models: list[CachedServingModel] = []
        self.on_layout: Callable[[ParallelLayout], None] | None = None
        self._built: dict[ParallelLayout, RunnerServingModel] = {}
        self.preloaded: dict[str, JSONValue] = {}
        self._manifest_keys: frozenset[str] = frozenset()

    def preload(self, manifest: JSONValue | None) -> None:
        """Fetch every key a previous identical search used, in one MGET.

        ``manifest`` is ``{"keys": [...]}`` as written by :meth:`manifest`; the search then
        finds its forwards locally instead of asking the cache once per probe batch.
        """
        if not isinstance(manifest, dict) or not isinstance(manifest.get("keys"), list):
            return
        keys = [k for k in manifest["keys"] if isinstance(k, str)][: limits.MAX_MANIFEST_KEYS]
        if not keys:
            return
        self._manifest_keys = frozenset(keys)
        values = self.context.cache.get_many(keys)
        self.usage.round_trips += 1
        self.preloaded.update((k, v) for k, v in zip(keys, values, strict=True) if v is not None)

    def manifest(self) -> JSONObject | None:
        """The keys this search used, when they differ from the manifest it was given."""
        keys = frozenset(k for model in self.models for k in model.keys_seen)
        if not keys or keys == self._manifest_keys or len(keys) > limits.MAX_MANIFEST_KEYS:
            return None
        return {"keys": sorted(keys)}

    def serving(self, layout: ParallelLayout) -> RunnerServingModel:
        """The runner's (uncached) serving model of a layout, built once per request."""
        built = self._built.get(layout)
        if built is None:
            deployment = self.deployment
            built = self._built[layout] = self.context.runners.get_or_build(
                (deployment, layout), lambda: build_serving_model(deployment, layout)
            )
        return built

    def __call__(self, layout: ParallelLayout) -> CachedServingModel:
        if self.on_layout is not None:
            self.on_layout(layout)
        model = CachedServingModel(
            _RunnerEvaluator(self.serving(layout)),
            self.context.cache,
            usage=self.usage,
            stats=self.context.stats,
            deadline=self.deadline,
            on_deadline=self.flush,
            preloaded=self.preloaded,
        )
        self.models.append(model)
        return model

    def flush(self, extra: Mapping[str, JSONValue] | None = None) -> None:
        """One pipelined write of everything computed by this request (plus ``extra``)."""
        pending: dict[str, JSONValue] = dict(extra or {})
        for model in self.models:
            pending.update(model.take_pending())
        if pending:
            self.context.cache.set_many(pending)

    @property
    def shapes(self) -> int:
        return sum(model.shapes_seen for model in self.models)

    def counters(self, *, response_cache_hit: bool = False) -> CacheCounters:
        return CacheCounters(
            backend=self.context.cache.backend,
            hits=self.usage.hits,
            misses=self.usage.misses,
            round_trips=self.usage.round_trips,
            response_cache_hit=response_cache_hit,
        )

    def usable_layouts(
        self, layouts: Sequence[ParallelLayout]
    ) -> tuple[list[ParallelLayout], dict[str, str]]:
        """Layouts the runner can build; the others with the reason (e.g. TP vs heads)."""
        usable: list[ParallelLayout] = []
        rejected: dict[str, str] = {}
        for layout in layouts:
            try:
                self.serving(layout)
            except (InvalidParameterError, UnsupportedError) as exc:
                rejected[layout.label] = str(exc)
            else:
                usable.append(layout)
        return usable, rejected


# --------------------------------------------------------------------------------------------
# POST /v1/simulate


def _at_least_one_per_replica(field: str, total: int, dp: int) -> None:
    """Fewer than one request or client per replica is refused: an idle replica is not a
    deployment anyone asks about, and the totals would describe fewer replicas than named."""
    if total < dp:
        raise InvalidParameterError(
            field,
            total,
            f">= dp_size={dp}: {field} is the total over the {dp} data-parallel replicas and "
            "each needs at least one",
        )


def replica_split(concurrency: int, dp: int) -> list[tuple[int, int]]:
    """``concurrency`` (the total over ``dp`` replicas) as ``[(per replica, replicas), ...]``;
    uneven totals give two shares, the larger first (10 over 4: 3, 3, 2, 2)."""
    _at_least_one_per_replica("concurrency", concurrency, dp)
    split = split_over_replicas(concurrency, dp)
    if split[0][0] > limits.MAX_SIM_CONCURRENCY:
        raise InvalidParameterError(
            "concurrency",
            concurrency,
            f"<= {limits.MAX_SIM_CONCURRENCY * dp} ({limits.MAX_SIM_CONCURRENCY} per replica "
            f"over dp_size={dp})",
        )
    return split


def poisson_split(request: SimulateRequest, dp: int) -> list[tuple[int, int | None, int]]:
    """``[(requests, max_concurrency, replicas), ...]`` of a poisson request, busiest first.

    ``num_requests`` defaults to 1000 (at least one per replica)."""
    num_requests = request.num_requests
    if num_requests is None:
        num_requests = max(DEFAULT_POISSON_REQUESTS, dp)
    _at_least_one_per_replica("num_requests", num_requests, dp)
    if request.max_concurrency is not None:
        _at_least_one_per_replica("max_concurrency", request.max_concurrency, dp)
    return poisson_shares(num_requests, dp, request.max_concurrency)


#: Fields that belong to one workload only: giving them with another one is a 422.
_POISSON_ONLY = ("request_rate", "max_concurrency", "num_requests", "seed")


def with_device_count(request: SimulateRequest) -> SimulateRequest:
    """``num_devices`` given: it must be ``tp_size x dp_size``; without ``dp_size`` it sets the
    replicas to ``num_devices / tp_size``. The request comes back with ``num_devices`` set."""
    tp, dp, devices = request.tp_size, request.dp_size, request.num_devices
    if devices is None:
        return request.model_copy(update={"num_devices": tp * dp})
    if "dp_size" in request.model_fields_set:
        if tp * dp != devices:
            raise InvalidParameterError(
                "num_devices", devices, f"tp_size x dp_size = {tp} x {dp} = {tp * dp}"
            )
        return request
    if devices % tp:
        raise InvalidParameterError(
            "num_devices", devices, f"a multiple of tp_size={tp} (dp_size = num_devices / tp_size)"
        )
    if devices // tp > limits.MAX_PARALLEL_SIZE:
        raise InvalidParameterError(
            "num_devices", devices, f"at most {limits.MAX_PARALLEL_SIZE} x tp_size={tp}"
        )
    return request.model_copy(update={"dp_size": devices // tp})


def check_workload_fields(request: SimulateRequest) -> None:
    """Each workload takes its own fields (a request rate means nothing to a burst)."""
    given = request.model_fields_set
    workload = request.workload
    if workload != "poisson":
        if request.concurrency is None:
            raise InvalidParameterError(
                "concurrency",
                None,
                f"given for workload {workload!r} (requests or clients in total over the replicas)",
            )
        for field in _POISSON_ONLY:
            if field in given and getattr(request, field) is not None:
                raise InvalidParameterError(
                    field,
                    getattr(request, field),
                    f"omitted for workload {workload!r} (a poisson option)",
                )
        return
    if request.request_rate is None:
        raise InvalidParameterError(
            "request_rate", None, "given for workload 'poisson' (requests per second, > 0)"
        )
    if request.concurrency is not None:
        raise InvalidParameterError(
            "concurrency",
            request.concurrency,
            "omitted for workload 'poisson' (max_concurrency caps requests in flight)",
        )
    if "requests_per_client" in given:
        raise InvalidParameterError(
            "requests_per_client",
            request.requests_per_client,
            "omitted for workload 'poisson' (num_requests counts its requests)",
        )
    if request.window != "benchmark":
        raise InvalidParameterError(
            "window", request.window, "'benchmark' for workload 'poisson' (every request counts)"
        )


def simulate(
    context: ServiceContext, request: SimulateRequest, *, allow_paths: bool = False
) -> SimulateResponse:
    """One configuration: ``concurrency`` requests (or clients) in total over the replicas.

    One MGET for every shape the plan needs, the misses computed, one pipelined write.
    """
    started = time.perf_counter()
    request = with_engine_budget(with_device_count(request))
    check_workload_fields(request)
    deployment = resolve_deployment(request, allow_paths=allow_paths)
    layout = ParallelLayout(tp=request.tp_size, dp=request.dp_size, ep=request.ep_size)
    data = optimizer_data(request, layout.num_devices)
    scheduler = make_scheduler(request.scheduler)
    if request.workload == "poisson":
        shares = poisson_split(request, layout.dp)
        check_poisson_size(data, shares[0][0], replicas=layout.dp)
        _check_timeline_size(request, data, shares[0][0], "num_requests", layout.dp)
        factory = ModelFactory(context, deployment)
        run = _SimulationRun(request, data, layout, scheduler, factory, started)
        return _simulate_poisson(run, factory(layout), shares)
    assert request.concurrency is not None  # check_workload_fields
    split = replica_split(request.concurrency, layout.dp)
    busiest = split[0][0]
    check_simulation_size(data, busiest, "concurrency", replicas=layout.dp)
    _check_timeline_size(request, data, busiest, "concurrency", layout.dp)
    factory = ModelFactory(context, deployment)
    model = factory(layout)
    run = _SimulationRun(request, data, layout, scheduler, factory, started)
    if request.workload == "closed_loop":
        check_closed_loop_size(
            data, busiest, request.requests_per_client, "concurrency", replicas=layout.dp
        )
        return _simulate_closed_loop(run, model, split)
    plans = [
        (
            plan_serving(data, size, scheduler, force_simulation=request.force_simulation),
            replicas,
        )
        for size, replicas in split
    ]
    memory_shapes = (data.decode_shape(busiest), largest_prefill_shape(data, busiest))
    shapes = [shape for plan, _ in plans for shape in plan.shapes]
    model.prefetch((*shapes, *memory_shapes))  # the request's only cache read
    result = combine_replicas(
        [
            (
                replay(
                    plan,
                    model.forward_latencies_ms(plan.shapes),
                    scheduler,
                    record_steps=request.include_timeline and index == 0,
                ),
                replicas,
            )
            for index, (plan, replicas) in enumerate(plans)
        ]
    )
    memory = model.records(memory_shapes)
    left_gb = min(r.memory_left_gb for r in memory)
    reason = (
        f"memory: {left_gb:.2f} GB left per device"
        if left_gb < 0
        else limit_reason(data, result.ttft_ms, result.tpot_ms)
    )
    return run.response(
        result,
        memory=memory,
        reason=reason,
        split=[ReplicaShare(replicas=n, concurrency=size, num_requests=size) for size, n in split],
        batch_size=busiest,
        concurrency=result.concurrency,
    )


@dataclass(frozen=True, slots=True)
class _SimulationRun:
    """What every ``/v1/simulate`` response echoes, whatever the workload."""

    request: SimulateRequest
    data: WorkloadSpec
    layout: ParallelLayout
    scheduler: Scheduler
    factory: ModelFactory
    started: float

    def response(
        self,
        result: SimulationResult | ServingResult | None,
        *,
        memory: Sequence[ForwardRecord],
        reason: str | None,
        split: list[ReplicaShare],
        **extra: Any,
    ) -> SimulateResponse:
        """The response (zeros when nothing could run: ``result is None``); the cache writes
        of the request happen here (one pipeline)."""
        self.factory.flush()
        data, layout = self.data, self.layout
        metrics: dict[str, Any] = {"method": "none", "makespan_ms": 0.0}
        if isinstance(result, SimulationResult):
            metrics = {"method": result.method, "makespan_ms": result.makespan_ms}
        elif result is not None:
            metrics = {
                "method": result.method,
                "makespan_ms": result.duration_ms,
                "num_requests": result.num_requests,
                "measured_requests": result.measured_requests,
                "e2e_ms": result.e2e_ms,
                "total_throughput": result.total_throughput,
                "mean_running_batch": result.mean_running_batch,
                "mean_prefill_tokens_per_step": result.mean_prefill_tokens_per_step,
                "mean_decode_tokens_per_step": result.mean_decode_tokens_per_step,
                "max_running": result.max_running,
            }
        output = result.throughput_tokens_s if result else 0.0
        timeline, truncated = _timeline_out(result.timeline if result else None)
        return SimulateResponse(
            input=self.request,
            max_batched_tokens=data.max_batched_tokens,
            scheduler=self.scheduler.describe(),
            parallel=layout.label,
            num_devices=layout.num_devices,
            replica_split=split,
            effective_input_length=data.effective_input_length,
            prefill_num_chunks=data.prefill_num_chunks,
            ttft_ms=result.ttft_ms if result else 0.0,
            tpot_ms=result.tpot_ms if result else 0.0,
            output_throughput=output,
            request_throughput=result.request_throughput if result else 0.0,
            throughput_per_device=output / layout.num_devices,
            steps=result.steps if result else 0,
            memory_left_gb=min(r.memory_left_gb for r in memory),
            memory_gb=dict(memory[0].memory_gb),
            feasible=reason is None,
            reason=reason,
            timeline=timeline,
            timeline_truncated=truncated,
            stats=_single_run_stats(self.factory, self.started),
            **{**metrics, **extra},
        )


def _check_timeline_size(
    request: SimulateRequest, data: WorkloadSpec, busiest: int, field: str, dp: int
) -> None:
    if request.include_timeline and data.prefill_num_chunks * busiest > (
        limits.MAX_TIMELINE_CHUNK_REQUESTS
    ):
        raise SearchLimitError(
            f"a step timeline needs prefill_num_chunks x {_per_replica(field, dp)} <= "
            f"{limits.MAX_TIMELINE_CHUNK_REQUESTS} (here {data.prefill_num_chunks} x "
            f"{busiest}); drop include_timeline or shrink the request"
        )


def _simulate_closed_loop(
    run: _SimulationRun, model: CachedServingModel, split: list[tuple[int, int]]
) -> SimulateResponse:
    """``concurrency`` clients in total, each re-sending; KV admission queues the rest."""
    request = run.request
    assert request.concurrency is not None
    result: ServingResult | None = None
    reason: str | None = None
    try:
        result = simulate_serving(
            run.data,
            request.concurrency,
            model,
            run.scheduler,
            dp=run.layout.dp,
            num_requests=request.concurrency * request.requests_per_client,
            window=request.window,
            record_steps=request.include_timeline,
        )
    except InfeasibleError as exc:
        reason = f"memory: {exc}"
    per_client = request.requests_per_client
    return _serving_response(
        run,
        model,
        result,
        reason,
        in_flight=split[0][0],
        split=[
            ReplicaShare(replicas=n, concurrency=size, num_requests=size * per_client)
            for size, n in split
        ],
        batch_size=split[0][0],
        concurrency=request.concurrency,
        workload="closed_loop",
        window=request.window,
    )


def _simulate_poisson(
    run: _SimulationRun, model: CachedServingModel, shares: list[tuple[int, int | None, int]]
) -> SimulateResponse:
    """Requests arriving at ``request_rate`` in total; KV admission queues the rest."""
    request = run.request
    assert request.request_rate is not None
    dp = run.layout.dp
    result: ServingResult | None = None
    reason: str | None = None
    try:
        result = simulate_poisson_serving(
            run.data,
            request.request_rate,
            model,
            run.scheduler,
            dp=dp,
            num_requests=sum(n * replicas for n, _, replicas in shares),
            seed=request.seed,
            max_concurrency=request.max_concurrency,
            record_steps=request.include_timeline,
        )
    except InfeasibleError as exc:
        reason = f"memory: {exc}"
    busiest_requests, busiest_cap, _ = shares[0]
    return _serving_response(
        run,
        model,
        result,
        reason,
        in_flight=busiest_cap or busiest_requests,
        split=[
            ReplicaShare(
                replicas=replicas,
                concurrency=cap,
                num_requests=n,
                request_rate=request.request_rate / dp,
            )
            for n, cap, replicas in shares
        ],
        batch_size=busiest_cap,
        concurrency=request.max_concurrency,
        workload="poisson",
        window="benchmark",
        request_rate=request.request_rate,
        max_concurrency=request.max_concurrency,
        seed=request.seed,
    )


def _serving_response(
    run: _SimulationRun,
    model: CachedServingModel,
    result: ServingResult | None,
    reason: str | None,
    *,
    in_flight: int,
    split: list[ReplicaShare],
    **extra: Any,
) -> SimulateResponse:
    """A closed-loop or poisson response: memory at the running batch of the busiest replica
    (``in_flight`` requests, fewer when KV admission caps them), and the serving metrics."""
    data = run.data
    running = in_flight
    if result is not None and result.max_running is not None:
        running = min(running, result.max_running)
    memory = model.records((data.decode_shape(max(1, running)), largest_prefill_shape(data, 1)))
    if result is not None and reason is None:
        reason = limit_reason(data, result.ttft_ms, result.tpot_ms)
    if result is None:
        extra["max_running"] = 0
    return run.response(result, memory=memory, reason=reason, split=split, **extra)


def _timeline_out(steps: Sequence[StepRecord] | None) -> tuple[list[StepOut] | None, bool]:
    """The step timeline of a response (its first entries) and whether it was cut."""
    if steps is None:
        return None, False
    kept = [_step_out(step) for step in steps[: limits.MAX_TIMELINE_ENTRIES]]
    return kept, len(steps) > limits.MAX_TIMELINE_ENTRIES


def _single_run_stats(factory: ModelFactory, started: float) -> RunStats:
    """Statistics of a request that evaluated one configuration."""
    return RunStats(
        elapsed_ms=(time.perf_counter() - started) * 1e3,
        forward_evaluations=factory.usage.computed,
        shapes=factory.shapes,
        layouts=1,
        probes=1,
        cache=factory.counters(),
    )


def _shape_out(shape: ForwardShape | None) -> ForwardShapeOut | None:
    if shape is None:
        return None
    return ForwardShapeOut(
        concurrency=shape.concurrency, query_len=shape.query_len, seq_len=shape.seq_len
    )


def _step_out(step: StepRecord) -> StepOut:
    return StepOut(
        start_ms=step.start_ms,
        step_ms=step.step_ms,
        repeat=step.repeat,
        p_step=step.p_step,
        prefill=_shape_out(step.prefill_shape),
        prefill_ms=step.prefill_ms,
        d_step=step.d_step,
        decode=_shape_out(step.decode_shape),
        decode_ms=step.decode_ms,
        first_tokens=step.first_tokens,
        finished=step.finished,
        fused=step.fused,
    )


# --------------------------------------------------------------------------------------------
# POST /v1/optimize


def _layouts(
    num_devices: int,
    tp_sizes: Sequence[int] | None,
    ep_sizes: Sequence[int] | None,
    *,
    per_instance: str | None = None,
) -> tuple[ParallelLayout, ...]:
    """Layouts of ``num_devices``; for a PD instance, search sizes that do not fit are dropped."""
    if per_instance is not None:
        if tp_sizes is not None:
            fitting = [t for t in tp_sizes if num_devices % t == 0]
            if not fitting:
                raise InvalidParameterError(
                    "tp_sizes",
                    list(tp_sizes),
                    f"at least one divisor of {per_instance}={num_devices}",
                )
            tp_sizes = fitting
        if ep_sizes is not None:
            fitting = [e for e in ep_sizes if num_devices % e == 0]
            if not fitting:
                raise InvalidParameterError(
                    "ep_sizes",
                    list(ep_sizes),
                    f"at least one divisor of {per_instance}={num_devices}",
                )
            ep_sizes = fitting
    layouts = enumerate_layouts(num_devices, tp_sizes, ep_sizes)
    if len(layouts) > limits.MAX_LAYOUTS:
        raise SearchLimitError(
            f"{len(layouts)} parallel layouts requested (tp_sizes x ep_sizes); "
            f"at most {limits.MAX_LAYOUTS} per request"
        )
    return layouts


def _row_out(row: ResultRow, role: Role) -> ResultRowOut:
    return ResultRowOut(
        role=role,
        model=row.model,
        device=row.device,
        quantization=row.quantization,
        num_devices=row.num_devices,
        input_length=row.input_length,
        output_length=row.output_length,
        effective_input_length=row.effective_input_length,
        max_batched_tokens=row.max_batched_tokens,
        prefill_num_chunks=row.prefill_num_chunks,
        concurrency=row.concurrency,
        batch_size=row.batch_size,
        ttft_ms=row.ttft_ms,
        tpot_ms=row.tpot_ms,
        throughput_tokens_s=row.throughput_tokens_s,
        throughput_per_device=row.throughput_per_device,
        throughput_kind=row.throughput_kind,
        request_throughput=row.request_throughput,
        parallel=row.parallel,
        tp=row.tp,
        dp=row.dp,
        ep=row.ep,
        pp=row.pp,
        memory_left_gb=row.memory_left_gb,
        memory_gb=dict(row.memory_gb),
        method=row.method,
    )


def _probe_out(probe: Probe, role: Role) -> ProbeOut:
    layout = probe.layout
    return ProbeOut(
        role=role,
        parallel=layout.label,
        tp=layout.tp,
        dp=layout.dp,
        ep=layout.ep,
        pp=layout.pp,
        batch_size=probe.batch_size,
        concurrency=probe.concurrency,
        feasible=probe.feasible,
        reason=probe.reason,
        ttft_ms=probe.ttft_ms,
        tpot_ms=probe.tpot_ms,
        throughput_tokens_s=probe.throughput_tokens_s,
        throughput_per_device=probe.throughput_per_device,
        request_throughput=probe.request_throughput,
        memory_left_gb=probe.memory_left_gb,
        method=probe.method,
    )


def _infeasible(role: Role, reasons: Mapping[str, str]) -> list[InfeasibleLayout]:
    return [InfeasibleLayout(role=role, parallel=k, reason=v) for k, v in reasons.items()]


@dataclass(slots=True)
class _Section:
    role: Role
    result: OptimizeResult
    rejected: dict[str, str]


def _search(
    factory: ModelFactory,
    role: Role,
    layouts: Sequence[ParallelLayout],
    run: Callable[[Sequence[ParallelLayout]], OptimizeResult],
    mode: str,
) -> _Section:
    usable, rejected = factory.usable_layouts(layouts)
    if usable:
        result = run(usable)
    else:
        result = OptimizeResult(mode=mode, rows=(), probes=(), infeasible={}, forward_evaluations=0)
    return _Section(role=role, result=result, rejected=rejected)


def optimize(
    context: ServiceContext,
    request: OptimizeRequest,
    *,
    allow_paths: bool = False,
    progress: Callable[[str], None] | None = None,
) -> OptimizeResponse:
    """The throughput search; identical requests are answered from the response cache."""
    started = time.perf_counter()
    request = with_engine_budget(request)
    # Validate the workload and the search size first (also for a response-cache hit).
    if request.workload not in SEARCHED_WORKLOADS:
        raise InvalidParameterError(
            "workload",
            request.workload,
            f"one of {', '.join(SEARCHED_WORKLOADS)}: the optimizer searches concurrency, not a "
            "request rate (simulate a poisson workload one rate at a time: POST /v1/simulate)",
        )
    max_batch = search_cap(request, optimizer_data(request, request.num_devices))
    if request.workload != "burst" and request.mode != "agg":
        raise InvalidParameterError(
            "workload", request.workload, f"'burst' for mode {request.mode!r} (closed_loop: agg)"
        )
    scheduler = make_scheduler(request.scheduler)
    use_response_cache = context.settings.response_cache and not allow_paths
    key = (
        response_key("optimize", f"{RUNNER_MODEL_VERSION}|{request.model_dump_json()}")
        if use_response_cache
        else None
    )
    # The search's manifest: every forward key an identical search (top_k and include_probes
    # aside) used, so a warm search reads all of them in one MGET.
    search = request.model_dump_json(exclude={"top_k", "include_probes"})
    manifest_key = response_key("manifest", f"{RUNNER_MODEL_VERSION}|{search}")
    first_read = context.cache.get_many([manifest_key] if key is None else [manifest_key, key])
    manifest = first_read[0]
    if key is not None:
        cached = first_read[1]
        if cached is not None:
            try:
                response = OptimizeResponse.model_validate(cached)
            except ValidationError:
                response = None
            if response is not None:
                context.stats.add(response_cache_hits=1)
                response.stats.elapsed_ms = (time.perf_counter() - started) * 1e3
                response.stats.cache = CacheCounters(
                    backend=context.cache.backend, round_trips=1, response_cache_hit=True
                )
                return response

    deployment = resolve_deployment(request, allow_paths=allow_paths)
    factory = ModelFactory(context, deployment)
    factory.usage.round_trips += 1  # the read above
    factory.preload(manifest)
    if progress is not None:
        searched = 0

        def on_layout(layout: ParallelLayout) -> None:
            nonlocal searched
            searched += 1
            progress(f"searching layout {searched}: {layout.label}")

        factory.on_layout = on_layout
    label = deployment.label
    mode = request.mode
    sections: list[_Section] = []
    pd: PdRatioOut | None = None
    reason: str | None = None

    def note(text: str) -> None:
        if progress is not None:
            progress(text)

    if mode == "pd_ratio":
        p_devices = request.prefill_devices_per_instance or max(1, request.num_devices // 2)
        d_devices = request.decode_devices_per_instance or max(1, request.num_devices // 2)
        p_data = optimizer_data(request, p_devices)
        p_layouts, p_rejected = factory.usable_layouts(
            _layouts(
                p_devices,
                request.tp_sizes,
                request.ep_sizes,
                per_instance="prefill_devices_per_instance",
            )
        )
        d_layouts, d_rejected = factory.usable_layouts(
            _layouts(
                d_devices,
                request.tp_sizes,
                request.ep_sizes,
                per_instance="decode_devices_per_instance",
            )
        )
        note(f"pd_ratio: {len(p_layouts)} prefill and {len(d_layouts)} decode layouts")
        if p_layouts and d_layouts:
            pd_result = optimize_pd_ratio(
                p_data,
                p_layouts,
                d_layouts,
                factory,
                factory,
                label,
                label,
                device_budget=request.num_devices,
                serving_overhead_ms=request.serving_overhead_ms,
                max_batch_size=max_batch,
            )
            sections.append(_Section("prefill", pd_result.prefill, p_rejected))
            sections.append(_Section("decode", pd_result.decode, d_rejected))
            pd = PdRatioOut(
                p_qps=pd_result.p_qps,
                d_qps=pd_result.d_qps,
                pd_ratio=pd_result.pd_ratio,
                split=InstanceSplitOut(
                    prefill_instances=pd_result.split.prefill_instances,
                    decode_instances=pd_result.split.decode_instances,
                    devices_used=pd_result.split.devices_used,
                    balanced_qps=pd_result.split.balanced_qps,
                )
                if pd_result.split
                else None,
                prefill_row=_row_out(pd_result.prefill_row, "prefill")
                if pd_result.prefill_row
                else None,
                decode_row=_row_out(pd_result.decode_row, "decode")
                if pd_result.decode_row
                else None,
                output_throughput=pd_result.throughput_tokens_s,
                throughput_per_device=pd_result.throughput_per_device,
                reason=pd_result.reason,
            )
            reason = pd_result.reason
        else:
            empty = OptimizeResult(
                mode=mode, rows=(), probes=(), infeasible={}, forward_evaluations=0
            )
            sections.append(_Section("prefill", empty, p_rejected))
            sections.append(_Section("decode", empty, d_rejected))
            reason = "no parallel layout the model supports"
    else:
        data = optimizer_data(request, request.num_devices)
        layouts = _layouts(request.num_devices, request.tp_sizes, request.ep_sizes)
        note(f"{mode}: searching {len(layouts)} layouts")
        if mode == "agg":
            sections.append(
                _search(
                    factory,
                    "agg",
                    layouts,
                    lambda ls: optimize_agg(
                        data,
                        ls,
                        factory,
                        label,
                        scheduler=scheduler,
                        force_simulation=request.force_simulation,
                        max_batch_size=max_batch,
                        workload=request.workload,
                        window=request.window,
                        requests_per_client=request.requests_per_client,
                    ),
                    mode,
                )
            )
        elif mode == "disagg_prefill":
            sections.append(
                _search(
                    factory,
                    "prefill",
                    layouts,
                    lambda ls: optimize_disagg_prefill(
                        data,
                        ls,
                        factory,
                        label,
                        serving_overhead_ms=request.serving_overhead_ms,
                        max_batch_size=max_batch,
                    ),
                    mode,
                )
            )
        else:
            sections.append(
                _search(
                    factory,
                    "decode",
                    layouts,
                    lambda ls: optimize_disagg_decode(
                        data, ls, factory, label, max_batch_size=max_batch
                    ),
                    mode,
                )
            )
    new_manifest = factory.manifest()
    factory.flush({manifest_key: new_manifest} if new_manifest else None)

    rows: list[ResultRowOut] = []
    probes: list[ProbeOut] = []
    infeasible: list[InfeasibleLayout] = []
    for section in sections:
        rows.extend(_row_out(row, section.role) for row in section.result.rows)
        if request.include_probes:
            probes.extend(_probe_out(p, section.role) for p in section.result.probes)
        infeasible.extend(_infeasible(section.role, section.rejected))
        infeasible.extend(_infeasible(section.role, section.result.infeasible))
    if mode != "pd_ratio":
        rows = rows[: request.top_k]
    best = rows[0] if rows and mode != "pd_ratio" else None
    if mode != "pd_ratio" and best is None:
        reason = "no feasible configuration: " + (
            "; ".join(f"{i.parallel}: {i.reason}" for i in infeasible) or "no layout"
        )
    num_probes = sum(len(s.result.probes) for s in sections)
    response = OptimizeResponse(
        input=request,
        mode=mode,
        best=best,
        rows=rows,
        probes=probes,
        infeasible=infeasible,
        pd_ratio=pd,
        reason=reason,
        stats=RunStats(
            elapsed_ms=(time.perf_counter() - started) * 1e3,
            forward_evaluations=factory.usage.computed,
            shapes=factory.shapes,
            layouts=sum(len({p.layout for p in s.result.probes}) for s in sections),
            probes=num_probes,
            cache=factory.counters(),
        ),
    )
    note(f"done: {num_probes} probes, {factory.usage.computed} forwards computed")
    if key is not None:
        context.cache.set_many({key: response.model_dump(mode="json")})
    return response


# --------------------------------------------------------------------------------------------
# POST /v1/forward


def forward(
    context: ServiceContext, request: ForwardRequest, *, allow_paths: bool = False
) -> ForwardResponse:
    """One forward; the full result (breakdown included) is cached under its own key kind."""
    deployment = ResolvedDeployment(
        model=resolve_model(request.model, allow_paths=allow_paths),
        device=resolve_device(request.device),
        quantization=parse_quantization(
            request.quantize_linear_action, request.quantize_attention_action
        ),
        reserved_memory_gb=request.reserved_memory_gb,
        num_mtp_tokens=request.num_mtp_tokens,
        mtp_acceptance_rates=(),
    )
    layout = parallel_layout(
        num_devices=request.num_devices,
        tp=request.tp_size,
        ep=request.ep_size,
        pp=request.pp_size,
    )
    runner = deployment.runner(layout)
    info = forward_request(
        num_queries=request.num_queries,
        query_length=request.query_length,
        context_length=request.context_length,
        decode=request.decode,
        num_mtp_tokens=request.num_mtp_tokens,
    )
    shape = ForwardShape(
        is_decode=info.is_decode,
        concurrency=info.concurrency,
        query_len=info.query_len,
        seq_len=info.seq_len,
    )
    key = shape_key(
        identity_digest(f"{runner.identity()}|draft={info.mtp_draft_tokens}"), shape, kind="fwd"
    )
    cached = context.cache.get_many([key])[0]
    body = cached if isinstance(cached, dict) and "breakdown" in cached else None
    if body is None:
        body = forward_to_dict(runner, runner.run_inference(info))
        context.stats.add(forward_evaluations=1)
        context.cache.set_many({key: body})
    hit = body is cached
    return ForwardResponse.model_validate(
        {
            **body,
            "input": request,
            "cache": CacheCounters(
                backend=context.cache.backend,
                hits=int(hit),
                misses=int(not hit),
                round_trips=1,
            ),
        }
    )


# --------------------------------------------------------------------------------------------
# GET /v1/models, GET /v1/devices


def _model_info(arch: ModelArchitecture) -> ModelInfo:
    return ModelInfo(
        name=arch.name,
        model_type=arch.model_type,
        num_params=arch.num_params,
        num_active_params=arch.num_active_params,
        num_layers=arch.num_layers,
        hidden_size=arch.hidden_size,
        architecture=arch.to_dict(),
    )


def _device_info(d: Device) -> DeviceInfo:
    return DeviceInfo(
        name=d.name,
        vendor=d.vendor,
        description=d.description,
        peak_bf16_tflops=d.peak_bf16_tflops,
        peak_fp8_tflops=d.peak_fp8_tflops,
        peak_int8_tops=d.peak_int8_tops,
        peak_fp4_tflops=d.peak_fp4_tflops,
        hbm_capacity_gb=d.hbm_capacity_gb,
        hbm_bandwidth_gb_s=d.hbm_bandwidth_gb_s,
        numbers=d.to_dict(),
    )


def get_model_info(name: str) -> ModelInfo:
    """A built-in model by id or alias (never a local path); UnknownModelError otherwise."""
    return _model_info(resolve_model(name))


def get_device_info(name: str) -> DeviceInfo:
    return _device_info(get_device(name))


def list_models() -> ModelList:
    models = [_model_info(arch) for arch in catalog_models()]
    return ModelList(
        models=models,
        quantize_linear_actions=linear_actions(),
        quantize_attention_actions=attention_actions(),
        supported_model_types=list(SUPPORTED_MODEL_TYPES),
    )


def list_devices() -> DeviceList:
    return DeviceList(devices=[_device_info(d) for d in catalog_devices()])
