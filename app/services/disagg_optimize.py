"""``POST /v1/optimize`` with ``mode: "disagg"``: prefill and decode worker layouts, worker
counts and closed-loop concurrency of a whole disaggregated deployment under ``num_devices``
(:func:`~app.core.optimizer.disagg_search.optimize_disagg`).

Every configuration is priced exactly as ``POST /v1/simulate`` with ``mode: "disagg"`` prices
one (:mod:`app.services.disagg_simulate`, :mod:`app.core.workload.disagg_setup`): each pool
layout's cached serving model under the request's engine profile (one per distinct layout,
shared by every configuration and probe, so every forward is read from and written to the
latency cache), the engine's running cap and first-token rule, and the KV transfer over the
innermost interconnect tier holding the configuration's devices.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.core.errors import InvalidParameterError
from app.core.limits import FirstToken, Pool
from app.core.optimizer.disagg_search import (
    DisaggProbe,
    DisaggRow,
    DisaggSearchResult,
    DisaggSearchSettings,
    PoolOption,
    TransferFor,
    optimize_disagg,
)
from app.core.parallel import ParallelLayout
from app.core.runner.plan import kv_send_copies
from app.core.scenario import DisaggSearchSpace, ResolvedDeployment, Scenario
from app.core.workload import ranks_are_coupled
from app.core.workload.disagg_serving import KvTransfer
from app.core.workload.disagg_setup import (
    FIRST_TOKEN_RULE,
    PoolWorker,
    tier_kv_transfer,
)
from app.models.optimize import (
    DisaggOptimizeResponse,
    DisaggProbeOut,
    DisaggRowOut,
    DisaggSearchOut,
    DisaggWorkersOut,
    InfeasibleLayout,
    OptimizeRequest,
    RunStats,
)
from app.services.cost_model import CachedServingModel, ModelFactory
from app.services.disagg_simulate import pd_split_text
from app.services.finite import non_finite_paths
from app.services.response_cache import cached_response, optimize_key
from app.services.scenario import resolve_disagg_search

if TYPE_CHECKING:
    from app.services.context import ServiceContext


def _usable(
    factory: ModelFactory, pool: Pool, layouts: Sequence[ParallelLayout]
) -> tuple[list[ParallelLayout], dict[str, str]]:
    """The layouts the model divides; none at all is a 422 naming the size list to change."""
    usable, rejected = factory.usable_layouts(layouts)
    if not usable:
        # the runner names the size it refuses first (``ep=3 is invalid: ...``)
        refused_ep = any(why.split("=")[0].endswith("ep") for why in rejected.values())
        field = "ep_sizes" if refused_ep else "tp_sizes"
        raise InvalidParameterError(
            field,
            [layout.label for layout in layouts],
            f"a {pool} worker layout the model divides (heads, experts): "
            + "; ".join(f"{label}: {why}" for label, why in rejected.items()),
        )
    return usable, rejected


def _pool_option(
    deployment: ResolvedDeployment,
    layout: ParallelLayout,
    model: CachedServingModel,
    context_len: int,
    budget: int,
) -> PoolOption:
    """One worker of ``layout`` as the search sees it: its ranks, whether they are coupled, its
    cached serving model and the requests of ``context_len`` tokens its KV cache holds."""
    return PoolOption(
        layout=layout,
        worker=PoolWorker(
            workers=1,
            ranks=layout.dp,
            coupled=ranks_are_coupled(deployment.model.is_moe, layout),
            latency=model,
            kv_requests=model.kv_capacity_requests(context_len, budget),
            label=f"{layout.label} of {deployment.device.name}",
        ),
    )


def _kv_transfers(
    factory: ModelFactory, deployment: ResolvedDeployment, input_length: int
) -> TransferFor:
    """One prompt's KV transfer from a prefill worker of a layout to a decode worker of another
    over the innermost tier holding ``devices`` (memoised per prefill layout, copies sent and
    tier)."""
    device = deployment.device
    transfers: dict[tuple[ParallelLayout, int, str], KvTransfer] = {}

    def transfer(layout: ParallelLayout, decode: ParallelLayout, devices: int) -> KvTransfer:
        tier = device.tier_for(devices)
        copies = kv_send_copies(deployment.model, layout.tp, decode.tp)
        found = transfers.get((layout, copies, tier.name))
        if found is None:
            kv_bytes = factory.serving(layout).runner.kv_cache_bytes(1, input_length) * copies
            found = transfers[(layout, copies, tier.name)] = tier_kv_transfer(tier, kv_bytes)
        return found

    return transfer


@dataclass(frozen=True, slots=True, kw_only=True)
class _Searched:
    """A finished search: its result under the engine's ``first_token`` rule, the usable layouts
    of each pool, the layouts the model refused, the distinct layouts priced and the factory
    that priced them (its counters)."""

    result: DisaggSearchResult
    first_token: FirstToken
    prefill_layouts: int
    decode_layouts: int
    refused: list[tuple[Pool, str, str]]
    layouts: int
    factory: ModelFactory


def _search(
    context: ServiceContext,
    scenario: Scenario,
    space: DisaggSearchSpace,
    progress: Callable[[str], None] | None,
) -> _Searched:
    """The layouts the model divides, each priced by one cached serving model, searched."""
    deployment, data = scenario.deployment, scenario.spec
    profile, device = deployment.profile, deployment.device
    factory = ModelFactory(context, deployment)
    usable_p, rejected_p = _usable(factory, "prefill", space.prefill_layouts)
    usable_d, rejected_d = _usable(factory, "decode", space.decode_layouts)
    if progress is not None:
        progress(f"disagg: {len(usable_p)} prefill and {len(usable_d)} decode worker layouts")
    isl, osl, budget = data.input_length, data.output_length, data.max_batched_tokens
    models = {layout: factory(layout) for layout in dict.fromkeys([*usable_p, *usable_d])}
    first_token = FIRST_TOKEN_RULE.get(profile.name, "decode_step")
    result = optimize_disagg(
        data,
        [_pool_option(deployment, layout, models[layout], isl, budget) for layout in usable_p],
        [
            _pool_option(deployment, layout, models[layout], isl + osl, budget)
            for layout in usable_d
        ],
        DisaggSearchSettings(
            num_devices=space.num_devices,
            transfer=_kv_transfers(factory, deployment, isl),
            max_workers=space.max_workers,
            max_concurrency=space.max_clients,
            requests_per_client=scenario.serving.requests_per_client,
            running_cap=profile.running_cap(device.hbm_capacity_gb, device.name),
            first_token=first_token,
        ),
    )
    factory.flush()  # the request's one pipelined cache write
    return _Searched(
        result=result,
        first_token=first_token,
        prefill_layouts=len(usable_p),
        decode_layouts=len(usable_d),
        refused=[
            *(("prefill", label, why) for label, why in rejected_p.items()),
            *(("decode", label, why) for label, why in rejected_d.items()),
        ],
        layouts=len(models),
        factory=factory,
    )


def optimize_disagg_deployment(
    context: ServiceContext,
    request: OptimizeRequest,
    *,
    allow_paths: bool = False,
    progress: Callable[[str], None] | None = None,
) -> DisaggOptimizeResponse:
    """The disaggregated search (see the module docstring)."""
    started = time.perf_counter()
    resolved = resolve_disagg_search(request, allow_paths=allow_paths)
    request, scenario = resolved.echo, resolved.scenario
    space = scenario.search
    assert isinstance(space, DisaggSearchSpace)  # a disaggregated optimize scenario
    key = optimize_key(request) if context.settings.response_cache and not allow_paths else None
    if key is not None:
        (stored,) = context.cache.get_many([key])
        hit = cached_response(context, key, stored, request, started, DisaggOptimizeResponse)
        if hit is not None:
            return hit
    searched = _search(context, scenario, space, progress)
    response = _response(request, scenario, space, searched, started, progress)
    if key is not None:
        context.cache.set_many({key: response.model_dump(mode="json")})
    return response


def _response(
    request: OptimizeRequest,
    scenario: Scenario,
    space: DisaggSearchSpace,
    searched: _Searched,
    started: float,
    progress: Callable[[str], None] | None,
) -> DisaggOptimizeResponse:
    """The answer: the ranked rows (the top ``top_k``), the probes if asked for, every layout no
    configuration can use with the reason, what the search cost."""
    result, data, factory = searched.result, scenario.spec, searched.factory
    rows = [out for out in (_row_out(row) for row in result.rows) if out is not None]
    infeasible = [
        InfeasibleLayout(role=role, parallel=label, reason=why)
        for role, label, why in [*searched.refused, *result.infeasible]
    ]
    best = rows[0] if rows else None
    reason = None if best is not None else (result.reason or "no feasible configuration")
    if progress is not None:
        progress(f"done: {result.evaluated} configurations, {len(result.probes)} simulations")
    return DisaggOptimizeResponse(
        input=request,
        engine=scenario.deployment.profile.to_dict(),
        best=best,
        rows=rows[: space.top_k],
        probes=[_probe_out(p) for p in result.probes] if space.include_probes else [],
        infeasible=infeasible,
        reason=reason,
        ttft_limit_given=data.ttft_limit_ms is not None,
        notice=_ttft_notice(best) if data.ttft_limit_ms is None else None,
        first_token=searched.first_token,
        max_batched_tokens=data.max_batched_tokens,
        effective_input_length=data.effective_input_length,
        prefill_num_chunks=data.prefill_num_chunks,
        search=DisaggSearchOut(
            prefill_layouts=searched.prefill_layouts,
            decode_layouts=searched.decode_layouts,
            configurations=result.configurations,
            evaluated=result.evaluated,
            simulations=len(result.probes),
        ),
        stats=RunStats(
            elapsed_ms=(time.perf_counter() - started) * 1e3,
            forward_evaluations=factory.usage.computed,
            shapes=factory.shapes,
            layouts=searched.layouts,
            probes=len(result.probes),
            cache=factory.counters(),
        ),
    )


def _ttft_notice(best: DisaggRowOut | None) -> str:
    reached = f" (the best reaches TTFT {best.ttft_ms:.0f} ms)" if best is not None else ""
    return (
        "ttft_limit_ms is not given: TTFT is unbounded, so each configuration's clients grow "
        f"until its pools hold all they can and requests queue{reached}; give ttft_limit_ms to "
        "size the deployment for latency"
    )


def _workers_out(
    layout: ParallelLayout, workers: int, utilisation: float, wait_ms: float
) -> DisaggWorkersOut:
    return DisaggWorkersOut(
        workers=workers,
        tp_size=layout.tp,
        dp_size=layout.dp,
        ep_size=layout.ep,
        parallel=layout.label,
        devices_per_worker=layout.num_devices,
        devices=workers * layout.num_devices,
        utilisation=utilisation,
        wait_ms=wait_ms,
    )


def _row_out(row: DisaggRow) -> DisaggRowOut | None:
    """A ranked row (``None`` if a number is not finite: such a row is not an answer)."""
    config, r = row.config, row.result
    out = DisaggRowOut(
        prefill=_workers_out(
            config.prefill, config.prefill_workers, r.prefill_utilisation, r.prefill_queue_ms
        ),
        decode=_workers_out(
            config.decode, config.decode_workers, r.decode_utilisation, r.decode_wait_ms
        ),
        num_devices=config.num_devices,
        pd_split=pd_split_text(
            config.prefill_workers,
            config.decode_workers,
            config.prefill_devices,
            config.decode_devices,
        ),
        binding_pool=r.binding_pool,
        concurrency=row.concurrency,
        ttft_ms=r.ttft_ms,
        tpot_ms=r.tpot_ms,
        e2e_ms=r.e2e_ms,
        transfer_ms=r.transfer_ms,
        output_throughput=row.throughput_tokens_s,
        throughput_per_device=row.throughput_per_device,
        request_throughput=row.request_throughput_s,
        copies=row.copies,
    )
    return None if non_finite_paths(out.model_dump()) else out


def _probe_out(probe: DisaggProbe) -> DisaggProbeOut:
    config, r = probe.config, probe.result
    return DisaggProbeOut(
        pd_split=pd_split_text(
            config.prefill_workers,
            config.decode_workers,
            config.prefill_devices,
            config.decode_devices,
        ),
        prefill_parallel=config.prefill.label,
        decode_parallel=config.decode.label,
        concurrency=probe.concurrency,
        feasible=probe.feasible,
        reason=probe.reason,
        ttft_ms=r.ttft_ms,
        tpot_ms=r.tpot_ms,
        output_throughput=r.throughput_tokens_s,
        throughput_per_device=probe.throughput_per_device,
    )
