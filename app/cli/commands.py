"""One function per ``chunkwise`` command: a request model from the flags, the service call, a
renderer. pydantic, the wire models and the services are imported inside the commands, so
``chunkwise --help`` and ``serve`` load none of them (and no command loads the HTTP stack)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.cli import emit, render
from app.core.scheduler import DEFAULT_SCHEDULER

if TYPE_CHECKING:
    from pydantic import ValidationError

    from app.core.calibration import CalibrationProfile
    from app.services.context import ServiceContext

#: Simulate flags given to the request only when set: each workload takes its own.
SIMULATE_OPTIONAL = (
    "dp_size",
    "num_devices",
    "concurrency",
    "request_rate",
    "max_concurrency",
    "num_requests",
    "seed",
    # --mode disagg: the two pools
    "mode",
    "prefill_workers",
    "prefill_tp_size",
    "prefill_dp_size",
    "prefill_ep_size",
    "decode_workers",
    "decode_tp_size",
    "decode_dp_size",
    "decode_ep_size",
    "decode_device",
)


#: msmodeling's ``--device A B`` runs one search per device; Chunkwise answers one device.
ONE_DEVICE = (
    "--device takes one device (msmodeling's --device A B comparison is not supported: run "
    "one command per device)"
)


def fail(message: object) -> int:
    """Domain and input errors: one line on stderr (naming the valid choices), exit code 2."""
    print(f"chunkwise: error: {message}", file=sys.stderr)
    return 2


def validation_line(err: ValidationError) -> str:
    """One line from a pydantic ValidationError, with CLI flag names."""
    parts = []
    for item in err.errors():
        field = ".".join(str(p) for p in item.get("loc", ()))
        parts.append(f"--{field.replace('_', '-')}: {item.get('msg', 'invalid')}")
    return "; ".join(parts)


def run_service(call: Callable[[ServiceContext], int]) -> int:
    """Settings from the environment (APP_CACHE_BACKEND / APP_REDIS_URL select the cache), read
    as the service reads them but without importing pydantic-settings (~25 ms of start-up)."""
    import os

    from pydantic import ValidationError

    from app.core.errors import ChunkwiseError
    from app.service_settings import settings_from_environ
    from app.services.context import create_context

    try:
        context = create_context(settings_from_environ(os.environ))
    except ValidationError as err:
        return fail(f"settings: {validation_line(err)}")
    try:
        return int(call(context))
    except ValidationError as err:
        return fail(validation_line(err))
    except ChunkwiseError as err:
        return fail(err)
    finally:
        context.close()


def flatten(values: list[list[Any]] | None) -> list[Any] | None:
    return None if values is None else [v for group in values for v in group]


def given(args: argparse.Namespace, names: tuple[str, ...]) -> dict[str, Any]:
    """The flags among ``names`` that were set (the request model supplies the rest)."""
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


# -- forward, devices, models, validate --------------------------------------------------------
def forward_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The ``ForwardRequest`` of the forward flags (the model's defaults for omitted ones)."""
    return {
        "model": args.model,
        "device": args.device,
        "num_queries": args.num_queries,
        "query_length": args.query_length,
        "context_length": args.context_length,
        "decode": args.decode,
        "num_devices": args.num_devices,
        "tp_size": args.tp_size,
        "ep_size": args.ep_size,
        "pp_size": args.pp_size,
        "num_mtp_tokens": args.num_mtp_tokens,
        "reserved_memory_gb": args.reserved_memory_gb,
        **given(args, ("quantize_linear_action", "quantize_attention_action")),
    }


def cmd_forward(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from app.core.errors import ChunkwiseError
    from app.models.forward import ForwardRequest
    from app.services.forward import run_forward

    try:
        request = ForwardRequest.model_validate(forward_fields(args))
        document = run_forward(request, allow_paths=True).to_dict()
    except ValidationError as err:
        return fail(validation_line(err))
    except ChunkwiseError as err:
        return fail(err)
    if args.format == "json":
        render.dump(document)
    else:
        print(render.forward_table(document))
    return 0


def cmd_devices(args: argparse.Namespace) -> int:
    from app.services.catalog import list_devices

    devices = [d["numbers"] for d in list_devices().model_dump(mode="json")["devices"]]
    if args.format == "json":
        render.dump(devices)
    else:
        print(render.devices_table(devices))
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from app.services.catalog import list_models

    models = [m["architecture"] for m in list_models().model_dump(mode="json")["models"]]
    if args.format == "json":
        render.dump(models)
    else:
        print(render.models_table(models))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from app.core.errors import ChunkwiseError
    from app.services.validate import validate

    if args.kernels is not None and args.replicas is not None:
        return fail("--kernels and --replicas are separate replays; give one")
    if args.kernels is not None:
        return _validate_kernels(args)
    if args.system is not None or args.engine is not None or args.split != "all":
        return fail("--system, --engine and --split go with --kernels")
    if args.replicas is not None:
        return _validate_replicas(args)
    if args.cases is not None:
        return _validate_case_file(args)
    try:
        report = validate(
            args.kind, all_kinds=args.all, drop_layout_duplicates=args.drop_layout_duplicates
        )
    except ChunkwiseError as err:
        return fail(err)
    if args.format == "json":
        render.dump({**report.to_dict(), "csv": report.to_csv()})
    else:
        print(report.format_table())
        if args.csv is None:
            print()
            print(report.to_csv(), end="")
    if args.csv is not None:
        Path(args.csv).write_text(report.to_csv(), encoding="utf-8")
    return 0 if report.targets_met else 1


def read_calibration(path: str) -> CalibrationProfile:
    """A saved profile (``--calibration FILE``): domain errors name the file's problem."""
    from pathlib import Path

    from app.core.errors import InvalidParameterError
    from app.services.calibration import load_profile_text

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidParameterError("--calibration", path, f"a readable file ({err})") from None
    return load_profile_text(text)


def cmd_calibrate(args: argparse.Namespace) -> int:
    """``calibrate FILE.csv --out PROFILE.json``: fit, print the fit and its errors, save."""
    import json
    from pathlib import Path

    from app.core.errors import ChunkwiseError
    from app.services.calibration import calibrate_text

    try:
        text = Path(args.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        return fail(f"{args.file}: {err}")
    try:
        profile = calibrate_text(text, engine=args.engine, free=args.free)
    except ChunkwiseError as err:
        return fail(f"{args.file}: {err}")
    body = profile.to_dict()
    try:
        Path(args.out).write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
    except OSError as err:
        return fail(f"--out {args.out}: {err}")
    if args.format == "json":
        render.dump(body)
    else:
        print(render.calibration_table(body))
        print(f"wrote {args.out}")
    return 0


def _validate_kernels(args: argparse.Namespace) -> int:
    """``validate --kernels DIR``: every measured kernel priced or refused with its reason."""
    from pathlib import Path

    from app.core.errors import ChunkwiseError

    if args.kind or args.all or args.cases is not None:
        return fail("--kernels replays the kernel tables; leave out --kind, --all and --cases")
    from app.services.kernels import validate_kernels

    try:
        report = validate_kernels(
            Path(args.kernels),
            system=args.system,
            engine=args.engine,
            csv_path=None if args.csv is None else Path(args.csv),
            split=args.split,
        )
    except ChunkwiseError as err:
        return fail(err)
    if args.format == "json":
        render.dump(report.to_dict())
    else:
        print(report.format_table())
    return 0


def _validate_case_file(args: argparse.Namespace) -> int:
    """``validate --cases FILE``: every row predicted or refused with its reason; exit 0."""
    from pathlib import Path

    from app.core.errors import ChunkwiseError
    from app.services.validate import validate_cases

    if args.kind or args.all:
        return fail("--cases replays one file; leave out --kind and --all")
    try:
        text = Path(args.cases).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        return fail(f"--cases {args.cases}: {err}")
    try:
        calibration = None if args.calibration is None else read_calibration(args.calibration)
        report = validate_cases(
            text, drop_layout_duplicates=args.drop_layout_duplicates, calibration=calibration
        )
    except ChunkwiseError as err:
        return fail(f"--cases {args.cases}: {err}")
    if args.format == "json":
        render.dump(report.to_dict())
    else:
        print(report.format_table())
    if args.csv is not None:
        Path(args.csv).write_text(report.to_csv(), encoding="utf-8")
    return 0


def _validate_replicas(args: argparse.Namespace) -> int:
    """``validate --replicas FILE``: the file's replica floor; exit 0."""
    from pathlib import Path

    from app.core.errors import ChunkwiseError
    from app.services.validate import validate_replicas

    if args.kind or args.all or args.cases is not None:
        return fail("--replicas reads one file; leave out --kind, --all and --cases")
    try:
        text = Path(args.replicas).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        return fail(f"--replicas {args.replicas}: {err}")
    try:
        report, case_ids = validate_replicas(text)
    except ChunkwiseError as err:
        return fail(f"--replicas {args.replicas}: {err}")
    if args.format == "json":
        render.dump(report.to_dict())
    else:
        print(report.format_table())
    if args.csv is not None:
        Path(args.csv).write_text(report.to_csv(case_ids), encoding="utf-8")
    return 0


# -- optimize, simulate ------------------------------------------------------------------------
def common_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The request fields optimize and simulate share (``parser.add_workload_flags``)."""
    budget = args.max_batched_tokens
    if args.max_prefill_tokens is not None:
        print(
            "chunkwise: warning: --max-prefill-tokens is deprecated; use --max-batched-tokens",
            file=sys.stderr,
        )
        if budget is None:
            budget = args.max_prefill_tokens
    fields: dict[str, Any] = {
        "model": args.model,
        "device": args.device[0],
        "input_length": args.input_length,
        "output_length": args.output_length,
        "max_batched_tokens": budget,
        "prefix_cache_hit_rate": args.prefix_cache_hit_rate,
        "num_mtp_tokens": args.num_mtp_tokens,
        "reserved_memory_gb": args.reserved_memory_gb,
        "force_simulation": args.force_simulation,
        # Given only when set: the engine profile fills them in (and a workload that does not
        # take them can say so).
        **given(
            args,
            (
                "quantize_linear_action",
                "quantize_attention_action",
                "length_range_ratio",
                "engine",
                "workload",
                "window",
                "requests_per_client",
            ),
        ),
    }
    options = {
        "slack_ratio": args.slack_ratio,
        "prefill_order": args.prefill_order,
        "max_num_seqs": args.max_num_seqs,
        "mixed_latency": args.mixed_latency,
    }
    if args.scheduler is not None or any(v is not None for v in options.values()):
        fields["scheduler"] = {"name": args.scheduler or DEFAULT_SCHEDULER, **options}
    if args.engine_options:
        fields["engine_options"] = dict(args.engine_options)
    if args.calibration is not None:
        fields["calibration"] = read_calibration(args.calibration).to_dict()
    rates = flatten(args.mtp_acceptance_rates)
    if rates is not None:
        fields["mtp_acceptance_rates"] = rates
    return fields


def optimize_modes(args: argparse.Namespace) -> list[str]:
    """msmodeling's flags to modes: --disagg sizes prefill instances by the TTFT limit and
    decode instances by the TPOT limit (both sides when neither limit is given)."""
    if args.mode is not None:
        return [args.mode]
    if args.enable_optimize_prefill_decode_ratio:
        return ["pd_ratio"]
    if args.disagg:
        limits = (("disagg_prefill", args.ttft_limit), ("disagg_decode", args.tpot_limit))
        return [m for m, limit in limits if limit] or ["disagg_prefill", "disagg_decode"]
    return ["agg"]


#: msmodeling's throughput-optimizer flags that mean nothing to an analytic model, and why.
UNMODELLED_FLAGS: dict[str, str] = {
    "--compile": "torch.compile changes no analytic latency here; drop it",
    "--compile-allow-graph-break": "torch.compile changes no analytic latency here; drop it",
    "--mxfp4-group-size": "MXFP4 is modelled with its standard 32-element groups; drop it",
    "--image-height": "multimodal inputs are not modelled; give the prompt's token count",
    "--image-width": "multimodal inputs are not modelled; give the prompt's token count",
    "--log-level": "the CLI prints only results and one-line errors; drop it",
}


def msmodeling_flags(args: argparse.Namespace) -> str | None:
    """msmodeling's other flags: mapped (``--batch-range``, ``--serving-cost``) or the one-line
    reason they are refused (None: nothing to refuse)."""
    for flag, why in UNMODELLED_FLAGS.items():
        if getattr(args, flag[2:].replace("-", "_"), None) is not None:
            return f"{flag} (msmodeling): {why}"
    if args.batch_range is not None:
        if len(args.batch_range) > 2:
            return "--batch-range takes [MIN] MAX"
        if len(args.batch_range) == 2 and args.batch_range[0] != 1:
            return "--batch-range MIN: the search always starts at batch 1; give only MAX"
        if args.max_batch_size is not None:
            return "--batch-range MAX and --max-batch-size say the same; give one"
        args.max_batch_size = args.batch_range[-1]
    return None


def cmd_optimize(args: argparse.Namespace) -> int:
    from app.models.optimize import OptimizeRequest, OptimizeResponse
    from app.services import optimize as service

    if args.disagg and args.enable_optimize_prefill_decode_ratio:
        return fail("--disagg and --enable-optimize-prefill-decode-ratio are exclusive")
    if args.mode is not None and (args.disagg or args.enable_optimize_prefill_decode_ratio):
        return fail(
            "--mode names the search: drop --disagg / --enable-optimize-prefill-decode-ratio"
        )
    if args.mode == "disagg" and args.emit is not None:
        return fail("--emit launches one row of an aggregated or disagg_* search, not mode disagg")
    refused = msmodeling_flags(args)
    if refused is not None:
        return fail(refused)
    if len(args.device) > 1:
        return fail(ONE_DEVICE)
    if args.jobs is not None:
        print(
            f"chunkwise: note: --jobs {args.jobs} is ignored (one process; the search is fast)",
            file=sys.stderr,
        )
    show_progress = args.progress or (args.progress is None and sys.stderr.isatty())

    def progress(text: str) -> None:
        if show_progress:
            print(f"chunkwise: {text}", file=sys.stderr, flush=True)

    def request(common: dict[str, Any], mode: str) -> OptimizeRequest:
        return OptimizeRequest.model_validate(
            {
                **common,
                "num_devices": args.num_devices,
                "ttft_limit_ms": args.ttft_limit,
                "tpot_limit_ms": args.tpot_limit,
                "mode": mode,
                "tp_sizes": flatten(args.tp_sizes),
                "ep_sizes": flatten(args.ep_sizes),
                "prefill_devices_per_instance": args.prefill_devices_per_instance,
                "decode_devices_per_instance": args.decode_devices_per_instance,
                "top_k": args.top_k,
                **given(args, ("max_workers",)),
                "include_probes": args.format == "json" or args.dump_original_results,
                # Given only when set: the default shrinks to the search bounds, a given one not.
                **given(args, ("max_batch_size",)),
                **({} if args.serving_cost is None else {"serving_overhead_ms": args.serving_cost}),
            }
        )

    def call(context: ServiceContext) -> int:
        common = common_fields(args)
        bodies = []
        for mode in optimize_modes(args):
            optimize_request = request(common, mode)
            response = service.optimize(
                context, optimize_request, allow_paths=True, progress=progress
            )
            body = response.model_dump(mode="json")
            if args.emit is not None and isinstance(response, OptimizeResponse):
                body[emit.DEPLOY_KEY] = emit.launch_for_best(args.emit, optimize_request, response)
            bodies.append(body)
        render.print_optimize(
            bodies, args.format, probes=args.dump_original_results, pareto=args.pareto
        )
        if args.emit is not None:
            emit.print_launches(bodies, args.format)
        return 0

    return run_service(call)


PLAN_OPTIONAL = (
    "request_rate",
    "output_token_rate",
    "percentile",
    "headroom",
    "price_per_device_hour",
    "num_requests",
    "seed",
)


def cmd_plan(args: argparse.Namespace) -> int:
    """``plan``: the replicas a target traffic needs under the SLA, and their cost."""
    from app.models.capacity import PlanRequest
    from app.services.capacity import plan

    if len(args.device) > 1:
        return fail(ONE_DEVICE)

    def call(context: ServiceContext) -> int:
        request = PlanRequest.model_validate(
            {
                **common_fields(args),
                "tp_size": args.tp_size,
                "ep_size": args.ep_size,
                "dp_size": args.dp_size,
                "ttft_limit_ms": args.ttft_limit,
                "tpot_limit_ms": args.tpot_limit,
                **given(args, PLAN_OPTIONAL),
            }
        )
        body = plan(context, request).model_dump(mode="json")
        if args.format == "json":
            render.dump(body)
        else:
            print(render.plan_text(body))
        return 0

    return run_service(call)


def pool_link(args: argparse.Namespace) -> dict[str, Any]:
    """``--pool-link-gb-s`` / ``--pool-link-ms`` as the request's ``pool_link`` (a latency
    without a bandwidth is the request model's error: the link needs its bandwidth)."""
    if args.pool_link_gb_s is None and args.pool_link_ms is None:
        return {}
    link: dict[str, Any] = {"bandwidth_gb_s": args.pool_link_gb_s}
    if args.pool_link_ms is not None:
        link["fixed_ms"] = args.pool_link_ms
    return {"pool_link": link}


def cmd_simulate(args: argparse.Namespace) -> int:
    from app.models.simulate import SimulateRequest
    from app.services.simulate import simulate

    if len(args.device) > 1:
        return fail(ONE_DEVICE)

    def call(context: ServiceContext) -> int:
        request = SimulateRequest.model_validate(
            {
                **common_fields(args),
                "tp_size": args.tp_size,
                "ep_size": args.ep_size,
                "ttft_limit_ms": args.ttft_limit,
                "tpot_limit_ms": args.tpot_limit,
                "include_timeline": args.timeline,
                **given(args, SIMULATE_OPTIONAL),
                **pool_link(args),
            }
        )
        body = simulate(context, request, allow_paths=True).model_dump(mode="json")
        render.print_simulate(body, args.format)
        return 0

    return run_service(call)
