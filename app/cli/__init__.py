"""The ``chunkwise`` command line: a thin adapter over the service functions."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn, cast


def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from app.settings import Settings

    if args.workers > 1 and Settings().cache_backend == "memory":
        print(
            "chunkwise: warning: each of the workers keeps its own in-process latency cache; "
            "set APP_CACHE_BACKEND=redis and APP_REDIS_URL to share one",
            file=sys.stderr,
        )
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        access_log=False,  # the app logs one access line per request, with its request id
    )
    return 0


# -- forward-latency model commands: forward, devices, models, validate -------------------------
def _fail(err: Exception) -> int:
    """Domain errors: one line on stderr (naming the valid choices), exit code 2."""
    print(f"chunkwise: error: {err}", file=sys.stderr)
    return 2


def _dump(document: object) -> None:
    import json

    print(json.dumps(document, indent=2))


def _cmd_forward(args: argparse.Namespace) -> int:
    from app.core.errors import ChunkwiseError
    from app.core.runner import build_runner, forward_request, forward_to_dict, parallel_layout
    from app.core.runner.report import forward_table

    try:
        runner = build_runner(
            args.model,
            args.device,
            parallel=parallel_layout(
                num_devices=args.num_devices, tp=args.tp_size, ep=args.ep_size, pp=args.pp_size
            ),
            quantize_linear_action=args.quantize_linear_action,
            quantize_attention_action=args.quantize_attention_action,
            num_mtp_tokens=args.num_mtp_tokens,
            reserved_memory_gb=args.reserved_memory_gb,
        )
        request = forward_request(
            num_queries=args.num_queries,
            query_length=args.query_length,
            context_length=args.context_length,
            decode=args.decode,
            num_mtp_tokens=args.num_mtp_tokens,
        )
        result = runner.run_inference(request)
    except ChunkwiseError as err:
        return _fail(err)
    if args.format == "json":
        _dump(forward_to_dict(runner, result))
    else:
        title = f"{runner.model.name} on {runner.device.name} {runner.parallel.label}"
        print(forward_table(result, title=f"{title} {runner.quantization.label}"))
    return 0


def _cmd_devices(args: argparse.Namespace) -> int:
    from app.core.catalog import list_devices
    from app.core.runner.report import devices_table

    devices = list_devices()
    if args.format == "json":
        _dump([d.to_dict() for d in devices])
    else:
        print(devices_table(devices))
    return 0


def _cmd_models(args: argparse.Namespace) -> int:
    from app.core.catalog import list_models
    from app.core.runner.report import models_table

    models = list_models()
    if args.format == "json":
        _dump([m.to_dict() for m in models])
    else:
        print(models_table(models))
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from app.core.errors import ChunkwiseError
    from app.core.validation import LOADERS, TARGET_KIND, run_validation

    kinds = tuple(LOADERS) if args.all else tuple(args.kind or (TARGET_KIND,))
    try:
        report = run_validation(kinds=kinds, drop_layout_duplicates=args.drop_layout_duplicates)
    except ChunkwiseError as err:
        return _fail(err)
    if args.format == "json":
        _dump({**report.to_dict(), "csv": report.to_csv()})
    else:
        print(report.format_table())
        if args.csv is None:
            print()
            print(report.to_csv(), end="")
    if args.csv is not None:
        Path(args.csv).write_text(report.to_csv(), encoding="utf-8")
    return 0 if report.targets_met else 1


def _add_runner_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    fmt = {"choices": ("json", "table"), "default": "table", "help": "output format"}
    forward = sub.add_parser(
        "forward",
        help="latency, per-op breakdown and memory of one forward pass",
        description="One forward with C requests of Q new tokens on X cached tokens "
        "(seq_len = X + Q); flag names follow msmodeling's text_generate.",
    )
    forward.add_argument(
        "model", help="Hugging Face id, catalog name or directory with config.json"
    )
    forward.add_argument("--device", required=True, help="device name (see `chunkwise devices`)")
    forward.add_argument("--num-devices", type=int, default=None, help="tp * dp * pp devices")
    forward.add_argument("--tp-size", type=int, default=None, help="tensor parallel size")
    forward.add_argument("--ep-size", type=int, default=1, help="expert parallel size")
    forward.add_argument("--pp-size", type=int, default=1, help="pipeline parallel size")
    forward.add_argument("--num-queries", type=int, required=True, help="requests (C)")
    forward.add_argument("--query-length", type=int, required=True, help="new tokens (Q)")
    forward.add_argument("--context-length", type=int, default=0, help="cached tokens (X)")
    forward.add_argument("--decode", action="store_true", help="a decode step")
    forward.add_argument("--quantize-linear-action", default=None, help="e.g. DISABLED, FP8")
    forward.add_argument("--quantize-attention-action", default=None, help="DISABLED, INT8, FP8")
    forward.add_argument("--num-mtp-tokens", type=int, default=0, help="MTP draft tokens")
    forward.add_argument("--reserved-memory-gb", type=float, default=None)
    forward.add_argument("--format", **fmt)  # type: ignore[arg-type]
    forward.set_defaults(func=_cmd_forward)

    devices = sub.add_parser("devices", help="list the built-in devices")
    devices.add_argument("--format", **fmt)  # type: ignore[arg-type]
    devices.set_defaults(func=_cmd_devices)

    models = sub.add_parser("models", help="list the built-in model architectures")
    models.add_argument("--format", **fmt)  # type: ignore[arg-type]
    models.set_defaults(func=_cmd_models)

    validate = sub.add_parser(
        "validate",
        help="replay published single-forward measurements; per-device error and a CSV",
    )
    validate.add_argument("--csv", default=None, help="write predictions vs measurements here")
    validate.add_argument(
        "--kind",
        action="append",
        default=None,
        help="case kind to replay (repeatable; default ttft_bs1, the acceptance target)",
    )
    validate.add_argument("--all", action="store_true", help="replay every case kind")
    validate.add_argument(
        "--drop-layout-duplicates",
        action="store_true",
        help="serving kinds: leave out rows that repeat a smaller deployment's measurement "
        "to the digit (recording artefacts; default: every row is replayed)",
    )
    validate.add_argument("--format", **fmt)  # type: ignore[arg-type]
    validate.set_defaults(func=_cmd_validate)


# -- service commands: optimize, simulate (thin adapters over app.services) --------------------
_DEPRECATED_FLAGS = {"--max-prefill-tokens": "--max-batched-tokens"}


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line on stderr and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _sizes(text: str) -> list[int]:
    """``--tp-sizes 1 2 4`` and ``--tp-sizes 1,2,4`` both work."""
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers, got {text!r}") from None


def _rates(text: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers, got {text!r}") from None


def _flatten(values: list[list[Any]] | None) -> list[Any] | None:
    return None if values is None else [v for group in values for v in group]


def _validation_line(err: Any) -> str:
    """One line from a pydantic ValidationError, with CLI flag names."""
    parts = []
    for item in err.errors():
        field = ".".join(str(p) for p in item.get("loc", ()))
        parts.append(f"--{field.replace('_', '-')}: {item.get('msg', 'invalid')}")
    return "; ".join(parts)


def _add_common_flags(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("model", help="Hugging Face id, catalog name or directory with config.json")
    cmd.add_argument("--device", required=True, help="device name (see `chunkwise devices`)")
    cmd.add_argument("--input-length", type=int, required=True)
    cmd.add_argument("--output-length", type=int, required=True)
    cmd.add_argument("--max-batched-tokens", type=int, default=None, help="token budget per step")
    cmd.add_argument(
        "--max-prefill-tokens", type=int, default=None, help=argparse.SUPPRESS
    )  # deprecated alias
    cmd.add_argument("--prefix-cache-hit-rate", type=float, default=0.0)
    cmd.add_argument("--quantize-linear-action", default="DISABLED")
    cmd.add_argument("--quantize-attention-action", default="DISABLED")
    cmd.add_argument("--num-mtp-tokens", type=int, default=0)
    cmd.add_argument("--mtp-acceptance-rates", type=_rates, nargs="+", default=None)
    cmd.add_argument("--reserved-memory-gb", type=float, default=None)
    cmd.add_argument(
        "--scheduler",
        choices=("decode_first_with_slack", "vllm", "sglang", "sglang_mixed_chunk"),
        default="decode_first_with_slack",
    )
    cmd.add_argument("--slack-ratio", type=float, default=None, help="decode_first_with_slack")
    cmd.add_argument("--prefill-order", choices=("continue_first", "fifo"), default=None)
    cmd.add_argument("--max-num-seqs", type=int, default=None, help="vllm / sglang policies")
    cmd.add_argument(
        "--mixed-latency",
        choices=("max", "sum", "fused"),
        default=None,
        help="mixed step: max (overlap, default), sum (serial), fused (one forward)",
    )
    cmd.add_argument(
        "--workload",
        choices=("burst", "closed_loop", "poisson"),
        default="burst",
        help="poisson: simulate only",
    )
    cmd.add_argument(
        "--window",
        choices=("benchmark", "steady_state"),
        default=None,
        help="closed_loop (default benchmark)",
    )
    cmd.add_argument(
        "--requests-per-client", type=int, default=None, help="closed_loop (default 10)"
    )
    cmd.add_argument(
        "--force-simulation", action="store_true", help="time simulation even for one chunk"
    )
    cmd.add_argument("--format", choices=("table", "json", "csv"), default="table")


def _common_fields(args: argparse.Namespace) -> dict[str, Any]:
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
        "device": args.device,
        "input_length": args.input_length,
        "output_length": args.output_length,
        "max_batched_tokens": budget,
        "prefix_cache_hit_rate": args.prefix_cache_hit_rate,
        "quantize_linear_action": args.quantize_linear_action,
        "quantize_attention_action": args.quantize_attention_action,
        "num_mtp_tokens": args.num_mtp_tokens,
        "reserved_memory_gb": args.reserved_memory_gb,
        "scheduler": {
            "name": args.scheduler,
            "slack_ratio": args.slack_ratio,
            "prefill_order": args.prefill_order,
            "max_num_seqs": args.max_num_seqs,
            "mixed_latency": args.mixed_latency,
        },
        "force_simulation": args.force_simulation,
        "workload": args.workload,
    }
    # Given only when set, so a workload that does not take them can say so.
    for name in ("window", "requests_per_client"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    rates = _flatten(args.mtp_acceptance_rates)
    if rates is not None:
        fields["mtp_acceptance_rates"] = rates
    return fields


class _UsageError(Exception):
    pass


def _run_service(args: argparse.Namespace, call: Any) -> int:
    """Settings from the environment (APP_CACHE_BACKEND / APP_REDIS_URL select the cache)."""
    from pydantic import ValidationError

    from app.core.errors import ChunkwiseError
    from app.services import create_context
    from app.settings import Settings

    try:
        context = create_context(Settings())
    except ValidationError as err:
        return _fail(Exception(f"settings: {_validation_line(err)}"))
    try:
        return int(call(context))
    except _UsageError as err:
        return _fail(err)
    except ValidationError as err:
        return _fail(Exception(_validation_line(err)))
    except ChunkwiseError as err:
        return _fail(err)
    finally:
        context.close()


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows)
    return "\n".join(lines)


def _csv(rows: list[dict[str, Any]]) -> str:
    import csv
    import io

    out = io.StringIO()
    if rows:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {k: (json.dumps(v) if isinstance(v, dict | list) else v) for k, v in row.items()}
            )
    return out.getvalue()


_ROW_COLUMNS = (
    ("role", "role", 0),
    ("parallel", "parallel", 0),
    ("batch", "batch_size", 0),
    ("concurrency", "concurrency", 0),
    ("ttft_ms", "ttft_ms", 1),
    ("tpot_ms", "tpot_ms", 2),
    ("tokens/s", "throughput_tokens_s", 1),
    ("tokens/s/device", "throughput_per_device", 1),
    ("chunks", "prefill_num_chunks", 0),
    ("eff_input", "effective_input_length", 0),
    ("mem_left_gb", "memory_left_gb", 2),
    ("method", "method", 0),
)


def _print_optimize(response: Any, fmt: str) -> None:
    body = response.model_dump(mode="json")
    if fmt == "json":
        print(json.dumps(body, indent=2))
        return
    if fmt == "csv":
        print(_csv(body["rows"]), end="")
        return
    first = body["input"]
    print(
        f"{first['model']} on {first['num_devices']} x {first['device']}  mode={body['mode']}"
        f"  input={first['input_length']} output={first['output_length']}"
        f"  max_batched_tokens={first['max_batched_tokens']}"
    )
    rows = [[_fmt(r[key], d) for _, key, d in _ROW_COLUMNS] for r in body["rows"]]
    print(_table([h for h, _, _ in _ROW_COLUMNS], rows) if rows else "no feasible configuration")
    pd = body.get("pd_ratio")
    if pd and pd.get("split"):
        split = pd["split"]
        print(
            f"pd_ratio={pd['pd_ratio']:.3f}  prefill instances={split['prefill_instances']}"
            f"  decode instances={split['decode_instances']}  devices used={split['devices_used']}"
            f"  output tokens/s={pd['output_throughput']:,.1f}"
        )
    for item in body["infeasible"]:
        print(f"infeasible {item['role']} {item['parallel']}: {item['reason']}")
    if body.get("reason"):
        print(f"note: {body['reason']}")
    stats = body["stats"]
    print(
        f"{stats['probes']} probes, {stats['forward_evaluations']} forwards computed, "
        f"{stats['cache']['hits']} cache hits, {stats['elapsed_ms']:.0f} ms"
    )


def _cmd_optimize(args: argparse.Namespace) -> int:
    from app import services
    from app.models.optimize import OptimizeRequest

    if args.disagg and args.enable_optimize_prefill_decode_ratio:
        return _fail(Exception("--disagg and --enable-optimize-prefill-decode-ratio are exclusive"))
    ttft = args.ttft_limit
    tpot = args.tpot_limit
    if args.enable_optimize_prefill_decode_ratio:
        modes = ["pd_ratio"]
    elif args.disagg:
        # msmodeling: the TTFT limit sizes prefill instances, the TPOT limit decode instances.
        modes = [m for m, limit in (("disagg_prefill", ttft), ("disagg_decode", tpot)) if limit]
        modes = modes or ["disagg_prefill", "disagg_decode"]
    else:
        modes = ["agg"]
    show_progress = args.progress or (args.progress is None and sys.stderr.isatty())

    def progress(text: str) -> None:
        if show_progress:
            print(f"chunkwise: {text}", file=sys.stderr, flush=True)

    def call(context: Any) -> int:
        common = _common_fields(args)
        responses = []
        for mode in modes:
            request = OptimizeRequest.model_validate(
                {
                    **common,
                    "num_devices": args.num_devices,
                    "ttft_limit_ms": ttft,
                    "tpot_limit_ms": tpot,
                    "mode": mode,
                    "tp_sizes": _flatten(args.tp_sizes),
                    "ep_sizes": _flatten(args.ep_sizes),
                    "prefill_devices_per_instance": args.prefill_devices_per_instance,
                    "decode_devices_per_instance": args.decode_devices_per_instance,
                    "max_batch_size": args.max_batch_size,
                    "top_k": args.top_k,
                    "include_probes": args.format == "json",
                }
            )
            responses.append(
                services.optimize(context, request, allow_paths=True, progress=progress)
            )
        if args.format == "json" and len(responses) > 1:
            print(json.dumps([r.model_dump(mode="json") for r in responses], indent=2))
        elif args.format == "csv" and len(responses) > 1:  # one table: rows carry their role
            print(
                _csv([row for r in responses for row in r.model_dump(mode="json")["rows"]]), end=""
            )
        else:
            for response in responses:
                _print_optimize(response, args.format)
        return 0

    return _run_service(args, call)


def _split_text(split: list[dict[str, Any]]) -> str:
    """``8 on each of 4 replicas``, ``3 on 2 replicas, 2 on 1 replica``, or for poisson
    ``500 requests at 2 req/s (max 4 in flight) on each of 4 replicas``."""

    def replicas(n: int) -> str:
        return f"{n} replica" if n == 1 else f"{n} replicas"

    def share(s: dict[str, Any]) -> str:
        if s.get("request_rate") is None:
            return str(s["concurrency"])
        cap = f" (max {s['concurrency']} in flight)" if s["concurrency"] is not None else ""
        return f"{s['num_requests']} requests at {s['request_rate']:g} req/s{cap}"

    if len(split) == 1:
        return f"{share(split[0])} on each of {replicas(split[0]['replicas'])}"
    return ", ".join(f"{share(s)} on {replicas(s['replicas'])}" for s in split)


def _scheduler_text(scheduler: dict[str, Any]) -> str:
    """``vllm (mixed_latency=fused, prefill_order=continue_first)``: the name and its options."""
    options = ", ".join(
        f"{key}={value}" for key, value in scheduler.items() if key != "name" and value is not None
    )
    return f"{scheduler['name']} ({options})" if options else str(scheduler["name"])


def _cmd_simulate(args: argparse.Namespace) -> int:
    from app import services
    from app.models.simulate import SimulateRequest

    def call(context: Any) -> int:
        fields = {
            **_common_fields(args),
            "tp_size": args.tp_size,
            "ep_size": args.ep_size,
            "ttft_limit_ms": args.ttft_limit,
            "tpot_limit_ms": args.tpot_limit,
            "include_timeline": args.timeline,
        }
        for name in (
            "dp_size",
            "num_devices",
            "concurrency",
            "request_rate",
            "max_concurrency",
            "num_requests",
            "seed",
        ):
            if getattr(args, name) is not None:  # each workload takes its own
                fields[name] = getattr(args, name)
        request = SimulateRequest.model_validate(fields)
        response = services.simulate(context, request, allow_paths=True)
        body = response.model_dump(mode="json")
        if args.format == "json":
            print(json.dumps(body, indent=2))
        elif args.format == "csv":
            if body["timeline"] is not None:
                steps = [
                    {k: v for k, v in step.items() if k not in ("prefill", "decode")}
                    for step in body["timeline"]
                ]
                print(_csv(steps), end="")
            else:
                metrics = {k: v for k, v in body.items() if k not in ("input", "timeline", "stats")}
                print(_csv([metrics]), end="")
        else:
            keys: tuple[str, ...] = (
                "workload",
                "method",
                "parallel",
                *(
                    ("request_rate", "num_requests", "seed")
                    if body["workload"] == "poisson"
                    else ()
                ),
                "batch_size",
                "concurrency",
                "effective_input_length",
                "prefill_num_chunks",
                "ttft_ms",
                "tpot_ms",
                "makespan_ms",
                "output_throughput",
                "throughput_per_device",
                "request_throughput",
                "steps",
            )
            if body["workload"] != "burst":
                keys += (
                    "e2e_ms",
                    "total_throughput",
                    "mean_running_batch",
                    "mean_prefill_tokens_per_step",
                    "mean_decode_tokens_per_step",
                    "max_running",
                )
            keys += ("memory_left_gb", "feasible", "reason")
            width = max(len(k) for k in (*keys, "replica_split", "max_batched_tokens"))
            print(f"{'scheduler'.ljust(width)}  {_scheduler_text(body['scheduler'])}")
            print(f"{'max_batched_tokens'.ljust(width)}  {body['max_batched_tokens']}")
            for key in keys:
                print(f"{key.ljust(width)}  {_fmt(body[key], 3)}")
                if key == "concurrency":
                    print(f"{'replica_split'.ljust(width)}  {_split_text(body['replica_split'])}")
            if body["timeline"] is not None:
                print()
                headers = ["start_ms", "step_ms", "repeat", "p_step", "d_step", "first", "done"]
                rows = [
                    [
                        _fmt(s["start_ms"], 2),
                        _fmt(s["step_ms"], 3),
                        str(s["repeat"]),
                        str(s["p_step"]),
                        str(s["d_step"]),
                        str(s["first_tokens"]),
                        str(s["finished"]),
                    ]
                    for s in body["timeline"]
                ]
                print(_table(headers, rows))
        return 0

    return _run_service(args, call)


def _add_service_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    optimize = sub.add_parser(
        "optimize",
        help="search parallel layouts and concurrency for the highest throughput",
        description="Throughput optimizer (flag names follow msmodeling's throughput_optimizer).",
    )
    _add_common_flags(optimize)
    optimize.add_argument("--num-devices", type=int, required=True)
    optimize.add_argument("--ttft-limit", "--ttft-limits", type=float, default=None, help="ms")
    optimize.add_argument("--tpot-limit", "--tpot-limits", type=float, default=None, help="ms")
    optimize.add_argument(
        "--disagg", action="store_true", help="PD-separated: prefill (TTFT) / decode (TPOT) side"
    )
    optimize.add_argument("--enable-optimize-prefill-decode-ratio", action="store_true")
    optimize.add_argument("--prefill-devices-per-instance", type=int, default=None)
    optimize.add_argument("--decode-devices-per-instance", type=int, default=None)
    optimize.add_argument("--tp-sizes", type=_sizes, nargs="+", default=None)
    optimize.add_argument("--ep-sizes", type=_sizes, nargs="+", default=None)
    optimize.add_argument("--max-batch-size", type=int, default=4096, help="search cap per replica")
    optimize.add_argument("--top-k", type=int, default=10)
    optimize.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress on stderr (default: when stderr is a terminal)",
    )
    optimize.set_defaults(func=_cmd_optimize)

    simulate = sub.add_parser("simulate", help="simulate one configuration at a given concurrency")
    _add_common_flags(simulate)
    simulate.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="burst / closed_loop (required): requests (closed_loop: clients) in total, split "
        "over the --dp-size replicas",
    )
    simulate.add_argument(
        "--request-rate", type=float, default=None, help="poisson (required): requests/s in total"
    )
    simulate.add_argument(
        "--max-concurrency",
        type=int,
        default=None,
        help="poisson: at most this many requests in flight (default: no cap)",
    )
    simulate.add_argument(
        "--num-requests", type=int, default=None, help="poisson: requests sent (default 1000)"
    )
    simulate.add_argument(
        "--seed", type=int, default=None, help="poisson: seed of the arrival times (default 0)"
    )
    simulate.add_argument("--tp-size", type=int, default=1)
    simulate.add_argument("--ep-size", type=int, default=1)
    simulate.add_argument(
        "--dp-size",
        type=int,
        default=None,
        help="replicas (default 1, or --num-devices / --tp-size)",
    )
    simulate.add_argument(
        "--num-devices",
        type=int,
        default=None,
        help="devices in total: --tp-size x --dp-size (sets --dp-size when it is omitted)",
    )
    simulate.add_argument("--ttft-limit", "--ttft-limits", type=float, default=None, help="ms")
    simulate.add_argument("--tpot-limit", "--tpot-limits", type=float, default=None, help="ms")
    simulate.add_argument("--timeline", action="store_true", help="print the step timeline")
    simulate.set_defaults(func=_cmd_simulate)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="chunkwise", description=__doc__)
    # Subcommand parsers are _Parser too (one-line usage errors, exit 2).
    sub = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(dest="command", required=True),
    )
    serve = sub.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1)
    serve.set_defaults(func=_cmd_serve)
    _add_runner_commands(sub)
    _add_service_commands(sub)
    return parser


#: Exit status of a command whose reader closed the pipe (``chunkwise ... | head``): 128 + SIGPIPE.
EXIT_BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except BrokenPipeError:
        # The reader has what it wanted; no traceback, and no second error when Python
        # flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
