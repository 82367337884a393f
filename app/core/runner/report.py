"""Plain-text tables for the CLI (stdlib only, deterministic column order)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from app.core.catalog.devices import Device
from app.core.catalog.models import ModelArchitecture
from app.core.runner.runner import ForwardResult

PARAMS_PER_BILLION = 1e9


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    body = [list(header), *[list(r) for r in rows]]
    widths = [max(len(row[i]) for row in body) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in body
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def forward_table(result: ForwardResult, title: str = "") -> str:
    lines = [title] if title else []
    lines.append(f"latency_ms: {result.latency_ms:.3f} ({result.breakdown.bound.value}-bound)")
    lines.append("")
    lines.append(
        _table(
            ["category", "time_ms", "share", "bound"],
            (
                [
                    c.category.value,
                    f"{c.time_ms:.3f}",
                    f"{c.time_ms / result.latency_ms:.1%}",
                    c.bound.value,
                ]
                for c in result.breakdown.categories
            ),
        )
    )
    lines.append("")
    lines.append(
        _table(
            ["op", "scope", "count", "time_ms", "total_ms", "bound"],
            (
                [
                    op.name,
                    op.scope,
                    str(op.count),
                    f"{op.time_ms:.4f}",
                    f"{op.total_ms:.3f}",
                    op.bound,
                ]
                for op in result.breakdown.ops
            ),
        )
    )
    m = result.memory
    lines.append("")
    lines.append(
        f"memory GB per device: capacity {m.capacity_gb:.2f}  weights {m.weights_gb:.2f}  "
        f"kv_cache {m.kv_cache_gb:.2f}  activation {m.activation_gb:.2f}  "
        f"reserved {m.reserved_gb:.2f}  available {m.available_gb:.2f}"
    )
    lines.extend(f"note: {note}" for note in result.notes)
    return "\n".join(lines)


def devices_table(devices: Iterable[Device]) -> str:
    def peak(value: float | None) -> str:
        return "-" if value is None else f"{value:g}"

    return _table(
        [
            "name",
            "bf16_tflops",
            "fp8_tflops",
            "int8_tops",
            "fp4_tflops",
            "hbm_gb",
            "hbm_gb_s",
            "link_gb_s",
        ],
        (
            [
                d.name,
                peak(d.peak_bf16_tflops),
                peak(d.peak_fp8_tflops),
                peak(d.peak_int8_tops),
                peak(d.peak_fp4_tflops),
                f"{d.hbm_capacity_gb:.1f}",
                f"{d.hbm_bandwidth_gb_s:g}",
                f"{d.interconnect[0].bandwidth_gb_s:g}",
            ]
            for d in devices
        ),
    )


def models_table(models: Iterable[ModelArchitecture]) -> str:
    return _table(
        ["name", "type", "layers", "hidden", "heads/kv", "params_b", "active_b", "kv_bytes/token"],
        (
            [
                m.name,
                m.model_type,
                str(m.num_layers),
                str(m.hidden_size),
                f"{m.num_heads}/{m.num_kv_heads if m.mla is None else 'mla'}",
                f"{m.num_params / PARAMS_PER_BILLION:.2f}",
                f"{m.num_active_params / PARAMS_PER_BILLION:.2f}",
                f"{m.kv_bytes_per_token(2):.0f}",
            ]
            for m in models
        ),
    )
