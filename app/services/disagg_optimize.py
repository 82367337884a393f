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

from app.core import limits
from app.core.errors import InvalidParameterError
from app.core.limits import DEFAULT_MAX_WORKERS
from app.core.optimizer import enumerate_layouts
from app.core.optimizer.disagg_search import (
    DisaggProbe,
    DisaggRow,
    DisaggSearchSettings,
    PoolOption,
    optimize_disagg,
)
from app.core.parallel import ParallelLayout
from app.core.profiles import EngineProfile
from app.core.spec import WorkloadSpec
from app.core.workload import ranks_are_coupled
from app.core.workload.disagg_serving import KvTransfer, Pool
from app.core.workload.disagg_setup import FIRST_TOKEN_RULE, PoolWorker, tier_kv_transfer
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
from app.services.cost_model import ModelFactory
from app.services.disagg_simulate import pd_split_text
from app.services.finite import non_finite_paths
from app.services.resolve import (
    ResolvedDeployment,
    check_inline_parts,
    resolve_deployment,
    resolved_echo,
)
from app.services.response_cache import cached_response, optimize_key
from app.services.sizing import (
    check_closed_loop_size,
    check_simulation_size,
    with_engine_defaults,
    workload_spec,
)

if TYPE_CHECKING:
    from app.services.context import ServiceContext

#: Fields of the other modes that mean nothing to mode disagg: given with a value other than
#: the schema's default, they are a 422 naming the field, and why.
_OTHER_MODES_ONLY = {
    "serving_overhead_ms": "prefill instances' fixed TTFT overhead of disagg_prefill / pd_ratio",
    "force_simulation": "the disaggregated closed loop always runs in time",
    "calibration": "a calibration is fitted on aggregated runs",
    "scheduler": "prefill jobs and decode steps run in separate pools; engine_options."
    "max_num_seqs sets the decode running cap",
}


def _check_fields(request: OptimizeRequest) -> None:
    """What mode disagg refuses: another workload or window, the other modes' options."""
    if request.workload not in (None, "closed_loop"):
        raise InvalidParameterError(
            "workload",
            request.workload,
            "'closed_loop' (or omitted) for mode 'disagg' (clients over the whole deployment)",
        )
    if request.window != "benchmark":
        raise InvalidParameterError(
            "window", request.window, "'benchmark' for mode 'disagg' (every request counts)"
        )
    if request.num_devices < 2:
        raise InvalidParameterError(
            "num_devices",
            request.num_devices,
            ">= 2 for mode 'disagg' (a prefill worker and a decode worker)",
        )
    defaults = OptimizeRequest.model_fields
    for name, why in _OTHER_MODES_ONLY.items():
        value = getattr(request, name)
        default = defaults[name].get_default(call_default_factory=True)
        if name in request.model_fields_set and value != default:
            shown = request.scheduler.name if name == "scheduler" else value
            raise InvalidParameterError(name, shown, f"omitted for mode 'disagg' ({why})")


def _worker_sizes(request: OptimizeRequest, pool: Pool) -> list[int]:
    """One pool's worker sizes: the fixed one (which must leave room for the other pool), or
    every power of two that does."""
    fixed = getattr(request, f"{pool}_devices_per_instance")
    other = "decode" if pool == "prefill" else "prefill"
    other_fixed = getattr(request, f"{other}_devices_per_instance")
    # a fixed prefill size leaves room for one decode device, a decode size for the prefill
    # worker (so two fixed sizes over the budget name the decode one); free sizes for the
    # other pool's fixed worker
    checked = pool == "decode" or fixed is None
    other_size = (other_fixed or 1) if checked else 1
    room = request.num_devices - other_size
    if fixed is not None:
        if fixed > room:
            raise InvalidParameterError(
                f"{pool}_devices_per_instance",
                fixed,
                f"<= num_devices - one {other} worker = {request.num_devices} - {other_size} = "
                f"{room} (a deployment holds both pools)",
            )
        return [fixed]
    return [size for size in (1 << i for i in range(room.bit_length())) if size <= room]


def _pool_layouts(request: OptimizeRequest, pool: Pool) -> list[ParallelLayout]:
    """Every layout of every worker size of the pool, with the search sizes that fit it; a
    fixed size no given size divides is a 422 naming the size list."""
    layouts: list[ParallelLayout] = []
    fixed = getattr(request, f"{pool}_devices_per_instance") is not None
    for size in _worker_sizes(request, pool):
        fits = {
            name: None if given is None else [s for s in given if size % s == 0]
            for name, given in (("tp_sizes", request.tp_sizes), ("ep_sizes", request.ep_sizes))
        }
        empty = [name for name, sizes in fits.items() if sizes == []]
        if empty:
            if fixed:
                raise InvalidParameterError(
                    empty[0],
                    getattr(request, empty[0]),
                    f"at least one divisor of {pool}_devices_per_instance={size}",
                )
            continue
        layouts.extend(enumerate_layouts(size, fits["tp_sizes"], fits["ep_sizes"]))
    if len(layouts) > limits.MAX_LAYOUTS:
        raise InvalidParameterError(
            f"{pool}_devices_per_instance",
            getattr(request, f"{pool}_devices_per_instance"),
            f"a search of at most {limits.MAX_LAYOUTS} {pool} worker layouts (here "
            f"{len(layouts)}): fix the worker size or give fewer tp_sizes / ep_sizes",
        )
    return layouts


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


def searched_request(request: OptimizeRequest) -> OptimizeRequest:
    """The request a disaggregated search runs: closed loop, the default worker bound filled
    in."""
    return request.model_copy(
        update={
            "workload": "closed_loop",
            "max_workers": request.max_workers or DEFAULT_MAX_WORKERS,
        }
    )


@dataclass(frozen=True, slots=True)
class DisaggSearch:
    """A disaggregated search resolved: its echo (what runs, and the response's key), the
    engine profile, the workload, each pool's layouts, the client bound and the catalog
    objects."""

    request: OptimizeRequest
    profile: EngineProfile
    data: WorkloadSpec
    layouts: dict[Pool, list[ParallelLayout]]
    max_clients: int
    deployment: ResolvedDeployment


def resolve_disagg_search(request: OptimizeRequest, *, allow_paths: bool = False) -> DisaggSearch:
    """Check and resolve a mode disagg request once: the search below reads only this."""
    check_inline_parts(request)
    _check_fields(request)
    request, profile = with_engine_defaults(searched_request(request))
    layouts: dict[Pool, list[ParallelLayout]] = {
        pool: _pool_layouts(request, pool) for pool in ("prefill", "decode")
    }
    data = workload_spec(request, request.num_devices, profile)
    check_simulation_size(data, 1, "max_batch_size")  # the prefill chunk bound
    per_client = request.requests_per_client * data.prefill_num_chunks
    # The wire's bound on max_batch_size is the search's too, so the echo can be re-sent.
    max_clients = min(
        limits.MAX_SEARCH_BATCH_SIZE,
        max(1, limits.MAX_CLOSED_LOOP_REQUEST_CHUNKS // per_client),
    )
    if "max_batch_size" in request.model_fields_set:
        check_closed_loop_size(
            data, request.max_batch_size, request.requests_per_client, "max_batch_size"
        )
        max_clients = request.max_batch_size
    deployment = resolve_deployment(request, allow_paths=allow_paths, profile=profile)
    echo = resolved_echo(request, deployment, None, max_batch_size=max_clients)
    return DisaggSearch(
        request=echo,
        profile=profile,
        data=data,
        layouts=layouts,
        max_clients=max_clients,
        deployment=deployment,
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
    search = resolve_disagg_search(request, allow_paths=allow_paths)
    request, profile, data = search.request, search.profile, search.data
    p_layouts, d_layouts = search.layouts["prefill"], search.layouts["decode"]
    max_clients, deployment = search.max_clients, search.deployment
    key = optimize_key(request) if context.settings.response_cache and not allow_paths else None
    if key is not None:
        (stored,) = context.cache.get_many([key])
        hit = cached_response(context, key, stored, request, started, DisaggOptimizeResponse)
        if hit is not None:
            return hit
    factory = ModelFactory(context, deployment)
    usable_p, rejected_p = _usable(factory, "prefill", p_layouts)
    usable_d, rejected_d = _usable(factory, "decode", d_layouts)
    if progress is not None:
        progress(f"disagg: {len(usable_p)} prefill and {len(usable_d)} decode worker layouts")
    device = deployment.device
    isl, osl, budget = data.input_length, data.output_length, data.max_batched_tokens
    models = {layout: factory(layout) for layout in dict.fromkeys([*usable_p, *usable_d])}

    def option(layout: ParallelLayout, context_len: int) -> PoolOption:
        model = models[layout]
        return PoolOption(
            layout=layout,
            worker=PoolWorker(
                workers=1,
                ranks=layout.dp,
                coupled=ranks_are_coupled(deployment.model.is_moe, layout),
                latency=model,
                kv_requests=model.kv_capacity_requests(context_len, budget),
                label=f"{layout.label} of {device.name}",
            ),
        )

    transfers: dict[tuple[ParallelLayout, str], KvTransfer] = {}

    def transfer(layout: ParallelLayout, devices: int) -> KvTransfer:
        tier = device.tier_for(devices)
        found = transfers.get((layout, tier.name))
        if found is None:
            kv_bytes = factory.serving(layout).runner.kv_cache_bytes(1, isl)
            found = transfers[(layout, tier.name)] = tier_kv_transfer(tier, kv_bytes)
        return found

    first_token = FIRST_TOKEN_RULE.get(profile.name, "decode_step")
    result = optimize_disagg(
        data,
        [option(layout, isl) for layout in usable_p],
        [option(layout, isl + osl) for layout in usable_d],
        DisaggSearchSettings(
            num_devices=request.num_devices,
            transfer=transfer,
            max_workers=request.max_workers or DEFAULT_MAX_WORKERS,
            max_concurrency=max_clients,
            requests_per_client=request.requests_per_client,
            running_cap=profile.running_cap(device.hbm_capacity_gb, device.name),
            first_token=first_token,
        ),
    )
    factory.flush()  # the request's one pipelined cache write
    rows = [out for out in (_row_out(row) for row in result.rows) if out is not None]
    refused: list[tuple[Pool, str, str]] = [
        *(("prefill", label, why) for label, why in rejected_p.items()),
        *(("decode", label, why) for label, why in rejected_d.items()),
    ]
    infeasible = [
        InfeasibleLayout(role=role, parallel=label, reason=why)
        for role, label, why in [*refused, *result.infeasible]
    ]
    best = rows[0] if rows else None
    reason = None if best is not None else (result.reason or "no feasible configuration")
    if progress is not None:
        progress(f"done: {result.evaluated} configurations, {len(result.probes)} simulations")
    response = DisaggOptimizeResponse(
        input=request,
        engine=deployment.profile.to_dict(),
        best=best,
        rows=rows[: request.top_k],
        probes=[_probe_out(p) for p in result.probes] if request.include_probes else [],
        infeasible=infeasible,
        reason=reason,
        ttft_limit_given=data.ttft_limit_ms is not None,
        notice=_ttft_notice(best) if data.ttft_limit_ms is None else None,
        first_token=first_token,
        max_batched_tokens=budget,
        effective_input_length=data.effective_input_length,
        prefill_num_chunks=data.prefill_num_chunks,
        search=DisaggSearchOut(
            prefill_layouts=len(usable_p),
            decode_layouts=len(usable_d),
            configurations=result.configurations,
            evaluated=result.evaluated,
            simulations=len(result.probes),
        ),
        stats=RunStats(
            elapsed_ms=(time.perf_counter() - started) * 1e3,
            forward_evaluations=factory.usage.computed,
            shapes=factory.shapes,
            layouts=len(models),
            probes=len(result.probes),
            cache=factory.counters(),
        ),
    )
    if key is not None:
        context.cache.set_many({key: response.model_dump(mode="json")})
    return response


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
