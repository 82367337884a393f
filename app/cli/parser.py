"""The ``chunkwise`` flags. Names, choices and defaults come from core (the definitions the wire
models in ``app.models`` use too); tests/api/test_cli.py checks every flag against its request
model field, so a field or a choice cannot be added to one and forgotten in the other."""

from __future__ import annotations

import argparse
import json
import os
from typing import NoReturn, cast, get_args

from app.cli.commands import (
    UNMODELLED_FLAGS,
    cmd_calibrate,
    cmd_devices,
    cmd_forward,
    cmd_models,
    cmd_optimize,
    cmd_plan,
    cmd_simulate,
    cmd_validate,
)
from app.cli.emit import add_emit_flag
from app.cli.serve import cmd_serve
from app.cli.sweep import cmd_sweep
from app.cli.worker import cmd_worker
from app.core.calibration.parameters import PARAMETER_NAMES
from app.core.limits import (
    DEFAULT_MAX_WORKERS,
    DEFAULT_SIMULATE_MODE,
    DEFAULT_TOP_K,
    KERNEL_SPLITS,
    MODES,
    SIMULATE_MODES,
)
from app.core.optimizer import DEFAULT_MAX_BATCH_SIZE
from app.core.profiles import DEFAULT_ENGINE, OVERRIDABLE, PROFILES, RFC_ENGINE
from app.core.scheduler import DEFAULT_SCHEDULER, MIXED_LATENCIES, PREFILL_ORDERS, SCHEDULERS
from app.core.workload import (
    DEFAULT_POISSON_REQUESTS,
    DEFAULT_POISSON_SEED,
    DEFAULT_REQUESTS_PER_CLIENT,
    DEFAULT_WINDOW,
    WORKLOADS,
    Window,
)

Subparsers = argparse._SubParsersAction  # argparse has no public name for it
DESCRIPTION = "The ``chunkwise`` command line: a thin adapter over the service functions."
MODEL_HELP = "Hugging Face id, catalog name or directory with config.json"
DEVICE_HELP = "device name (see `chunkwise devices`)"
#: The service's default quantization (``DeploymentMixin``), spelled as the flag takes it.
NO_QUANTIZATION = "DISABLED"


class Parser(argparse.ArgumentParser):
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


def _add_format(cmd: argparse.ArgumentParser, *choices: str, default: str = "table") -> None:
    cmd.add_argument("--format", choices=choices, default=default, help="output format")


# -- forward, devices, models, validate --------------------------------------------------------
def _add_forward(sub: Subparsers[argparse.ArgumentParser]) -> None:
    forward = sub.add_parser(
        "forward",
        help="latency, per-op breakdown and memory of one forward pass",
        description="One forward with C requests of Q new tokens on X cached tokens "
        "(seq_len = X + Q); flag names follow msmodeling's text_generate.",
    )
    forward.add_argument("model", help=MODEL_HELP)
    forward.add_argument("--device", required=True, help=DEVICE_HELP)
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
    _add_format(forward, "json", "table")
    forward.set_defaults(func=cmd_forward)


def _add_catalog_and_validate(sub: Subparsers[argparse.ArgumentParser]) -> None:
    devices = sub.add_parser("devices", help="list the built-in devices")
    _add_format(devices, "json", "table")
    devices.set_defaults(func=cmd_devices)

    models = sub.add_parser("models", help="list the built-in model architectures")
    _add_format(models, "json", "table")
    models.set_defaults(func=cmd_models)

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
        "--cases",
        default=None,
        metavar="FILE.csv",
        help="replay every row of a measurement file with the columns of "
        "measured_agg_serving_cases.csv or measured_disagg_serving_cases.csv (by its header; "
        "instead of --kind / --all); --csv writes one row per input row (case_id, "
        "ttft_ms_pred, tpot_ms_pred, error, ...)",
    )
    validate.add_argument(
        "--kernels",
        default=None,
        metavar="DIR",
        help="price every measured kernel of AIConfigurator's tables (the unpacked "
        "aiconfigurator-core wheel, or its systems/data folder; needs pyarrow, the 'kernels' "
        "extra) with the runner's own op costs; errors per system, engine, op, quantization "
        "and shape band; --csv writes one row per measured point",
    )
    validate.add_argument("--system", default=None, help="--kernels: only this system folder")
    validate.add_argument("--engine", default=None, help="--kernels: only this engine folder")
    validate.add_argument(
        "--split",
        choices=KERNEL_SPLITS,
        default="all",
        help="--kernels: every point (all), or only the train (3 of 4) or held-out test (1 of 4) "
        "shapes of a stable hash of the shape",
    )
    validate.add_argument(
        "--replicas",
        default=None,
        metavar="FILE.csv",
        help="the replica floor of a measurement file: configurations measured more than "
        "once, their spread per engine family and overall (instead of --kind / --all / "
        "--cases); --csv writes one row per row of a replicated configuration",
    )
    _add_calibration_flag(validate)
    validate.add_argument(
        "--drop-layout-duplicates",
        action="store_true",
        help="serving kinds: leave out rows that repeat a smaller deployment's measurement "
        "to the digit (recording artefacts; default: every row is replayed)",
    )
    _add_format(validate, "json", "table")
    validate.set_defaults(func=cmd_validate)

    calibrate = sub.add_parser(
        "calibrate",
        help="fit a calibration profile to your own measured runs (a CSV with the columns of "
        "measured_agg_serving_cases.csv)",
    )
    calibrate.add_argument("file", metavar="FILE.csv", help="the measured runs, one per row")
    calibrate.add_argument(
        "--out", required=True, metavar="PROFILE.json", help="write the fitted profile here"
    )
    calibrate.add_argument(
        "--engine",
        choices=tuple(PROFILES),
        default=None,
        help="the engine family every row must have (default: the rows' own)",
    )
    calibrate.add_argument(
        "--free",
        nargs="+",
        choices=PARAMETER_NAMES,
        default=None,
        metavar="PARAMETER",
        help=f"fit exactly these parameters ({', '.join(PARAMETER_NAMES)}; default: chosen by "
        "how many points there are and what they vary)",
    )
    _add_format(calibrate, "json", "table")
    calibrate.set_defaults(func=cmd_calibrate)


def _add_calibration_flag(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--calibration",
        default=None,
        metavar="PROFILE.json",
        help="apply a calibration profile written by `chunkwise calibrate --out`",
    )


# -- optimize, simulate ------------------------------------------------------------------------
def _add_deployment_flags(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("model", help=MODEL_HELP)
    # nargs="+": msmodeling's ``--device A B`` compares devices in one run; Chunkwise takes one
    # and says so in one line (the commands check it).
    cmd.add_argument("--device", required=True, nargs="+", help=DEVICE_HELP)
    cmd.add_argument("--input-length", type=int, required=True)
    cmd.add_argument("--output-length", type=int, required=True)
    cmd.add_argument(
        "--length-range-ratio",
        type=float,
        default=None,
        help="lengths drawn uniformly in [ratio, 1] x the given ones, as vLLM benchmark_serving "
        "--random-range-ratio (default 1: fixed; closed_loop and poisson workloads)",
    )
    cmd.add_argument("--max-batched-tokens", type=int, default=None, help="token budget per step")
    cmd.add_argument(
        "--max-prefill-tokens", type=int, default=None, help=argparse.SUPPRESS
    )  # deprecated alias of --max-batched-tokens (a warning on stderr)
    cmd.add_argument("--prefix-cache-hit-rate", type=float, default=0.0)
    cmd.add_argument(
        "--quantize-linear-action",
        default=None,
        help=f"default {NO_QUANTIZATION} (the checkpoint's own weights; --engine {RFC_ENGINE}: "
        "W8A8_DYNAMIC, msmodeling's default)",
    )
    cmd.add_argument(
        "--quantize-attention-action",
        default=None,
        help=f"KV cache (default {NO_QUANTIZATION}, or the engine's FP8 rule for FP8/FP4 weights)",
    )
    cmd.add_argument("--num-mtp-tokens", type=int, default=0)
    cmd.add_argument("--mtp-acceptance-rates", type=_rates, nargs="+", default=None)
    cmd.add_argument("--reserved-memory-gb", type=float, default=None)


def _engine_option(text: str) -> tuple[str, object]:
    """``KEY=VALUE``: the value read as JSON (a number, true/false) or else as text."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        parsed: object = json.loads(value)
    except ValueError:
        parsed = value.strip()
    return key.strip().replace("-", "_"), parsed


def _add_scheduler_flags(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--engine",
        choices=tuple(PROFILES),
        default=None,
        help=f"engine profile (default {DEFAULT_ENGINE}; {RFC_ENGINE}: the RFC's semantics)",
    )
    cmd.add_argument(
        "--engine-options",
        type=_engine_option,
        nargs="+",
        action="extend",
        default=None,
        metavar="KEY=VALUE",
        help=f"override engine profile values ({', '.join(OVERRIDABLE)})",
    )
    _add_calibration_flag(cmd)
    cmd.add_argument(
        "--scheduler",
        choices=tuple(SCHEDULERS),
        default=None,
        help=f"step policy (default: the engine profile's; RFC: {DEFAULT_SCHEDULER})",
    )
    cmd.add_argument("--slack-ratio", type=float, default=None, help="decode_first_with_slack")
    cmd.add_argument("--prefill-order", choices=PREFILL_ORDERS, default=None)
    cmd.add_argument("--max-num-seqs", type=int, default=None, help="vllm / sglang policies")
    cmd.add_argument(
        "--mixed-latency",
        choices=MIXED_LATENCIES,
        default=None,
        help="mixed step: max (overlap, default), sum (serial), fused (one forward)",
    )


def _add_workload_flags(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--workload",
        choices=WORKLOADS,
        default=None,
        help=f"default: the engine profile's (closed_loop; {RFC_ENGINE}: burst); poisson: "
        "simulate only",
    )
    cmd.add_argument(
        "--window",
        choices=get_args(Window),
        default=None,
        help=f"closed_loop (default {DEFAULT_WINDOW})",
    )
    cmd.add_argument(
        "--requests-per-client",
        type=int,
        default=None,
        help=f"closed_loop (default {DEFAULT_REQUESTS_PER_CLIENT})",
    )
    cmd.add_argument(
        "--force-simulation", action="store_true", help="time simulation even for one chunk"
    )
    cmd.add_argument("--format", choices=("table", "json", "csv"), default="table")


def _add_limit_flags(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--ttft-limit", "--ttft-limits", type=float, default=None, help="ms")
    cmd.add_argument("--tpot-limit", "--tpot-limits", type=float, default=None, help="ms")


def _add_optimize(sub: Subparsers[argparse.ArgumentParser]) -> None:
    optimize = sub.add_parser(
        "optimize",
        help="search parallel layouts and concurrency for the highest throughput",
        description="Throughput optimizer (flag names follow msmodeling's throughput_optimizer).",
    )
    for add in (_add_deployment_flags, _add_scheduler_flags, _add_workload_flags):
        add(optimize)
    optimize.add_argument("--num-devices", type=int, required=True)
    _add_limit_flags(optimize)
    optimize.add_argument(
        "--disagg", action="store_true", help="PD-separated: prefill (TTFT) / decode (TPOT) side"
    )
    optimize.add_argument("--enable-optimize-prefill-decode-ratio", action="store_true")
    optimize.add_argument(
        "--mode",
        choices=MODES,
        default=None,
        help="the search (default agg, or what --disagg / --enable-optimize-prefill-decode-ratio "
        "name); disagg: prefill and decode worker layouts, counts and concurrency of a whole "
        "deployment within --num-devices",
    )
    optimize.add_argument(
        "--max-workers",
        type=int,
        default=None,
        help=f"--mode disagg: most workers per pool (default {DEFAULT_MAX_WORKERS})",
    )
    optimize.add_argument("--prefill-devices-per-instance", type=int, default=None)
    optimize.add_argument("--decode-devices-per-instance", type=int, default=None)
    optimize.add_argument("--tp-sizes", type=_sizes, nargs="+", default=None)
    optimize.add_argument("--ep-sizes", type=_sizes, nargs="+", default=None)
    optimize.add_argument(
        "--max-batch-size",
        type=int,
        default=None,
        help=f"search cap per replica (default {DEFAULT_MAX_BATCH_SIZE}, shrunk to the search "
        "bounds when not given)",
    )
    optimize.add_argument("--top-k", type=int, default=DEFAULT_TOP_K)
    optimize.add_argument(
        "--dump-original-results",
        action="store_true",
        help="print every probe of the search after the table (msmodeling's flag)",
    )
    optimize.add_argument(
        "--pareto",
        action="store_true",
        help="print the Pareto front (tokens/s per device against tokens/s per user) after "
        "the table",
    )
    optimize.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="accepted for msmodeling compatibility and ignored (one process, a note on stderr)",
    )
    optimize.add_argument(
        "--batch-range",
        type=int,
        nargs="+",
        default=None,
        metavar="N",
        help="msmodeling's [MIN] MAX batch sizes: MAX is --max-batch-size (the search starts at 1)",
    )
    optimize.add_argument(
        "--serving-cost",
        type=float,
        default=None,
        metavar="MS",
        help="msmodeling's serving cost: a fixed TTFT overhead of prefill instances (ms)",
    )
    # msmodeling flags with no meaning here: refused with a one-line pointer (cmd_optimize).
    for flag in UNMODELLED_FLAGS:
        optimize.add_argument(flag, nargs="?", const=True, default=None, help=argparse.SUPPRESS)
    optimize.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress on stderr (default: when stderr is a terminal)",
    )
    add_emit_flag(optimize)
    optimize.set_defaults(func=cmd_optimize)


def _add_simulate_workload(simulate: argparse.ArgumentParser) -> None:
    simulate.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="burst / closed_loop (required): requests (closed_loop: clients) in total, split "
        "over the --dp-size replicas; --mode disagg: clients over the whole deployment",
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
        "--num-requests",
        type=int,
        default=None,
        help=f"poisson: requests sent (default {DEFAULT_POISSON_REQUESTS})",
    )
    simulate.add_argument(
        "--seed",
        type=int,
        default=None,
        help=f"poisson: seed of the arrival times (default {DEFAULT_POISSON_SEED})",
    )


def _add_simulate(sub: Subparsers[argparse.ArgumentParser]) -> None:
    simulate = sub.add_parser("simulate", help="simulate one configuration at a given concurrency")
    for add in (_add_deployment_flags, _add_scheduler_flags, _add_workload_flags):
        add(simulate)
    _add_simulate_workload(simulate)
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
    _add_limit_flags(simulate)
    simulate.add_argument("--timeline", action="store_true", help="print the step timeline")
    _add_disagg_pools(simulate)
    simulate.set_defaults(func=cmd_simulate)


def _add_disagg_pools(simulate: argparse.ArgumentParser) -> None:
    """``--mode disagg``: a prefill pool and a decode pool, each with its own layout."""
    simulate.add_argument(
        "--mode",
        choices=SIMULATE_MODES,
        default=None,
        help=f"{DEFAULT_SIMULATE_MODE} (default): one layout, --tp-size / --dp-size / "
        "--ep-size; disagg: --prefill-workers and --decode-workers, each pool with its own "
        "layout, --concurrency closed-loop clients over both",
    )
    for pool in ("prefill", "decode"):
        simulate.add_argument(
            f"--{pool}-workers",
            type=int,
            default=None,
            help=f"--mode disagg (required): {pool} workers",
        )
        for flag, what in (("tp", "tensor-parallel size"), ("dp", "attention DP ranks")):
            simulate.add_argument(
                f"--{pool}-{flag}",
                f"--{pool}-{flag}-size",
                dest=f"{pool}_{flag}_size",
                type=int,
                default=None,
                help=f"--mode disagg: {what} of one {pool} worker (default 1)",
            )
        simulate.add_argument(
            f"--{pool}-ep",
            f"--{pool}-ep-size",
            dest=f"{pool}_ep_size",
            type=int,
            default=None,
            help=f"--mode disagg: MoE expert-parallel size of one {pool} worker (default 1)",
        )
    simulate.add_argument(
        "--decode-device",
        default=None,
        help="--mode disagg: the decode pool's device (default: --device, the prefill pool's); "
        "another device needs --pool-link-gb-s",
    )
    simulate.add_argument(
        "--pool-link-gb-s",
        type=float,
        default=None,
        help="--mode disagg: the link between the pools, GB/s per device (required with a "
        "--decode-device other than --device; else it replaces the interconnect tier)",
    )
    simulate.add_argument(
        "--pool-link-ms",
        type=float,
        default=None,
        help="--mode disagg: the link's per-transfer latency, ms (with --pool-link-gb-s)",
    )


def _add_plan(sub: Subparsers[argparse.ArgumentParser]) -> None:
    plan = sub.add_parser(
        "plan",
        help="replicas and devices a target traffic needs under an SLA, and their cost",
    )
    for add in (_add_deployment_flags, _add_scheduler_flags):
        add(plan)
    plan.add_argument("--tp-size", type=int, default=1, help="one replica's tensor parallelism")
    plan.add_argument("--ep-size", type=int, default=1)
    plan.add_argument("--dp-size", type=int, default=1, help="data-parallel ranks per replica")
    target = plan.add_mutually_exclusive_group(required=True)
    target.add_argument("--request-rate", type=float, default=None, help="target requests/s")
    target.add_argument(
        "--output-token-rate", type=float, default=None, help="target output tokens/s"
    )
    _add_limit_flags(plan)
    plan.add_argument(
        "--percentile",
        type=float,
        default=None,
        help="the limits hold for this percentile of requests (default: the means)",
    )
    plan.add_argument(
        "--headroom", type=float, default=None, help="plan for this x the target (default 1.25)"
    )
    plan.add_argument("--price-per-device-hour", type=float, default=None, help="gives the costs")
    plan.add_argument(
        "--num-requests", type=int, default=None, help="requests of each Poisson probe"
    )
    plan.add_argument("--seed", type=int, default=None, help="seed of the Poisson arrivals")
    _add_format(plan, "json", "table")
    plan.set_defaults(
        func=cmd_plan, workload=None, window=None, requests_per_client=None, force_simulation=False
    )


def _add_serve(sub: Subparsers[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=None, help="default: APP_PORT, else 8000")
    serve.add_argument("--workers", type=int, default=1)
    serve.set_defaults(func=cmd_serve)


def _add_sweep(sub: Subparsers[argparse.ArgumentParser]) -> None:
    sweep = sub.add_parser(
        "sweep",
        help="run every scenario of a sweep spec (a YAML/JSON grid or CSV rows) locally or "
        "on a service (--remote)",
    )
    sweep.add_argument("spec", help="the spec: .yaml/.yml/.json grid document, or .csv rows")
    sweep.add_argument(
        "--out",
        required=True,
        help="the rows: .csv, .json or .parquet (pyarrow); rows already in it are skipped",
    )
    sweep.add_argument(
        "--processes", type=int, default=1, help="worker processes (1: in this process)"
    )
    sweep.add_argument(
        "--remote",
        metavar="URL",
        default=None,
        help="submit to the service at URL (POST /v1/sweeps; bearer token from "
        "CHUNKWISE_API_KEY), follow its progress and write its rows to --out",
    )
    sweep.set_defaults(func=cmd_sweep)


def _add_worker(sub: Subparsers[argparse.ArgumentParser]) -> None:
    worker = sub.add_parser(
        "worker",
        help="run sweep batches from the broker (APP_BROKER_URL, else APP_REDIS_URL)",
    )
    worker.add_argument(
        "--concurrency",
        type=int,
        default=os.cpu_count() or 1,
        help="pool processes (default: the machine's CPUs)",
    )
    worker.add_argument("--loglevel", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    worker.set_defaults(func=cmd_worker)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="chunkwise", description=DESCRIPTION)
    # Subcommand parsers are Parser too (one-line usage errors, exit 2).
    sub = cast(
        "Subparsers[argparse.ArgumentParser]",
        parser.add_subparsers(dest="command", required=True),
    )
    for add in (
        _add_serve,
        _add_forward,
        _add_catalog_and_validate,
        _add_optimize,
        _add_simulate,
        _add_plan,
        _add_sweep,
        _add_worker,
    ):
        add(sub)
    return parser
