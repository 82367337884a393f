"""Which fields a disaggregated request takes (``POST /v1/simulate`` and ``POST /v1/optimize``
with ``mode: "disagg"``), its pools' layouts and devices: the checks the resolver
(:mod:`app.services.scenario`) runs, in the order a client sees its errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from app.core import limits
from app.core.errors import InvalidParameterError, UnknownDeviceError, UnsupportedError
from app.core.limits import DEFAULT_MAX_WORKERS, Pool
from app.core.optimizer import enumerate_layouts
from app.core.parallel import ParallelLayout
from app.core.profiles import EngineProfile
from app.core.scenario import PoolLink, ResolvedDeployment
from app.core.workload import DEFAULT_POISSON_REQUESTS
from app.services.resolve import resolve_deployment
from app.services.simulate_fields import check_workload_fields

if TYPE_CHECKING:
    from app.models.optimize import OptimizeRequest
    from app.models.simulate import SimulateRequest

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


def check_simulate_fields(request: SimulateRequest) -> None:
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


def with_pool_defaults(request: SimulateRequest) -> SimulateRequest:
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


def pool_layout(request: SimulateRequest, pool: Pool) -> ParallelLayout:
    """One worker's layout; the runner's complaints name the request's field."""
    sizes = {name: getattr(request, f"{pool}_{name}") for name in _LAYOUT_FIELDS}
    with pool_errors(pool):
        return ParallelLayout(tp=sizes["tp_size"], dp=sizes["dp_size"], ep=sizes["ep_size"])


@contextmanager
def pool_errors(pool: Pool) -> Iterator[None]:
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


def check_devices(request: SimulateRequest, prefill: int, decode: int) -> int:
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


def decode_deployment(
    request: SimulateRequest,
    deployment: ResolvedDeployment,
    profile: EngineProfile,
    *,
    allow_paths: bool,
) -> ResolvedDeployment | None:
    """The decode pool's deployment when ``decode_device`` names another device than the
    prefill pool's (``None``: both pools on ``deployment``'s). Pools on two devices need
    ``pool_link``, the interconnect between them."""
    if request.decode_device is None:
        return None
    try:
        decode = resolve_deployment(
            request.model_copy(update={"device": request.decode_device}),
            allow_paths=allow_paths,
            profile=profile,
        )
    except UnknownDeviceError as exc:
        raise UnknownDeviceError(exc.name, exc.valid, field="decode_device") from exc
    except InvalidParameterError as exc:
        if exc.field != "device":
            raise
        raise InvalidParameterError("decode_device", exc.value, exc.allowed) from exc
    if decode.device == deployment.device:
        return None
    if request.pool_link is None:
        raise InvalidParameterError(
            "pool_link",
            None,
            f"given when the pools run on different devices ({deployment.device.name} "
            f"and {decode.device.name}): the interconnect between them (bandwidth_gb_s per "
            "device, fixed_ms)",
        )
    return decode


def pool_link(request: SimulateRequest) -> PoolLink | None:
    """The request's stated link between the pools (``None``: the interconnect tier)."""
    link = request.pool_link
    if link is None:
        return None
    return PoolLink(name=link.name, bandwidth_gb_s=link.bandwidth_gb_s, fixed_ms=link.fixed_ms)


#: Fields of the other modes that mean nothing to mode disagg: given with a value other than
#: the schema's default, they are a 422 naming the field, and why.
_OTHER_MODES_ONLY = {
    "serving_overhead_ms": "prefill instances' fixed TTFT overhead of disagg_prefill / pd_ratio",
    "force_simulation": "the disaggregated closed loop always runs in time",
    "calibration": "a calibration is fitted on aggregated runs",
    "scheduler": "prefill jobs and decode steps run in separate pools; engine_options."
    "max_num_seqs sets the decode running cap",
}


def check_search_fields(request: OptimizeRequest) -> None:
    """What mode disagg refuses: another workload or window, the other modes' options."""
    from app.models.optimize import OptimizeRequest

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


def pool_layouts(request: OptimizeRequest, pool: Pool) -> list[ParallelLayout]:
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


def searched_request(request: OptimizeRequest) -> OptimizeRequest:
    """The request a disaggregated search runs: closed loop, the default worker bound filled
    in."""
    return request.model_copy(
        update={
            "workload": "closed_loop",
            "max_workers": request.max_workers or DEFAULT_MAX_WORKERS,
        }
    )
