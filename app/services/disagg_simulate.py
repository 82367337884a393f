"""``POST /v1/simulate`` with ``mode: "disagg"``: a prefill pool and a decode pool, each with
its own layout, under one closed loop of ``concurrency`` clients
(:func:`~app.core.workload.disagg_serving.simulate_disagg_serving`).

The pools are built as the replay of a measured disaggregated file builds them
(:mod:`app.core.workload.disagg_setup`): each pool's serving model under the request's engine
profile, a prefill job holding at most the prompts whose KV fits the worker, a decode rank
running at most the engine's ``max_num_seqs`` and what its KV pool holds, the KV transfer over
the innermost interconnect tier holding both pools, and the engine's first-token rule. Each
pool's forwards go through the request's :class:`~app.services.cost_model.ModelFactory` (one
cached serving model per pool layout), so they are read from and written to the latency cache.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.core import limits
from app.core.catalog.hardware import InterconnectTier
from app.core.errors import (
    InfeasibleError,
    InvalidParameterError,
    UnknownDeviceError,
    UnsupportedError,
)
from app.core.optimizer.agg import limit_reason
from app.core.parallel import ParallelLayout
from app.core.spec import WorkloadSpec
from app.core.workload import DEFAULT_POISSON_REQUESTS, ranks_are_coupled
from app.core.workload.disagg_serving import (
    DisaggServingResult,
    FirstToken,
    KvTransfer,
    Pool,
    simulate_disagg_poisson,
    simulate_disagg_serving,
)
from app.core.workload.disagg_setup import (
    BYTES_PER_GB,
    FIRST_TOKEN_RULE,
    FIRST_TOKEN_TEXT,
    PoolWorker,
    disagg_pools,
    tier_kv_transfer,
)
from app.core.workload.poisson import poisson_arrivals_ms
from app.models.optimize import RunStats
from app.services.cost_model import CachedServingModel, ModelFactory
from app.services.finite import finite_or_infeasible
from app.services.resolve import resolve_deployment, resolved_echo
from app.services.simulate_fields import check_workload_fields
from app.services.sizing import (
    check_closed_loop_size,
    check_poisson_size,
    check_simulation_size,
    with_engine_defaults,
    workload_spec,
)

if TYPE_CHECKING:
    from app.models.simulate import DisaggPoolOut, DisaggSimulateResponse, SimulateRequest
    from app.services.context import ServiceContext

POOLS: tuple[Pool, ...] = ("prefill", "decode")
#: The pool fields (``<pool>_<name>``) and, for the layout ones, the runner's name of the value.
_LAYOUT_FIELDS = {"tp_size": "tp", "dp_size": "dp", "ep_size": "ep"}
#: Fields of an aggregated simulation that mean nothing to a disaggregated one: given with a
#: value other than the schema's default, they are a 422 naming the field.
_AGG_ONLY = (
    "tp_size",
    "dp_size",
    "ep_size",
    "max_concurrency",
    "include_timeline",
    "force_simulation",
    "calibration",
)
#: The poisson options (a closed loop takes none of them).
_POISSON_ONLY = ("request_rate", "num_requests", "seed")
_AGG_ONLY_WHY = {
    "tp_size": "each pool has its own layout: prefill_tp_size / decode_tp_size",
    "dp_size": "each pool has its own layout: prefill_dp_size / decode_dp_size",
    "ep_size": "each pool has its own layout: prefill_ep_size / decode_ep_size",
    "include_timeline": "the disaggregated simulation records no step timeline",
    "force_simulation": "the disaggregated simulation always runs in time",
    "calibration": "a calibration is fitted on aggregated runs",
    "max_concurrency": "the open loop sends every request when it arrives",
}


def _check_disagg_fields(request: SimulateRequest) -> None:
    """What a disaggregated request must give and must leave out."""
    from app.models.simulate import SimulateRequest
    from app.models.workload import SchedulerOptions

    if request.workload not in (None, "closed_loop", "poisson"):
        raise InvalidParameterError(
            "workload",
            request.workload,
            "'closed_loop' (or omitted: concurrency clients over the whole deployment) or "
            "'poisson' (request_rate over the whole deployment) for mode 'disagg'",
        )
    defaults = SimulateRequest.model_fields
    for name in _AGG_ONLY:
        value = getattr(request, name)
        if name in request.model_fields_set and value != defaults[name].default:
            why = _AGG_ONLY_WHY.get(name, "an aggregated or poisson option")
            raise InvalidParameterError(name, value, f"omitted for mode 'disagg' ({why})")
    if request.workload == "poisson":
        if request.concurrency is not None:
            raise InvalidParameterError(
                "concurrency",
                request.concurrency,
                "omitted for mode 'disagg' with workload 'poisson' (request_rate sets the load)",
            )
        check_workload_fields(request)  # request_rate given, requests_per_client omitted
    else:
        for name in _POISSON_ONLY:
            value = getattr(request, name)
            if name in request.model_fields_set and value != defaults[name].default:
                raise InvalidParameterError(
                    name, value, "omitted for mode 'disagg' with a closed loop (a poisson option)"
                )
    if request.scheduler != SchedulerOptions():  # its schema default is accepted
        raise InvalidParameterError(
            "scheduler",
            request.scheduler.name,
            "omitted for mode 'disagg' (prefill jobs and decode steps run in separate pools; "
            "engine_options.max_num_seqs sets the decode running cap)",
        )
    for pool in POOLS:
        if getattr(request, f"{pool}_workers") is None:
            raise InvalidParameterError(
                f"{pool}_workers", None, f"given for mode 'disagg' ({pool} workers, >= 1)"
            )
    if request.workload != "poisson" and request.concurrency is None:
        raise InvalidParameterError(
            "concurrency", None, "given for mode 'disagg' (closed-loop clients in total)"
        )
    if request.window != "benchmark":
        raise InvalidParameterError(
            "window", request.window, "'benchmark' for mode 'disagg' (every request counts)"
        )


def _with_pool_defaults(request: SimulateRequest) -> SimulateRequest:
    """The request with every pool layout value (default 1), the workload (closed loop unless
    poisson) and a poisson run's request count filled in, so the echo shows what ran."""
    update: dict[str, object] = {"workload": request.workload or "closed_loop"}
    if request.workload == "poisson" and request.num_requests is None:
        update["num_requests"] = DEFAULT_POISSON_REQUESTS
    for pool in POOLS:
        for name in _LAYOUT_FIELDS:
            if getattr(request, f"{pool}_{name}") is None:
                update[f"{pool}_{name}"] = 1
    return request.model_copy(update=update)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Pool:
    """One pool of the request: its workers, one worker's layout, its cached serving model."""

    name: Pool
    workers: int
    layout: ParallelLayout
    model: CachedServingModel
    coupled: bool
    device: str

    @property
    def devices(self) -> int:
        return self.workers * self.layout.num_devices

    def worker(self, kv_requests: int) -> PoolWorker:
        """The core's view of one worker of this pool (``kv_requests``: KV room per rank)."""
        return PoolWorker(
            workers=self.workers,
            ranks=self.layout.dp,
            coupled=self.coupled,
            latency=self.model,
            kv_requests=kv_requests,
            label=f"{self.layout.label} of {self.device}",
        )

    @property
    def units(self) -> int:
        return self.workers * (1 if self.coupled else self.layout.dp)


def _pool_layout(request: SimulateRequest, pool: Pool) -> ParallelLayout:
    """One worker's layout; the runner's complaints name the request's field."""
    sizes = {name: getattr(request, f"{pool}_{name}") for name in _LAYOUT_FIELDS}
    with _pool_errors(pool):
        return ParallelLayout(tp=sizes["tp_size"], dp=sizes["dp_size"], ep=sizes["ep_size"])


@contextmanager
def _pool_errors(pool: Pool) -> Iterator[None]:
    """Re-raise a layout error of one pool naming the pool's request field (``tp`` ->
    ``prefill_tp_size``), so a 422 points at what to change."""
    try:
        yield
    except InvalidParameterError as exc:
        name = {v: k for k, v in _LAYOUT_FIELDS.items()}.get(exc.field)
        if name is None:
            raise
        raise InvalidParameterError(f"{pool}_{name}", exc.value, exc.allowed) from exc
    except UnsupportedError as exc:
        raise UnsupportedError(f"{pool} worker: {exc}") from exc


def _check_devices(request: SimulateRequest, prefill: int, decode: int) -> int:
    """The deployment's devices: both pools', equal to ``num_devices`` when given."""
    total = prefill + decode
    given = request.num_devices
    if given is not None and given != total:
        raise InvalidParameterError(
            "num_devices",
            given,
            f"prefill_workers x prefill devices + decode_workers x decode devices = "
            f"{prefill} + {decode} = {total}",
        )
    if total > limits.MAX_NUM_DEVICES:
        field = "prefill_workers" if prefill >= decode else "decode_workers"
        raise InvalidParameterError(
            field,
            getattr(request, field),
            f"a deployment of at most {limits.MAX_NUM_DEVICES} devices (here {prefill} prefill "
            f"+ {decode} decode = {total})",
        )
    return total


def _build_pools(
    factories: dict[Pool, ModelFactory],
    layouts: dict[Pool, ParallelLayout],
    workers: dict[Pool, int],
    is_moe: bool,
) -> tuple[dict[Pool, _Pool], int]:
    """Both pools, each with the cached serving model of its layout on its device (one model
    when both pools share a layout and a device), and the count of distinct models; a layout
    the runner refuses names its pool's field."""
    models: dict[tuple[int, ParallelLayout], CachedServingModel] = {}
    pools: dict[Pool, _Pool] = {}
    for pool in POOLS:
        layout, factory = layouts[pool], factories[pool]
        with _pool_errors(pool):
            factory.serving(layout)  # the runner's checks (TP vs heads, EP vs experts, ...)
        key = (id(factory), layout)
        if key not in models:
            models[key] = factory(layout)
        pools[pool] = _Pool(
            name=pool,
            workers=workers[pool],
            layout=layout,
            model=models[key],
            coupled=ranks_are_coupled(is_moe, layout),
            device=factory.deployment.device.name,
        )
    return pools, len(models)


def _decode_factory(
    context: ServiceContext,
    request: SimulateRequest,
    factory: ModelFactory,
    *,
    allow_paths: bool,
) -> ModelFactory:
    """The decode pool's model factory: the prefill pool's unless ``decode_device`` names
    another device (then its own, counting into the same usage). Pools on two devices need
    ``pool_link``, the interconnect between them."""
    if request.decode_device is None:
        return factory
    try:
        decode = resolve_deployment(
            request.model_copy(update={"device": request.decode_device}),
            allow_paths=allow_paths,
            profile=factory.deployment.profile,
        )
    except UnknownDeviceError as exc:
        raise UnknownDeviceError(exc.name, exc.valid, field="decode_device") from exc
    except InvalidParameterError as exc:
        if exc.field != "device":
            raise
        raise InvalidParameterError("decode_device", exc.value, exc.allowed) from exc
    if decode.device == factory.deployment.device:
        return factory
    if request.pool_link is None:
        raise InvalidParameterError(
            "pool_link",
            None,
            f"given when the pools run on different devices ({factory.deployment.device.name} "
            f"and {decode.device.name}): the interconnect between them (bandwidth_gb_s per "
            "device, fixed_ms)",
        )
    decode_factory = ModelFactory(context, decode)
    decode_factory.usage = factory.usage  # one request's counters
    return decode_factory


def _arrivals(request: SimulateRequest, data: WorkloadSpec) -> tuple[float, ...] | None:
    """A poisson run's arrival times (None: the closed loop), after the run's size checks."""
    if request.workload == "poisson":
        assert request.request_rate is not None and request.num_requests is not None
        check_poisson_size(data, request.num_requests)
        return poisson_arrivals_ms(request.request_rate, request.num_requests, request.seed)
    assert request.concurrency is not None  # _check_disagg_fields
    check_simulation_size(data, 1, "concurrency")  # the prefill chunk bound
    check_closed_loop_size(data, request.concurrency, request.requests_per_client, "concurrency")
    return None


def _kv_transfer(
    request: SimulateRequest, tier: InterconnectTier, kv_bytes: float
) -> tuple[str, KvTransfer]:
    """The KV transfer's link and time: the request's ``pool_link`` when given, else the
    interconnect ``tier`` holding both pools."""
    link = request.pool_link
    if link is None:
        return tier.name, tier_kv_transfer(tier, kv_bytes)
    transfer = KvTransfer(
        bytes_per_request=kv_bytes,
        bandwidth_bytes_per_s=link.bandwidth_gb_s * BYTES_PER_GB,
        fixed_ms=link.fixed_ms,
    )
    return link.name, transfer


def simulate_disagg(
    context: ServiceContext, request: SimulateRequest, *, allow_paths: bool = False
) -> DisaggSimulateResponse:
    """One disaggregated configuration (see the module docstring); a worker that cannot hold
    one prompt's or one request's KV is a ``feasible: false`` answer with the reason."""
    started = time.perf_counter()
    _check_disagg_fields(request)
    request, profile = with_engine_defaults(_with_pool_defaults(request))
    layouts = {pool: _pool_layout(request, pool) for pool in POOLS}
    workers = {pool: int(getattr(request, f"{pool}_workers")) for pool in POOLS}
    num_devices = _check_devices(
        request,
        workers["prefill"] * layouts["prefill"].num_devices,
        workers["decode"] * layouts["decode"].num_devices,
    )
    request = request.model_copy(update={"num_devices": num_devices})
    deployment = resolve_deployment(request, allow_paths=allow_paths, profile=profile)
    data = workload_spec(request, num_devices, profile)
    arrivals_ms = _arrivals(request, data)
    factory = ModelFactory(context, deployment)
    decode_factory = _decode_factory(context, request, factory, allow_paths=allow_paths)
    factories: dict[Pool, ModelFactory] = {"prefill": factory, "decode": decode_factory}
    distinct = [factory] if decode_factory is factory else [factory, decode_factory]
    pools, distinct_models = _build_pools(factories, layouts, workers, deployment.model.is_moe)
    isl, osl = data.input_length, data.output_length
    budget = data.max_batched_tokens
    prefill, decode = pools["prefill"], pools["decode"]
    kv_prefill = prefill.model.kv_capacity_requests(isl, budget)
    kv_decode = decode.model.kv_capacity_requests(isl + osl, budget)
    kv_bytes = factory.serving(prefill.layout).runner.kv_cache_bytes(1, isl)
    link_name, transfer = _kv_transfer(request, deployment.device.tier_for(num_devices), kv_bytes)
    d_device = decode_factory.deployment.device
    first_token = FIRST_TOKEN_RULE.get(profile.name, "decode_step")
    result: DisaggServingResult | None = None
    reason: str | None = None
    job_max = run_cap = 0
    try:
        prefill_pool, decode_pool = disagg_pools(
            prefill.worker(kv_prefill),
            decode.worker(kv_decode),
            input_length=isl,
            output_length=osl,
            running_cap=profile.running_cap(d_device.hbm_capacity_gb, d_device.name),
        )
        first_chunk = data.get_prefill_chunk_plan()[0].query_len
        job_max = max(1, budget // first_chunk)
        if prefill_pool.max_requests_per_rank is not None:
            job_max = min(job_max, prefill_pool.max_requests_per_rank)
        run_cap = decode_pool.max_running
        if arrivals_ms is not None:
            result = simulate_disagg_poisson(
                data, arrivals_ms, prefill_pool, decode_pool, transfer, first_token=first_token
            )
        else:
            assert request.concurrency is not None
            result = simulate_disagg_serving(
                data,
                request.concurrency,
                prefill_pool,
                decode_pool,
                transfer,
                num_requests=request.concurrency * request.requests_per_client,
                first_token=first_token,
            )
    except InfeasibleError as exc:
        reason = f"memory: {exc}"
    for each in distinct:  # the request's one pipelined cache write per device
        each.flush()
    if result is not None:
        reason = limit_reason(data, result.ttft_ms, result.tpot_ms)
    return _response(
        resolved_echo(request, deployment, None),  # the pools run no step scheduler
        profile_dict=deployment.profile.to_dict(),
        data=data,
        pools=pools,
        kv={"prefill": kv_prefill, "decode": kv_decode},
        caps={"prefill": job_max, "decode": run_cap},
        num_devices=num_devices,
        transfer=(link_name, transfer),
        first_token=first_token,
        result=result,
        reason=reason,
        stats=RunStats(
            elapsed_ms=(time.perf_counter() - started) * 1e3,
            forward_evaluations=factory.usage.computed,
            shapes=sum(each.shapes for each in distinct),
            layouts=distinct_models,
            probes=1,
            cache=factory.counters(),
        ),
    )


def pd_split_text(prefill_workers: int, decode_workers: int, p_devices: int, d_devices: int) -> str:
    """``2P:1D (8:8 devices)``."""
    return f"{prefill_workers}P:{decode_workers}D ({p_devices}:{d_devices} devices)"


def _response(
    request: SimulateRequest,
    *,
    profile_dict: dict[str, object],
    data: WorkloadSpec,
    pools: dict[Pool, _Pool],
    kv: dict[Pool, int],
    caps: dict[Pool, int],
    num_devices: int,
    transfer: tuple[str, KvTransfer],
    first_token: FirstToken,
    result: DisaggServingResult | None,
    reason: str | None,
    stats: RunStats,
) -> DisaggSimulateResponse:
    from app.models.simulate import DisaggSimulateResponse, KvTransferOut

    r = result
    sent = (
        request.num_requests
        if request.workload == "poisson"
        else (request.concurrency or 0) * request.requests_per_client
    )
    waits = {"prefill": r.prefill_queue_ms, "decode": r.decode_wait_ms} if r else {}
    busy = {"prefill": r.prefill_utilisation, "decode": r.decode_utilisation} if r else {}
    tier_name, kv_transfer = transfer
    output = r.throughput_tokens_s if r else 0.0
    prefill, decode = pools["prefill"], pools["decode"]
    return finite_or_infeasible(
        DisaggSimulateResponse(
            input=request,
            engine=dict(profile_dict),
            workload=request.workload or "closed_loop",
            concurrency=request.concurrency,
            request_rate=request.request_rate,
            num_requests=r.num_requests if r else sent or 0,
            num_devices=num_devices,
            pd_split=pd_split_text(
                prefill.workers, decode.workers, prefill.devices, decode.devices
            ),
            prefill=_pool_out(prefill, kv["prefill"], caps["prefill"], busy, waits),
            decode=_pool_out(decode, kv["decode"], caps["decode"], busy, waits),
            binding_pool=r.binding_pool if r else None,
            transfer=KvTransferOut(
                tier=tier_name,
                bandwidth_gb_s=kv_transfer.bandwidth_bytes_per_s / BYTES_PER_GB,
                bytes_per_request=kv_transfer.bytes_per_request,
                fixed_ms=kv_transfer.fixed_ms,
                transfer_ms=r.transfer_ms if r else kv_transfer.time_ms(1),
            ),
            first_token=first_token,
            first_token_rule=FIRST_TOKEN_TEXT[first_token],
            max_batched_tokens=data.max_batched_tokens,
            effective_input_length=data.effective_input_length,
            prefill_num_chunks=data.prefill_num_chunks,
            ttft_ms=r.ttft_ms if r else 0.0,
            tpot_ms=r.tpot_ms if r else 0.0,
            e2e_ms=r.e2e_ms if r else 0.0,
            makespan_ms=r.makespan_ms if r else 0.0,
            output_throughput=output,
            request_throughput=r.request_throughput_s if r else 0.0,
            throughput_per_device=output / num_devices,
            prefill_jobs=r.prefill_jobs if r else 0,
            decode_runs=r.decode_runs if r else 0,
            feasible=r is not None and reason is None,
            reason=reason,
            stats=stats,
        )
    )


def _pool_out(
    pool: _Pool, kv: int, cap: int, busy: dict[str, float], waits: dict[str, float]
) -> DisaggPoolOut:
    from app.models.simulate import DisaggPoolOut

    layout = pool.layout
    return DisaggPoolOut(
        workers=pool.workers,
        device=pool.device,
        tp_size=layout.tp,
        dp_size=layout.dp,
        ep_size=layout.ep,
        parallel=layout.label,
        devices_per_worker=layout.num_devices,
        devices=pool.devices,
        units=pool.units,
        coupled=pool.coupled,
        kv_requests=kv,
        max_requests=cap,
        utilisation=busy.get(pool.name, 0.0),
        wait_ms=waits.get(pool.name, 0.0),
    )
