"""``POST /v1/optimize``: the throughput search over parallel layouts and batch sizes."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from app.cache import response_key
from app.core import limits
from app.core.calibration import answer_notice, at_risk
from app.core.errors import InvalidParameterError, SearchLimitError
from app.core.optimizer import (
    OptimizeResult,
    PdRatioResult,
    Probe,
    ResultRow,
    enumerate_layouts,
    optimize_agg,
    optimize_disagg_decode,
    optimize_disagg_prefill,
    optimize_pd_ratio,
    pareto_front,
)
from app.core.parallel import ParallelLayout
from app.core.runner import RUNNER_MODEL_VERSION
from app.core.scenario import Scenario, SearchSpace
from app.core.scheduler import Scheduler
from app.core.spec import WorkloadSpec
from app.core.workload import ranks_are_coupled
from app.models.optimize import (
    DisaggOptimizeResponse,
    InfeasibleLayout,
    InstanceSplitOut,
    OptimizeRequest,
    OptimizeResponse,
    ParetoPointOut,
    PdRatioOut,
    ProbeOut,
    ResultRowOut,
    Role,
    RunStats,
)
from app.services.advice import memory_advice
from app.services.calibration import (
    uncertainty,
)
from app.services.context import ServiceContext
from app.services.cost_model import ModelFactory
from app.services.finite import non_finite_paths, reason_for
from app.services.resolve import (
    ResolvedDeployment,
)
from app.services.response_cache import cached_response, optimize_key
from app.services.scenario import resolve_disagg_search, resolve_search


def _fitting(
    field: str, sizes: Sequence[int] | None, num_devices: int, per_instance: str
) -> Sequence[int] | None:
    """The search sizes that divide one PD instance's ``num_devices`` (all given: a 422)."""
    if sizes is None:
        return None
    fitting = [size for size in sizes if num_devices % size == 0]
    if not fitting:
        raise InvalidParameterError(
            field, list(sizes), f"at least one divisor of {per_instance}={num_devices}"
        )
    return fitting


def _layouts(
    num_devices: int,
    tp_sizes: Sequence[int] | None,
    ep_sizes: Sequence[int] | None,
    *,
    per_instance: str | None = None,
) -> tuple[ParallelLayout, ...]:
    """Layouts of ``num_devices``; for a PD instance, search sizes that do not fit are dropped."""
    if per_instance is not None:
        tp_sizes = _fitting("tp_sizes", tp_sizes, num_devices, per_instance)
        ep_sizes = _fitting("ep_sizes", ep_sizes, num_devices, per_instance)
    layouts = enumerate_layouts(num_devices, tp_sizes, ep_sizes)
    if len(layouts) > limits.MAX_LAYOUTS:
        raise SearchLimitError(
            f"{len(layouts)} parallel layouts requested (tp_sizes x ep_sizes); "
            f"at most {limits.MAX_LAYOUTS} per request"
        )
    return layouts


Limits = tuple[float | None, float | None]


class _Uncertain(TypedDict):
    ttft_ms_interval: tuple[float, float] | None
    tpot_ms_interval: tuple[float, float] | None
    throughput_interval: tuple[float, float]
    sla_confidence: float | None


def _limits(spec: WorkloadSpec) -> Limits:
    return spec.ttft_limit_ms, spec.tpot_limit_ms


def _intervals(
    deployment: ResolvedDeployment,
    shape: tuple[int, int, int],
    ttft_ms: float | None,
    tpot_ms: float | None,
    throughput: float,
    limits: Limits = (None, None),
) -> _Uncertain:
    """The 80 % intervals of one evaluated point, (input, output, concurrency) ``shape`` (a
    side without TTFT or TPOT has no interval for it), and the share of them inside
    ``limits`` (TTFT, TPOT)."""
    input_length, output_length, concurrency = shape
    sure = uncertainty(
        deployment,
        input_length=input_length,
        output_length=output_length,
        concurrency=concurrency,
        ttft_ms=ttft_ms or 0.0,
        tpot_ms=tpot_ms or 0.0,
        throughput=throughput,
    ).intervals
    confidence = sure.sla_confidence(
        ttft_limit_ms=None if ttft_ms is None else limits[0],
        tpot_limit_ms=None if tpot_ms is None else limits[1],
    )
    return {
        "ttft_ms_interval": None if ttft_ms is None else sure.ttft_ms,
        "tpot_ms_interval": None if tpot_ms is None else sure.tpot_ms,
        "throughput_interval": sure.throughput,
        "sla_confidence": confidence,
    }


def _row_out(
    row: ResultRow, role: Role, deployment: ResolvedDeployment, limits: Limits = (None, None)
) -> ResultRowOut:
    """A ranked row with its 80 % intervals (a side without TTFT or TPOT has none for it)."""
    return ResultRowOut(
        **_intervals(
            deployment,
            (row.input_length, row.output_length, row.concurrency),
            row.ttft_ms,
            row.tpot_ms,
            row.throughput_tokens_s,
            limits,
        ),
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


def _probe_out(
    probe: Probe, role: Role, deployment: ResolvedDeployment, spec: WorkloadSpec
) -> ProbeOut:
    """An evaluated point with its 80 % intervals, as a ranked row has them."""
    layout = probe.layout
    return ProbeOut(
        **_intervals(
            deployment,
            (spec.input_length, spec.output_length, probe.concurrency),
            probe.ttft_ms,
            probe.tpot_ms,
            probe.throughput_tokens_s,
            _limits(spec),
        ),
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


def _pareto(sections: Sequence[_Section]) -> list[ParetoPointOut]:
    """The front over every section's probes (only probes with a decode step take part)."""
    roles = {id(p): s.role for s in sections for p in s.result.probes}
    return [
        ParetoPointOut(
            role=roles[id(point.probe)],
            parallel=point.probe.layout.label,
            tp=point.probe.layout.tp,
            dp=point.probe.layout.dp,
            ep=point.probe.layout.ep,
            pp=point.probe.layout.pp,
            num_devices=point.probe.layout.num_devices,
            batch_size=point.probe.batch_size,
            concurrency=point.probe.concurrency,
            user_tokens_s=point.user_tokens_s,
            throughput_per_device=point.device_tokens_s,
            throughput_tokens_s=point.probe.throughput_tokens_s,
            ttft_ms=point.probe.ttft_ms,
            tpot_ms=point.tpot_ms,
            feasible=point.probe.feasible,
            reason=point.probe.reason,
        )
        for point in pareto_front(p for s in sections for p in s.result.probes)
    ]


def _infeasible(role: Role, reasons: Mapping[str, str]) -> list[InfeasibleLayout]:
    return [InfeasibleLayout(role=role, parallel=k, reason=v) for k, v in reasons.items()]


def _empty_result(mode: str) -> OptimizeResult:
    return OptimizeResult(mode=mode, rows=(), probes=(), infeasible={}, forward_evaluations=0)


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
    result = run(usable) if usable else _empty_result(mode)
    return _Section(role=role, result=result, rejected=rejected)


@dataclass(slots=True)
class _Search:
    """One optimize scenario while it runs: its echo (``request``), its spec and search space,
    searcher, sections and progress notes."""

    request: OptimizeRequest
    scenario: Scenario
    spec: WorkloadSpec
    factory: ModelFactory
    progress: Callable[[str], None] | None
    sections: list[_Section] = field(default_factory=list)
    pd: PdRatioOut | None = None
    reason: str | None = None

    @property
    def space(self) -> SearchSpace:
        assert isinstance(self.scenario.search, SearchSpace)  # an aggregated-family search
        return self.scenario.search

    @property
    def max_batch(self) -> int:
        return self.space.max_batch_size

    def note(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)


def _report_layouts(factory: ModelFactory, progress: Callable[[str], None] | None) -> None:
    if progress is None:
        return
    searched = 0

    def on_layout(layout: ParallelLayout) -> None:
        nonlocal searched
        searched += 1
        progress(f"searching layout {searched}: {layout.label}")

    factory.on_layout = on_layout


def _pd_ratio_out(pd_result: PdRatioResult, deployment: ResolvedDeployment) -> PdRatioOut:
    split = pd_result.split
    return PdRatioOut(
        p_qps=pd_result.p_qps,
        d_qps=pd_result.d_qps,
        pd_ratio=pd_result.pd_ratio,
        split=InstanceSplitOut(
            prefill_instances=split.prefill_instances,
            decode_instances=split.decode_instances,
            devices_used=split.devices_used,
            balanced_qps=split.balanced_qps,
        )
        if split
        else None,
        prefill_row=(
            _row_out(pd_result.prefill_row, "prefill", deployment)
            if pd_result.prefill_row
            else None
        ),
        decode_row=(
            _row_out(pd_result.decode_row, "decode", deployment) if pd_result.decode_row else None
        ),
        output_throughput=pd_result.throughput_tokens_s,
        throughput_per_device=pd_result.throughput_per_device,
        reason=pd_result.reason,
        binding_pool=pd_result.binding_pool,
        pd_split=_pd_split(pd_result),
    )


def _pd_split(pd_result: PdRatioResult) -> str | None:
    """``1P:1D (4:8 devices)`` of a balanced split."""
    from app.services.disagg_simulate import pd_split_text

    split, p_row, d_row = pd_result.split, pd_result.prefill_row, pd_result.decode_row
    if split is None or p_row is None or d_row is None:
        return None
    n_p, n_d = split.prefill_instances, split.decode_instances
    return pd_split_text(n_p, n_d, n_p * p_row.num_devices, n_d * d_row.num_devices)


#: The modes whose prefill instances are sized by TTFT (a search for throughput alone grows the
#: prefill batch to the cap: every prompt of the batch waits for the whole batch).
_TTFT_SIZED = ("disagg_prefill", "pd_ratio")


def _readable_best(
    run: _Search, rows: list[ResultRowOut], reason: str | None
) -> tuple[ResultRowOut | None, str | None]:
    """``best`` of a disaggregated mode, or ``None`` and the reason: pd_ratio's is the binding
    side's row; without ``ttft_limit_ms`` a prefill-sizing mode names the missing limit
    instead of an unbounded prefill batch."""
    mode = run.space.mode
    best = rows[0] if rows and mode != "pd_ratio" else None
    pd = run.pd
    if mode == "pd_ratio" and pd is not None and pd.split is not None:
        best = pd.prefill_row if pd.binding_pool == "prefill" else pd.decode_row
    if mode in _TTFT_SIZED and run.spec.ttft_limit_ms is None:
        prefill = [r for r in rows if r.role == "prefill"]
        if prefill:
            top = max(prefill, key=lambda r: r.throughput_tokens_s)
            return None, (
                "ttft_limit_ms is not given: prefill instances are sized by their TTFT, and "
                f"without a limit the batch only grows with throughput (here {top.parallel} at "
                f"{top.concurrency} requests, TTFT {top.ttft_ms or 0.0:.0f} ms); give "
                "ttft_limit_ms"
            )
    return best, reason


def _run_pd_ratio(run: _Search) -> None:
    """Prefill and decode instances searched separately, then balanced into one deployment."""
    space, factory = run.space, run.factory
    p_devices = space.prefill_devices_per_instance or max(1, space.num_devices // 2)
    d_devices = space.decode_devices_per_instance or max(1, space.num_devices // 2)
    p_layouts, p_rejected = factory.usable_layouts(
        _layouts(
            p_devices,
            space.tp_sizes,
            space.ep_sizes,
            per_instance="prefill_devices_per_instance",
        )
    )
    d_layouts, d_rejected = factory.usable_layouts(
        _layouts(
            d_devices,
            space.tp_sizes,
            space.ep_sizes,
            per_instance="decode_devices_per_instance",
        )
    )
    run.note(f"pd_ratio: {len(p_layouts)} prefill and {len(d_layouts)} decode layouts")
    if not (p_layouts and d_layouts):
        empty = _empty_result(space.mode)
        run.sections.append(_Section("prefill", empty, p_rejected))
        run.sections.append(_Section("decode", empty, d_rejected))
        run.reason = "no parallel layout the model supports"
        return
    label = factory.deployment.label
    pd_result = optimize_pd_ratio(
        run.spec,
        p_layouts,
        d_layouts,
        factory,
        factory,
        label,
        label,
        device_budget=space.num_devices,
        serving_overhead_ms=space.serving_overhead_ms,
        max_batch_size=run.max_batch,
    )
    run.sections.append(_Section("prefill", pd_result.prefill, p_rejected))
    run.sections.append(_Section("decode", pd_result.decode, d_rejected))
    run.pd = _pd_ratio_out(pd_result, run.factory.deployment)
    run.reason = pd_result.reason


def _run_single(run: _Search, scheduler: Scheduler | None) -> None:
    """One role (agg, disagg_prefill or disagg_decode) over every layout of the devices."""
    space, factory, spec, max_batch = run.space, run.factory, run.spec, run.max_batch
    serving = run.scenario.serving
    label = factory.deployment.label
    mode = space.mode
    layouts = _layouts(space.num_devices, space.tp_sizes, space.ep_sizes)
    run.note(f"{mode}: searching {len(layouts)} layouts")
    workload = serving.workload
    if mode == "agg":
        section = _search(
            factory,
            "agg",
            layouts,
            lambda ls: optimize_agg(
                spec,
                ls,
                factory,
                label,
                scheduler=scheduler,
                force_simulation=serving.force_simulation,
                max_batch_size=max_batch,
                workload=workload,
                window=serving.window,
                requests_per_client=serving.requests_per_client,
                coupled=lambda layout: ranks_are_coupled(factory.deployment.model.is_moe, layout),
                plans=factory.context.plans,
            ),
            mode,
        )
    elif mode == "disagg_prefill":
        section = _search(
            factory,
            "prefill",
            layouts,
            lambda ls: optimize_disagg_prefill(
                spec,
                ls,
                factory,
                label,
                serving_overhead_ms=space.serving_overhead_ms,
                max_batch_size=max_batch,
            ),
            mode,
        )
    else:
        section = _search(
            factory,
            "decode",
            layouts,
            lambda ls: optimize_disagg_decode(spec, ls, factory, label, max_batch_size=max_batch),
            mode,
        )
    run.sections.append(section)


def _response(run: _Search, started: float) -> OptimizeResponse:
    """The response body of a finished search (rows ranked, top_k kept, probes if asked)."""
    space, factory, sections = run.space, run.factory, run.sections
    mode = space.mode
    rows: list[ResultRowOut] = []
    probes: list[ProbeOut] = []
    infeasible: list[InfeasibleLayout] = []
    for section in sections:
        rows.extend(
            _row_out(row, section.role, factory.deployment, _limits(run.spec))
            for row in section.result.rows
        )
        if space.include_probes:
            probes.extend(
                _probe_out(p, section.role, factory.deployment, run.spec)
                for p in section.result.probes
            )
        infeasible.extend(_infeasible(section.role, section.rejected))
        infeasible.extend(_infeasible(section.role, section.result.infeasible))
    finite_rows = []
    for row in rows:  # a row with a non-finite number is infeasible, with the reason
        paths = non_finite_paths(row.model_dump())
        if paths:
            infeasible.append(
                InfeasibleLayout(role=row.role, parallel=row.parallel, reason=reason_for(paths))
            )
        else:
            finite_rows.append(row)
    rows = finite_rows
    if mode != "pd_ratio":
        rows = rows[: space.top_k]
    best, reason = _readable_best(run, rows, run.reason)
    suggestions: list[str] = []
    if mode != "pd_ratio" and best is None and reason is None:
        reason = "no feasible configuration: " + (
            "; ".join(f"{i.parallel}: {i.reason}" for i in infeasible) or "no layout"
        )
        layouts = {p.layout.label: p.layout for s in sections for p in s.result.probes}
        memory = [layouts[i.parallel] for i in infeasible if i.reason.startswith("memory")]
        if memory and len(memory) == len(infeasible):
            # Every layout ran out of memory: the one with the most devices per replica binds.
            widest = max(memory, key=lambda layout: (layout.tp * layout.pp, layout.ep))
            advice = memory_advice(factory.deployment, widest, run.spec)
            reason = f"no feasible configuration: {widest.label}: {advice.reason}"
            suggestions = list(advice.suggestions)
    sure = uncertainty(
        factory.deployment,
        input_length=run.spec.input_length,
        output_length=run.spec.output_length,
        concurrency=None,
        ttft_ms=0.0,
        tpot_ms=0.0,
        throughput=0.0,
    )
    risky = [f"{r.role} {r.parallel}" for r in rows if at_risk(r.sla_confidence)]
    return OptimizeResponse(
        input=run.request,
        engine=factory.deployment.profile.to_dict(),
        calibration=sure.calibration,
        notice=answer_notice(sure.intervals, risky),
        mode=mode,
        best=best,
        rows=rows,
        probes=probes,
        pareto=_pareto(sections),
        infeasible=infeasible,
        pd_ratio=run.pd,
        reason=reason,
        suggestions=suggestions,
        stats=RunStats(
            elapsed_ms=(time.perf_counter() - started) * 1e3,
            forward_evaluations=factory.usage.computed,
            shapes=factory.shapes,
            layouts=sum(len({p.layout for p in s.result.probes}) for s in sections),
            probes=sum(len(s.result.probes) for s in sections),
            cache=factory.counters(),
        ),
    )


def cached_optimize(
    context: ServiceContext, request: OptimizeRequest
) -> OptimizeResponse | DisaggOptimizeResponse | None:
    """The response cache's answer to ``request`` alone, no search (``None``: not cached, or
    the cache is off). A worker whose searches run in a child process asks it first, so a
    repeated search never queues behind another one's computation (app/api/planning.py)."""
    if not context.settings.response_cache:
        return None
    started = time.perf_counter()
    if request.mode == "disagg":
        keyed = resolve_disagg_search(request).echo
        key = optimize_key(keyed)
        (stored,) = context.cache.get_many([key])
        return cached_response(context, key, stored, keyed, started, DisaggOptimizeResponse)
    keyed = resolve_search(context, request).echo
    key = optimize_key(keyed)
    (stored,) = context.cache.get_many([key])
    return cached_response(context, key, stored, keyed, started, OptimizeResponse)


def optimize(
    context: ServiceContext,
    request: OptimizeRequest,
    *,
    allow_paths: bool = False,
    progress: Callable[[str], None] | None = None,
) -> OptimizeResponse | DisaggOptimizeResponse:
    """The throughput search; identical requests are answered from the response cache.

    One :class:`WorkloadSpec` is built for the request (the searched instance's devices) and
    passed whole to the optimizer, so the chunk plan is derived once. Mode disagg searches
    whole disaggregated deployments (:mod:`app.services.disagg_optimize`).
    """
    if request.mode == "disagg":  # its own search, loaded when asked for
        from app.services.disagg_optimize import optimize_disagg_deployment

        return optimize_disagg_deployment(
            context, request, allow_paths=allow_paths, progress=progress
        )
    started = time.perf_counter()
    resolved = resolve_search(context, request, allow_paths=allow_paths)
    return evaluate_search(
        context,
        resolved.scenario,
        resolved.echo,
        use_response_cache=context.settings.response_cache and not allow_paths,
        progress=progress,
        started=started,
    )


def evaluate_search(
    context: ServiceContext,
    scenario: Scenario,
    echo: OptimizeRequest,
    *,
    use_response_cache: bool,
    progress: Callable[[str], None] | None = None,
    started: float,
) -> OptimizeResponse:
    """An aggregated-family search scenario's answer (``echo`` is its ``input`` and its
    response-cache key): the cached answer, or the search over its layouts and batch sizes."""
    request, spec = echo, scenario.spec
    # response_key folds in the application version, this the runner's: an upgrade never
    # serves an older answer.
    key = optimize_key(request) if use_response_cache else None
    # The search's manifest: every forward key an identical search (top_k and include_probes
    # aside) used, so a warm search reads all of them in one MGET.
    search = request.model_dump_json(exclude={"top_k", "include_probes"})
    manifest_key = response_key("manifest", f"{RUNNER_MODEL_VERSION}|{search}")
    first_read = context.cache.get_many([manifest_key] if key is None else [manifest_key, key])
    if key is not None:
        hit = cached_response(context, key, first_read[1], request, started, OptimizeResponse)
        if hit is not None:
            return hit

    factory = ModelFactory(context, scenario.deployment)
    factory.usage.round_trips += 1  # the read above
    factory.preload(first_read[0])
    _report_layouts(factory, progress)
    run = _Search(request=request, scenario=scenario, spec=spec, factory=factory, progress=progress)
    if run.space.mode == "pd_ratio":
        _run_pd_ratio(run)
    else:
        scheduler = scenario.scheduler
        _run_single(run, None if scheduler is None else scheduler.build())
    new_manifest = factory.manifest()
    factory.flush({manifest_key: new_manifest} if new_manifest else None)
    response = _response(run, started)
    run.note(f"done: {response.stats.probes} probes, {factory.usage.computed} forwards computed")
    if key is not None:
        context.cache.set_many({key: response.model_dump(mode="json")})
    return response
