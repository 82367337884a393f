"""Text renderers of the CLI: tables, CSV and JSON of the service responses (stdlib and core)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from typing import Any

from app.core.catalog.architecture import LayerAttention
from app.core.catalog.hardware import BYTES_PER_GB, BYTES_PER_GIB

#: Parameters per billion (the models table's params_b / active_b columns).
PARAMS_PER_BILLION = 1e9
#: Bytes per KV element of the models table's kv_bytes/token column (16-bit KV cache).
KV_TABLE_BYTES_PER_ELEMENT = 2
#: The ``attention`` a layer group of a linear-attention layer carries (no KV cache).
LINEAR_ATTENTION = LayerAttention.LINEAR.value


def gib(gb: float | None) -> float | None:
    """The API's memory (decimal GB) in GiB, as device names count it: a 64G device is 64 GiB
    (68.7 GB). The text tables print GiB; JSON and CSV keep the API's fields."""
    return None if gb is None else gb * BYTES_PER_GB / BYTES_PER_GIB


def dump(document: object) -> None:
    print(json.dumps(document, indent=2))


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Right-aligned columns (optimize, simulate)."""
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows)
    return "\n".join(lines)


def left_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Left-aligned columns without trailing blanks (forward, models, devices)."""
    body = [list(header), *[list(r) for r in rows]]
    widths = [max(len(row[i]) for row in body) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in body
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def to_csv(rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    if rows:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {k: (json.dumps(v) if isinstance(v, dict | list) else v) for k, v in row.items()}
            )
    return out.getvalue()


# -- forward, models, devices ------------------------------------------------------------------
#: ``chunkwise forward --format json``: the forward response without its input echo and cache
#: counters, in the order the runner's document has always had.
def forward_table(body: dict[str, Any]) -> str:
    """A forward response (``POST /v1/forward``'s body) as the ``chunkwise forward`` table."""
    q = body["quantization"]
    title = (
        f"{body['model']} on {body['device']} {body['parallel']['label']} "
        f"linear={q['quantize_linear_action']} attention={q['quantize_attention_action']}"
    )
    latency_ms = body["latency_ms"]
    breakdown = body["breakdown"]
    categories = left_table(
        ["category", "time_ms", "share", "bound"],
        (
            [c["category"], f"{c['time_ms']:.3f}", f"{c['time_ms'] / latency_ms:.1%}", c["bound"]]
            for c in breakdown["categories"]
        ),
    )
    ops = left_table(
        ["op", "scope", "count", "time_ms", "total_ms", "bound"],
        (
            [
                op["name"],
                op["scope"],
                str(op["count"]),
                f"{op['time_ms']:.4f}",
                f"{op['total_ms']:.3f}",
                op["bound"],
            ]
            for op in breakdown["ops"]
        ),
    )
    m = body["memory"]
    lines = [
        title,
        f"latency_ms: {latency_ms:.3f} ({breakdown['bound']}-bound)",
        "",
        categories,
        "",
        ops,
        "",
        "memory GiB per device: "
        + "  ".join(
            f"{name} {gib(m[f'{name}_gb']) or 0.0:.2f}"
            for name in ("capacity", "weights", "kv_cache", "activation", "reserved", "available")
        ),
    ]
    lines.extend(f"note: {note}" for note in body["notes"])
    return "\n".join(lines)


def _model_row(a: dict[str, Any]) -> list[str]:
    # ModelArchitecture.kv_bytes_per_token: every attention layer (linear-attention layers hold
    # a fixed state instead), unsharded, MTP layers apart, a sparse indexer's own FP8 key cache
    # included
    linear = sum(g["count"] for g in a["layer_groups"] if g.get("attention") == LINEAR_ATTENTION)
    per_layer = a["kv_elements_per_token_per_layer"] * KV_TABLE_BYTES_PER_ELEMENT
    per_layer += a.get("indexer_cache_bytes_per_token_per_layer", 0.0)
    kv_bytes = (a["num_layers"] - linear) * per_layer
    return [
        a["name"],
        a["model_type"],
        str(a["num_layers"]),
        str(a["hidden_size"]),
        f"{a['num_heads']}/{a['num_kv_heads'] if a['mla'] is None else 'mla'}",
        f"{a['num_params'] / PARAMS_PER_BILLION:.2f}",
        f"{a['num_active_params'] / PARAMS_PER_BILLION:.2f}",
        f"{kv_bytes:.0f}",
    ]


MODEL_HEADERS = ["name", "type", "layers", "hidden", "heads/kv", "params_b", "active_b"]
DEVICE_HEADERS = ["name", "bf16_tflops", "fp8_tflops", "int8_tops", "fp4_tflops", "hbm_gib"]


def models_table(architectures: Iterable[dict[str, Any]]) -> str:
    """``GET /v1/models``' architecture documents, one row each."""
    return left_table([*MODEL_HEADERS, "kv_bytes/token"], map(_model_row, architectures))


def _peak(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _device_row(d: dict[str, Any]) -> list[str]:
    return [
        d["name"],
        _peak(d["peak_bf16_tflops"]),
        _peak(d["peak_fp8_tflops"]),
        _peak(d["peak_int8_tops"]),
        _peak(d["peak_fp4_tflops"]),
        f"{gib(d['hbm_capacity_gb']) or 0.0:.1f}",
        f"{d['hbm_bandwidth_gb_s']:g}",
        f"{d['interconnect'][0]['bandwidth_gb_s']:g}",
    ]


def devices_table(devices: Iterable[dict[str, Any]]) -> str:
    """``GET /v1/devices``' device numbers, one row each."""
    return left_table([*DEVICE_HEADERS, "hbm_gb_s", "link_gb_s"], map(_device_row, devices))


# -- optimize ----------------------------------------------------------------------------------
ROW_COLUMNS = (
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
    ("mem_left_gib", "memory_left_gb", 2),
    ("sla_conf", "sla_confidence", 2),
    ("method", "method", 0),
)


#: The API's GB fields the text tables print in GiB.
GIB_KEYS = frozenset({"memory_left_gb"})


def optimize_text(body: dict[str, Any]) -> str:
    """One optimize response (a mode) as the header line, the ranked table and the notes."""
    first = body["input"]
    lines = [
        f"{first['model']} on {first['num_devices']} x {first['device']}  mode={body['mode']}"
        f"  input={first['input_length']} output={first['output_length']}"
        f"  max_batched_tokens={first['max_batched_tokens']}"
    ]
    rows = [
        [fmt(gib(r[key]) if key in GIB_KEYS else r[key], d) for _, key, d in ROW_COLUMNS]
        for r in body["rows"]
    ]
    lines.append(
        table([h for h, _, _ in ROW_COLUMNS], rows) if rows else "no feasible configuration"
    )
    pd = body.get("pd_ratio")
    if pd and pd.get("split"):
        split = pd["split"]
        lines.append(
            f"pd_ratio={pd['pd_ratio']:.3f}  prefill instances={split['prefill_instances']}"
            f"  decode instances={split['decode_instances']}  devices used={split['devices_used']}"
            f"  output tokens/s={pd['output_throughput']:,.1f}"
            + (
                f"  split={pd['pd_split']}  binding={pd['binding_pool']}"
                if pd.get("pd_split")
                else ""
            )
        )
    lines.extend(_refusal_lines(body))
    best = body.get("best")
    if best and best.get("ttft_ms_interval") and best.get("tpot_ms_interval"):
        ttft, tpot = best["ttft_ms_interval"], best["tpot_ms_interval"]
        lines.append(
            f"best, 80% intervals: TTFT {fmt(ttft[0], 1)}-{fmt(ttft[1], 1)} ms, "
            f"TPOT {fmt(tpot[0], 2)}-{fmt(tpot[1], 2)} ms"
        )
    lines.extend(calibration_lines(body.get("calibration")))
    lines.extend(notice_lines(body))
    lines.extend(f"suggestion: {text}" for text in body.get("suggestions", ()))
    stats = body["stats"]
    lines.append(
        f"{stats['probes']} probes, {stats['forward_evaluations']} forwards computed, "
        f"{stats['cache']['hits']} cache hits, {stats['elapsed_ms']:.0f} ms"
    )
    return "\n".join(lines)


def notice_lines(body: dict[str, Any]) -> list[str]:
    """The answer's notice (an estimate outside the validated domain, rows at risk)."""
    notice = body.get("notice")
    return [f"notice: {notice}"] if notice else []


def _refusal_lines(body: dict[str, Any]) -> list[str]:
    """Every infeasible layout with its reason, then why nothing is feasible (if so)."""
    lines = [
        f"infeasible {item['role']} {item['parallel']}: {item['reason']}"
        for item in body["infeasible"]
    ]
    if body.get("reason"):
        lines.append(f"note: {body['reason']}")
    return lines


def print_optimize(
    bodies: list[dict[str, Any]], fmt_name: str, *, probes: bool = False, pareto: bool = False
) -> None:
    """Every mode's response: several JSON documents as one list, several CSVs as one table;
    ``probes`` (``--dump-original-results``) adds every probe after a table, ``pareto``
    (``--pareto``) the Pareto front."""
    if len(bodies) == 1 and bodies[0]["mode"] == "disagg":
        print_disagg_optimize(bodies[0], fmt_name, probes=probes)
    elif fmt_name == "json" and len(bodies) > 1:
        dump(bodies)
    elif fmt_name == "csv" and len(bodies) > 1:  # one table: rows carry their role
        print(to_csv([row for body in bodies for row in body["rows"]]), end="")
    else:
        for body in bodies:
            if fmt_name == "json":
                dump(body)
            elif fmt_name == "csv":
                print(to_csv(body["rows"]), end="")
            else:
                print(optimize_text(body))
                if probes:
                    print(probes_text(body["probes"]))
                if pareto:
                    print(pareto_text(body["pareto"]))


#: The Pareto table's columns: header, key, digits.
PARETO_COLUMNS = (
    ("role", "role", 0),
    ("parallel", "parallel", 0),
    ("concurrency", "concurrency", 0),
    ("tokens/s/user", "user_tokens_s", 1),
    ("tokens/s/device", "throughput_per_device", 1),
    ("TTFT ms", "ttft_ms", 1),
    ("TPOT ms", "tpot_ms", 2),
    ("SLA", "feasible", 0),
)


def pareto_text(points: list[dict[str, Any]]) -> str:
    """The Pareto front (``--pareto``), most tokens/s per device first."""
    if not points:
        return "pareto front: empty (no evaluated point has a decode step)"
    rows = [
        [
            ("met" if p[key] else "missed") if key == "feasible" else fmt(p[key], digits)
            for _, key, digits in PARETO_COLUMNS
        ]
        for p in points
    ]
    header = f"pareto front ({len(points)} points, tokens/s per device against per user)"
    return header + "\n" + table([h for h, _, _ in PARETO_COLUMNS], rows)


def probes_text(probes: list[dict[str, Any]]) -> str:
    """Every probe of a search, one line each (``--dump-original-results``)."""
    lines = [f"probes ({len(probes)})"]
    for p in probes:
        ttft = "-" if p["ttft_ms"] is None else f"{p['ttft_ms']:.1f}"
        tpot = "-" if p["tpot_ms"] is None else f"{p['tpot_ms']:.2f}"
        state = "ok" if p["feasible"] else f"infeasible: {p['reason']}"
        lines.append(
            f"  {p['role']} {p['parallel']} batch={p['batch_size']} ttft_ms={ttft} "
            f"tpot_ms={tpot} tokens/s={p['throughput_tokens_s']:.1f} {state}"
        )
    return "\n".join(lines)


# -- simulate ----------------------------------------------------------------------------------
def split_text(split: list[dict[str, Any]]) -> str:
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


def scheduler_text(scheduler: dict[str, Any]) -> str:
    """``vllm (mixed_latency=fused, prefill_order=continue_first)``: the name and its options."""
    options = ", ".join(
        f"{key}={value}" for key, value in scheduler.items() if key != "name" and value is not None
    )
    return f"{scheduler['name']} ({options})" if options else str(scheduler["name"])


SIMULATE_KEYS: tuple[str, ...] = (
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
POISSON_KEYS = ("request_rate", "num_requests", "seed")
SERVING_KEYS = (
    "e2e_ms",
    "total_throughput",
    "mean_running_batch",
    "mean_prefill_tokens_per_step",
    "mean_decode_tokens_per_step",
    "max_running",
)
TIMELINE_HEADERS = ["start_ms", "step_ms", "repeat", "p_step", "d_step", "first", "done"]


def plan_text(body: dict[str, Any]) -> str:
    """A capacity plan: the replicas, devices and costs, or why none meets the SLA."""
    first = body["input"]
    lines = [
        f"{first['model']} on {first['device']}, one replica {body['parallel']} "
        f"({body['devices_per_replica']} devices), engine {body['engine']['name']}",
        f"target {fmt(body['target_request_rate'], 3)} req/s x headroom "
        f"{fmt(first['headroom'], 2)}; one replica sustains "
        f"{fmt(body['sustainable_request_rate'], 3)} req/s within the SLA ({body['statistic']})"
        f", saturates at {fmt(body['saturated_request_rate'], 3)} req/s",
    ]
    if not body["feasible"]:
        lines.append(f"no plan: {body['reason']}")
        return "\n".join(lines)
    lines.append(
        f"replicas {body['replicas']}, devices {body['devices']}, utilisation "
        f"{body['utilisation']:.0%}; at the sustainable rate {body['statistic']} TTFT "
        f"{fmt(body['ttft_ms'], 1)} ms, TPOT {fmt(body['tpot_ms'], 2)} ms"
    )
    if body["cost_per_hour"] is not None:
        lines.append(
            f"cost {fmt(body['cost_per_hour'], 2)} per hour, "
            f"{fmt(body['cost_per_million_output_tokens'], 4)} per million output tokens"
        )
    return "\n".join(lines)


def calibration_lines(note: dict[str, Any] | None) -> list[str]:
    """The calibration a response applied, and whether it covered the estimate."""
    if not note:
        return []
    values = ", ".join(f"{k}={fmt(v, 3)}" for k, v in note["parameters"].items())
    line = f"calibration {note['id']}: {values or 'no free parameters'}"
    if not note["applicable"]:
        line += f" (outside the calibration: {note['reason']}; intervals widened)"
    return [line]


def calibration_table(profile: dict[str, Any]) -> str:
    """A fitted profile: its parameters (fitted or left, and why), fit and held-out errors."""
    fit = profile["fit"]
    defaults, fixed = profile["defaults"], profile["fixed"]
    rows = [
        [name, fmt(value, 4), fmt(defaults[name], 4), "fitted"]
        for name, value in profile["parameters"].items()
    ]
    rows.extend(
        [name, fmt(defaults[name], 4), fmt(defaults[name], 4), why] for name, why in fixed.items()
    )
    ranges = profile["ranges"]
    lines = [
        f"calibration {profile['id']}: {profile['model']} on {profile['device']} "
        f"({profile['engine']}, {profile['quantization']}), {fit['points']} points",
        table(["parameter", "value", "catalog", "status"], rows),
        f"fit:   TTFT median error {fit['ttft_fit_median_ape_pct']:.1f}%, "
        f"TPOT {fit['tpot_fit_median_ape_pct']:.1f}%"
        f" ({'converged' if fit['converged'] else 'did not converge'} after "
        f"{fit['iterations']} iterations, {fit['evaluations']} evaluations)",
        f"held out ({fit['cross_validation']}): TTFT median error "
        f"{fit['ttft_cv_median_ape_pct']:.1f}%, TPOT {fit['tpot_cv_median_ape_pct']:.1f}%",
        f"ranges: input {ranges['isl'][0]}-{ranges['isl'][1]}, output {ranges['osl'][0]}-"
        f"{ranges['osl'][1]}, concurrency {ranges['concurrency'][0]}-"
        f"{ranges['concurrency'][1]}, layouts {', '.join(ranges['layouts'])}",
    ]
    lines.extend(
        f"dropped {len(case_ids)} point(s) the product cannot place ({', '.join(case_ids)}): "
        f"{reason}"
        for reason, case_ids in profile.get("dropped", {}).items()
    )
    return "\n".join(lines)


def simulate_text(body: dict[str, Any]) -> str:
    """A simulate response as ``key  value`` lines, then the step timeline when there is one."""
    keys: tuple[str, ...] = (
        "workload",
        "method",
        "parallel",
        *(POISSON_KEYS if body["workload"] == "poisson" else ()),
        *SIMULATE_KEYS,
        *(SERVING_KEYS if body["workload"] != "burst" else ()),
        "memory_left_gb",
        "feasible",
        "reason",
    )
    width = max(len(k) for k in (*keys, "replica_split", "max_batched_tokens"))
    lines = [
        f"{'engine'.ljust(width)}  {body['engine']['name']}",
        f"{'scheduler'.ljust(width)}  {scheduler_text(body['scheduler'])}",
        f"{'max_batched_tokens'.ljust(width)}  {body['max_batched_tokens']}",
    ]
    for key in keys:
        if key in GIB_KEYS:
            name = key.removesuffix("_gb") + "_gib"
            lines.append(f"{name.ljust(width)}  {fmt(gib(body[key]), 3)}")
            continue
        lines.append(f"{key.ljust(width)}  {fmt(body[key], 3)}")
        if key == "concurrency":
            lines.append(f"{'replica_split'.ljust(width)}  {split_text(body['replica_split'])}")
    for key, interval in (
        ("ttft_ms", body.get("ttft_ms_interval")),
        ("tpot_ms", body.get("tpot_ms_interval")),
        ("output_throughput", body.get("output_throughput_interval")),
    ):
        if interval is not None:
            label = f"{key} 80%".ljust(width)
            lines.append(f"{label}  {fmt(interval[0], 3)} - {fmt(interval[1], 3)}")
    if body.get("sla_confidence") is not None:
        lines.append(f"{'sla_confidence'.ljust(width)}  {fmt(body['sla_confidence'], 3)}")
    lines.extend(calibration_lines(body.get("calibration")))
    lines.extend(notice_lines(body))
    lines.extend(f"suggestion: {text}" for text in body.get("suggestions", ()))
    if body["timeline"] is not None:
        rows = [
            [
                fmt(s["start_ms"], 2),
                fmt(s["step_ms"], 3),
                str(s["repeat"]),
                str(s["p_step"]),
                str(s["d_step"]),
                str(s["first_tokens"]),
                str(s["finished"]),
            ]
            for s in body["timeline"]
        ]
        lines.extend(["", table(TIMELINE_HEADERS, rows)])
    return "\n".join(lines)


def simulate_csv(body: dict[str, Any]) -> str:
    """The timeline's steps (without their shapes), or the metrics as one row."""
    if body["timeline"] is not None:
        steps = [
            {k: v for k, v in step.items() if k not in ("prefill", "decode")}
            for step in body["timeline"]
        ]
        return to_csv(steps)
    metrics = {k: v for k, v in body.items() if k not in ("input", "timeline", "stats")}
    return to_csv([metrics])


def print_simulate(body: dict[str, Any], fmt_name: str) -> None:
    disagg = body.get("mode") == "disagg"
    if fmt_name == "json":
        dump(body)
    elif fmt_name == "csv":
        print(disagg_simulate_csv(body) if disagg else simulate_csv(body), end="")
    else:
        print(disagg_simulate_text(body) if disagg else simulate_text(body))


# -- simulate --mode disagg --------------------------------------------------------------------
DISAGG_KEYS = (
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "output_throughput",
    "throughput_per_device",
    "request_throughput",
    "makespan_ms",
)
POOL_HEADERS = [
    "pool", "workers", "layout", "device", "devices", "units", "max_req", "util", "wait_ms"
]  # fmt: skip


def _pool_row(name: str, pool: dict[str, Any]) -> list[str]:
    return [
        name,
        str(pool["workers"]),
        pool["parallel"],
        pool["device"],
        str(pool["devices"]),
        str(pool["units"]),
        str(pool["max_requests"]),
        f"{pool['utilisation']:.1%}",
        fmt(pool["wait_ms"], 2),
    ]


def disagg_simulate_text(body: dict[str, Any]) -> str:
    """A disaggregated simulate: the deployment, the metrics, then one row per pool."""
    transfer = body["transfer"]
    binding = body["binding_pool"]
    pairs = [
        ("engine", body["engine"]["name"]),
        ("mode", f"disagg ({body['workload']}, benchmark window)"),
        ("pd_split", body["pd_split"]),
        *(
            (("request_rate", fmt(body["request_rate"], 3).rstrip("0").rstrip(".")),)
            if body["workload"] == "poisson"
            else (("concurrency", str(body["concurrency"])),)
        ),
        ("num_requests", str(body["num_requests"])),
        ("max_batched_tokens", str(body["max_batched_tokens"])),
        *((key, fmt(body[key], 3)) for key in DISAGG_KEYS),
        ("binding_pool", binding or "-"),
        (
            "kv_transfer",
            f"{fmt(transfer['transfer_ms'], 3)} ms mean over {transfer['tier']} "
            f"({fmt(transfer['bandwidth_gb_s'], 1)} GB/s per device, "
            f"{fmt(transfer['fixed_ms'], 1)} ms fixed)",
        ),
        ("first_token", f"{body['first_token']}: {body['first_token_rule']}"),
        ("feasible", str(body["feasible"])),
        ("reason", fmt(body["reason"])),
    ]
    width = max(len(key) for key, _ in pairs)
    lines = [f"{key.ljust(width)}  {value}" for key, value in pairs]
    rows = [_pool_row(name, body[name]) for name in ("prefill", "decode")]
    lines.extend(["", table(POOL_HEADERS, rows)])
    return "\n".join(lines)


def disagg_simulate_csv(body: dict[str, Any]) -> str:
    """One row: the metrics, each pool's figures as ``prefill_*`` / ``decode_*`` columns."""
    skip = ("input", "engine", "stats", "prefill", "decode", "transfer")
    row = {k: v for k, v in body.items() if k not in skip}
    row["engine"] = body["engine"]["name"]
    for pool in ("prefill", "decode"):
        row.update({f"{pool}_{k}": v for k, v in body[pool].items()})
    row.update({f"transfer_{k}": v for k, v in body["transfer"].items()})
    return to_csv([row])


# -- optimize --mode disagg --------------------------------------------------------------------
DISAGG_ROW_HEADERS = [
    "pd_split",
    "prefill",
    "decode",
    "concurrency",
    "ttft_ms",
    "tpot_ms",
    "tokens/s",
    "tokens/s/device",
    "binding",
]


def _disagg_row(row: dict[str, Any]) -> list[str]:
    return [
        row["pd_split"],
        row["prefill"]["parallel"],
        row["decode"]["parallel"],
        str(row["concurrency"]),
        fmt(row["ttft_ms"], 1),
        fmt(row["tpot_ms"], 2),
        fmt(row["output_throughput"], 1),
        fmt(row["throughput_per_device"], 1),
        row["binding_pool"],
    ]


def _disagg_csv_row(row: dict[str, Any]) -> dict[str, Any]:
    flat = {k: v for k, v in row.items() if k not in ("prefill", "decode")}
    for pool in ("prefill", "decode"):
        flat.update({f"{pool}_{k}": v for k, v in row[pool].items()})
    return flat


def disagg_optimize_text(body: dict[str, Any], *, probes: bool = False) -> str:
    """A disaggregated optimize: the header, the ranked deployments, the best, the notes."""
    first = body["input"]
    search = body["search"]
    lines = [
        f"{first['model']} on <= {first['num_devices']} x {first['device']}  mode=disagg"
        f"  input={first['input_length']} output={first['output_length']}"
        f"  max_batched_tokens={body['max_batched_tokens']}  first_token={body['first_token']}"
    ]
    rows = [_disagg_row(r) for r in body["rows"]]
    lines.append(table(DISAGG_ROW_HEADERS, rows) if rows else "no feasible configuration")
    best = body.get("best")
    if best:
        lines.append(
            f"best: {best['pd_split']}, prefill {best['prefill']['workers']} x "
            f"{best['prefill']['parallel']}, decode {best['decode']['workers']} x "
            f"{best['decode']['parallel']}, {best['concurrency']} clients, binding pool "
            f"{best['binding_pool']}"
        )
    lines.extend(_refusal_lines(body))
    if body.get("notice"):
        lines.append(f"note: {body['notice']}")
    if probes:
        lines.append(f"probes ({len(body['probes'])})")
        lines.extend(
            f"  {p['pd_split']} {p['prefill_parallel']} : {p['decode_parallel']} "
            f"clients={p['concurrency']} ttft_ms={p['ttft_ms']:.1f} tpot_ms={p['tpot_ms']:.2f} "
            f"tokens/s/device={p['throughput_per_device']:.1f} "
            + ("ok" if p["feasible"] else f"infeasible: {p['reason']}")
            for p in body["probes"]
        )
    stats = body["stats"]
    lines.append(
        f"{search['evaluated']} of {search['configurations']} configurations simulated, "
        f"{search['simulations']} simulations, {stats['forward_evaluations']} forwards computed, "
        f"{stats['elapsed_ms']:.0f} ms"
    )
    return "\n".join(lines)


def print_disagg_optimize(body: dict[str, Any], fmt_name: str, *, probes: bool = False) -> None:
    if fmt_name == "json":
        dump(body)
    elif fmt_name == "csv":
        print(to_csv([_disagg_csv_row(r) for r in body["rows"]]), end="")
    else:
        print(disagg_optimize_text(body, probes=probes))
