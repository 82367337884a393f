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
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.core.catalog.hardware import InterconnectTier
from app.core.errors import (
    InfeasibleError,
)
from app.core.limits import FirstToken, Pool
from app.core.optimizer.agg import limit_reason
from app.core.parallel import ParallelLayout
from app.core.runner.plan import kv_send_copies
from app.core.scenario import DisaggPools, PoolLink, Scenario, ServingRun
from app.core.spec import WorkloadSpec
from app.core.workload import ranks_are_coupled
from app.core.workload.disagg_serving import (
    DisaggServingResult,
    KvTransfer,
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
from app.services.disagg_fields import POOLS, pool_errors
from app.services.finite import finite_or_infeasible
from app.services.scenario import resolve_disagg_simulation

if TYPE_CHECKING:
    from app.models.simulate import DisaggPoolOut, DisaggSimulateResponse, SimulateRequest
    from app.services.context import ServiceContext


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
        with pool_errors(pool):
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


def _arrivals(serving: ServingRun) -> tuple[float, ...] | None:
    """A poisson run's arrival times (None: the closed loop)."""
    if serving.workload != "poisson":
        return None
    assert serving.request_rate is not None and serving.num_requests is not None
    return poisson_arrivals_ms(serving.request_rate, serving.num_requests, serving.seed)


def _kv_transfer(
    link: PoolLink | None, tier: InterconnectTier, kv_bytes: float
) -> tuple[str, KvTransfer]:
    """The KV transfer's link and time: the stated ``link`` when given, else the interconnect
    ``tier`` holding both pools."""
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
    resolved = resolve_disagg_simulation(context, request, allow_paths=allow_paths)
    return evaluate_disagg(context, resolved.scenario, resolved.echo, started=started)


def evaluate_disagg(
    context: ServiceContext, scenario: Scenario, echo: SimulateRequest, *, started: float
) -> DisaggSimulateResponse:
    """A disaggregated simulate scenario's answer (``echo`` is its ``input``)."""
    spec = scenario.layout
    assert isinstance(spec, DisaggPools)  # a disaggregated simulate scenario
    deployment, data, serving = scenario.deployment, scenario.spec, scenario.serving
    profile = deployment.profile
    layouts: dict[Pool, ParallelLayout] = {
        "prefill": spec.prefill_layout,
        "decode": spec.decode_layout,
    }
    workers: dict[Pool, int] = {"prefill": spec.prefill_workers, "decode": spec.decode_workers}
    num_devices = spec.num_devices
    arrivals_ms = _arrivals(serving)
    factory = ModelFactory(context, deployment)
    decode_factory = factory
    if spec.decode_deployment is not None:
        decode_factory = ModelFactory(context, spec.decode_deployment)
        decode_factory.usage = factory.usage  # one request's counters
    factories: dict[Pool, ModelFactory] = {"prefill": factory, "decode": decode_factory}
    distinct = [factory] if decode_factory is factory else [factory, decode_factory]
    pools, distinct_models = _build_pools(factories, layouts, workers, deployment.model.is_moe)
    isl, osl = data.input_length, data.output_length
    budget = data.max_batched_tokens
    prefill, decode = pools["prefill"], pools["decode"]
    kv_prefill = prefill.model.kv_capacity_requests(isl, budget)
    kv_decode = decode.model.kv_capacity_requests(isl + osl, budget)
    kv_bytes = factory.serving(prefill.layout).runner.kv_cache_bytes(1, isl) * kv_send_copies(
        deployment.model, prefill.layout.tp, decode.layout.tp
    )
    link_name, transfer = _kv_transfer(spec.link, deployment.device.tier_for(num_devices), kv_bytes)
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
            assert serving.concurrency is not None
            result = simulate_disagg_serving(
                data,
                serving.concurrency,
                prefill_pool,
                decode_pool,
                transfer,
                num_requests=serving.concurrency * serving.requests_per_client,
                first_token=first_token,
            )
    except InfeasibleError as exc:
        reason = f"memory: {exc}"
    for each in distinct:  # the request's one pipelined cache write per device
        each.flush()
    if result is not None:
        reason = limit_reason(data, result.ttft_ms, result.tpot_ms)
    return _response(
        echo,
        serving,
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
    echo: SimulateRequest,
    serving: ServingRun,
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
        serving.num_requests
        if serving.workload == "poisson"
        else (serving.concurrency or 0) * serving.requests_per_client
    )
    waits = {"prefill": r.prefill_queue_ms, "decode": r.decode_wait_ms} if r else {}
    busy = {"prefill": r.prefill_utilisation, "decode": r.decode_utilisation} if r else {}
    tier_name, kv_transfer = transfer
    output = r.throughput_tokens_s if r else 0.0
    prefill, decode = pools["prefill"], pools["decode"]
    return finite_or_infeasible(
        DisaggSimulateResponse(
            input=echo,
            engine=dict(profile_dict),
            workload=serving.workload,
            concurrency=serving.concurrency,
            request_rate=serving.request_rate,
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
