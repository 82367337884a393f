"""Which fields a ``/v1/simulate`` request takes: the device count, the workload's own fields
(an aggregated and a disaggregated simulation both check them) and no pool field in mode agg."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.core import limits
from app.core.errors import InvalidParameterError

if TYPE_CHECKING:  # the wire models load with the first simulate, not with app.services
    from app.models.simulate import SimulateRequest

#: Fields that belong to one workload only: giving them with another one is a 422.
_POISSON_ONLY = ("request_rate", "max_concurrency", "num_requests", "seed")


def with_device_count(request: SimulateRequest) -> SimulateRequest:
    """``num_devices`` given: it must be ``tp_size x dp_size``; without ``dp_size`` (null:
    derived) it sets the replicas to ``num_devices / tp_size``, else to 1. The request comes
    back with ``num_devices`` and ``dp_size`` set (the echo shows the values used)."""
    tp, dp, devices = request.tp_size, request.dp_size, request.num_devices
    if devices is None:
        dp = 1 if dp is None else dp
        return request.model_copy(update={"num_devices": tp * dp, "dp_size": dp})
    if dp is not None:
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


def _schema_default(field: str) -> object:
    """The default ``/openapi.json`` declares for a simulate field."""
    from app.models.simulate import SimulateRequest

    return SimulateRequest.model_fields[field].default


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
            # The schema's own default is accepted (a generated client sends every default).
            if field in given and getattr(request, field) != _schema_default(field):
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
    if "requests_per_client" in given and request.requests_per_client != _schema_default(
        "requests_per_client"
    ):
        raise InvalidParameterError(
            "requests_per_client",
            request.requests_per_client,
            "omitted for workload 'poisson' (num_requests counts its requests)",
        )
    if request.window != "benchmark":
        raise InvalidParameterError(
            "window", request.window, "'benchmark' for workload 'poisson' (every request counts)"
        )


def check_agg_request(request: SimulateRequest) -> None:
    """An aggregated request takes no pool field (a 422 naming the first one given)."""
    for name in _pool_field_names():
        value = getattr(request, name)
        if value is not None:
            raise InvalidParameterError(name, value, "omitted for mode 'agg' (a mode disagg field)")


def _pool_field_names() -> tuple[str, ...]:
    from app.models.simulate import DISAGG_FIELDS

    return DISAGG_FIELDS
