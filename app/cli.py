"""The ``chunkwise`` command line: a thin adapter over the service functions."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
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

    from app.core.runner.validation import run_validation

    report = run_validation()
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
    validate.add_argument("--format", **fmt)  # type: ignore[arg-type]
    validate.set_defaults(func=_cmd_validate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chunkwise", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1)
    serve.set_defaults(func=_cmd_serve)
    _add_runner_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
