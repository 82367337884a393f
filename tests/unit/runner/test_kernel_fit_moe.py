"""The fitted MoE and collective tables (``kernel_fit_moe.json``, ``kernel_fit_comm.json``).

Known answers: a collective's alpha-beta time at a knot and halfway between two; a fitted
grouped GEMM's time by hand from its curve. The loaders refuse a missing or malformed table
loudly; the packaged tables carry their provenance and every curve lies in range; a forward
with the engine switched on labels its MoE and collective ops ``fitted:<engine>``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from app.core.catalog import get_device, get_model
from app.core.cost import ForwardShape
from app.core.parallel import ParallelLayout
from app.core.runner import ModelRunner
from app.core.runner.comm import Collective
from app.core.runner.fit_tables import KernelFitError
from app.core.runner.kernel_fit import DEFAULT_SOURCE, IN_GRAPH_FLOOR_US
from app.core.runner.kernel_fit_comm import (
    KERNEL_FIT_COMM_FORMAT,
    KERNEL_FIT_COMM_PATH,
    CommCurve,
    kernel_fit_comm,
    load_kernel_fit_comm,
    parse_kernel_fit_comm,
)
from app.core.runner.kernel_fit_moe import (
    KERNEL_FIT_MOE_FORMAT,
    KERNEL_FIT_MOE_PATH,
    kernel_fit_moe,
    load_kernel_fit_moe,
    moe_label,
    parse_kernel_fit_moe,
)
from app.core.runner.layers import FLOPS_PER_MAC
from app.core.runner.ops import MS_PER_S, OpCategory
from app.core.validation.kernels import NONGATED_MOE, KernelFamily, KernelPricer

H100 = "NVIDIA_H100_SXM_80G"
B200 = "NVIDIA_B200_SXM_180G"
LLAMA = "meta-llama/Llama-3.1-8B"
MIXTRAL = "mistralai/Mixtral-8x7B-v0.1"
PREFILL = ForwardShape(is_decode=False, concurrency=1, query_len=2048, seq_len=2048)
DECODE = ForwardShape(is_decode=True, concurrency=8, query_len=1, seq_len=1024)


def _moe_entry(**change: Any) -> dict[str, Any]:
    entry = {
        "device": H100,
        "engine": "vllm",
        "quantization": "bfloat16",
        "engine_version": "0.24.0",
        "default": True,
        "tpe_knots": [1, 16],
        "weight_knots": [2**20, 2**24],
        "compute_efficiency": [[0.1, 0.2], [0.5, 0.6]],
        "memory_efficiency": [0.6, 0.8],
        "fixed_us": 5.0,
        "expert_us": 0.2,
        "route_passes": 3.0,
    }
    entry.update(change)
    return entry


def _comm_entry(**change: Any) -> dict[str, Any]:
    entry = {
        "device": H100,
        "library": "nccl",
        "engine": "nccl",
        "op": "all_reduce",
        "num_gpus": 8,
        "mode": "graph",
        "message_knots": [1024, 4096],
        "bandwidth_gb_s": [10.0, 30.0],
        "latency_us": 8.0,
    }
    entry.update(change)
    return entry


def _moe_doc(*entries: dict[str, Any], skew: Any = ()) -> dict[str, Any]:
    body = {"format": KERNEL_FIT_MOE_FORMAT, "source": {}, "moe": list(entries)}
    return {**body, "skew": list(skew) if isinstance(skew, tuple) else skew}


def _skew_entry(**change: Any) -> dict[str, Any]:
    entry = {
        "device": H100,
        "engine": "vllm",
        "distribution": "power_law_1.2",
        "tpe_knots": [1, 16, 256],
        "factor": [0.9, 1.0, 1.4],
    }
    entry.update(change)
    return entry


def _comm_doc(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"format": KERNEL_FIT_COMM_FORMAT, "source": {}, "collectives": list(entries)}


def test_collective_curve_is_alpha_beta_with_log_interpolated_bandwidth() -> None:
    curve = CommCurve(message_knots=(1024.0, 4096.0), bandwidth_gb_s=(10.0, 30.0), latency_us=8.0)
    assert curve.time_s(1024) == pytest.approx(8e-6 + 1024 / 10e9)
    assert curve.time_s(2048) == pytest.approx(8e-6 + 2048 / 20e9)  # halfway in log2
    assert curve.time_s(2**20) == pytest.approx(8e-6 + 2**20 / 30e9)  # clamped


def test_parse_reads_well_formed_tables() -> None:
    older = _moe_entry(engine_version="0.19.0", default=False, expert_us=0.5)
    fit = parse_kernel_fit_moe(_moe_doc(_moe_entry(), older))
    moe = fit.curve(H100, "vllm", "bfloat16")
    assert moe is not None
    assert moe.gemm.compute_efficiency_at(4, 2**22) == pytest.approx(0.35)
    assert (moe.expert_us, moe.route_passes) == (0.2, 3.0)
    old = fit.curve(H100, "vllm", "bfloat16", "0.19.0")
    assert old is not None and old.expert_us == 0.5
    assert fit.curve(H100, "sglang", "bfloat16") is None
    skew = parse_kernel_fit_moe(_moe_doc(_moe_entry(), skew=(_skew_entry(),))).skew
    curve = skew[(H100, "vllm", "power_law_1.2")]
    assert curve.factor_at(4) == pytest.approx(0.95)  # halfway 1 -> 16 in log2
    assert curve.factor_at(1e6) == pytest.approx(1.4)  # clamped
    comm = parse_kernel_fit_comm(_comm_doc(_comm_entry()))
    assert set(comm) == {(H100, "nccl", "nccl", "all_reduce", 8, "graph")}


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"format": "other", "source": {}, "moe": []},
        {"format": KERNEL_FIT_MOE_FORMAT, "moe": []},
        _moe_doc(_moe_entry(engine="")),
        _moe_doc(_moe_entry(compute_efficiency=[[0.1, 0.2], [0.5, 1.6]])),
        _moe_doc(_moe_entry(compute_efficiency=[[0.1, 0.2]])),
        _moe_doc(_moe_entry(tpe_knots=[16, 1])),
        _moe_doc(_moe_entry(expert_us=-1)),
        _moe_doc(_moe_entry(route_passes="3")),
        _moe_doc(_moe_entry(graph_call_floor_us=-1)),
        _moe_doc(_moe_entry(graph_call_floor_us="38")),
        _moe_doc(_moe_entry(), _moe_entry()),
        _moe_doc(_moe_entry(engine_version="")),
        _moe_doc(_moe_entry(default="yes")),
        _moe_doc(_moe_entry(default=False)),
        _moe_doc(_moe_entry(), _moe_entry(engine_version="0.19.0")),
        _moe_doc(_moe_entry(), skew=None),
        _moe_doc(_moe_entry(), skew=(_skew_entry(factor=[0.9, 0.0, 1.4]),)),
        _moe_doc(_moe_entry(), skew=(_skew_entry(factor=[0.9, 1.0]),)),
        _moe_doc(_moe_entry(), skew=(_skew_entry(distribution=""),)),
        _moe_doc(_moe_entry(), skew=(_skew_entry(), _skew_entry())),
    ],
)
def test_moe_parse_refuses_a_malformed_table(body: Any) -> None:
    with pytest.raises(KernelFitError):
        parse_kernel_fit_moe(body)


@pytest.mark.parametrize(
    "body",
    [
        {"format": KERNEL_FIT_COMM_FORMAT, "source": {}},
        _comm_doc(_comm_entry(library="mpi")),
        _comm_doc(_comm_entry(op="broadcast")),
        _comm_doc(_comm_entry(num_gpus=1)),
        _comm_doc(_comm_entry(num_gpus=True)),
        _comm_doc(_comm_entry(mode="lazy")),
        _comm_doc(_comm_entry(bandwidth_gb_s=[10.0, 0.0])),
        _comm_doc(_comm_entry(bandwidth_gb_s=[10.0])),
        _comm_doc(_comm_entry(latency_us=math.inf)),
        _comm_doc(_comm_entry(), _comm_entry()),
    ],
)
def test_comm_parse_refuses_a_malformed_table(body: Any) -> None:
    with pytest.raises(KernelFitError):
        parse_kernel_fit_comm(body)


def test_loaders_refuse_a_missing_or_non_json_file(tmp_path: Path) -> None:
    for load in (load_kernel_fit_moe, load_kernel_fit_comm):
        with pytest.raises(KernelFitError, match="cannot read"):
            load(tmp_path / "absent.json")
        broken = tmp_path / "broken.json"
        broken.write_text("[", encoding="utf-8")
        with pytest.raises(KernelFitError, match="not json"):
            load(broken)


@pytest.mark.parametrize(
    ("path", "key"), [(KERNEL_FIT_MOE_PATH, "moe"), (KERNEL_FIT_COMM_PATH, "collectives")]
)
def test_packaged_tables_carry_their_provenance_and_residuals(path: Path, key: str) -> None:
    body = json.loads(path.read_text(encoding="utf-8"))
    assert body["source"]["package"] == "aiconfigurator-core"
    assert body["source"]["version"] == "0.12.0"
    assert body[key]
    for entry in body[key]:
        assert entry["train"]["points"] > 0
        assert math.isfinite(entry["train"]["median_abs_error_pct"])
        assert entry.get("engine_version") or entry.get("versions")


def test_packaged_curves_lie_in_range() -> None:
    fit = kernel_fit_moe()
    for curve in fit.curves.values():
        rows = curve.gemm.compute_efficiency
        assert all(0 < e <= 1 for row in rows for e in row)
        assert 0 <= curve.gemm.fixed_us <= 300 and 0 <= curve.expert_us <= 20
        assert 0 <= curve.route_passes <= 40
    for comm in kernel_fit_comm().values():
        assert 0 < comm.latency_us <= 200
        assert all(0 < b <= 2000 for b in comm.bandwidth_gb_s)
    for engine in ("vllm", "sglang", "trtllm"):
        assert fit.curve(H100, engine, "bfloat16") is not None
        assert (H100, engine, "power_law_1.2") in fit.skew
    for skew in fit.skew.values():
        assert all(0.2 < f < 5 for f in skew.factor)


def test_moe_label_follows_the_checkpoint_and_the_mxfp4_activations() -> None:
    from app.core.catalog.quantization import parse_quantization

    fp8 = parse_quantization("FP8")
    assert moe_label(fp8, "FP8", "fp4") == "fp8_block"
    assert moe_label(fp8, None, "fp4") == "fp8"
    mxfp4 = parse_quantization("MXFP4")
    assert moe_label(mxfp4, "MXFP4", "bf16") == "w4a16_mxfp4"
    assert moe_label(mxfp4, "MXFP4", "fp8") == "w4a8_mxfp4_mxfp8"
    assert moe_label(mxfp4, "MXFP4", "fp4") is None


def _runner(model: str, tp: int, engine: str | None) -> ModelRunner:
    return ModelRunner(
        get_model(model), get_device(H100), ParallelLayout(tp=tp), kernel_engine=engine
    )


def test_fitted_grouped_gemm_time_is_the_curve_by_hand() -> None:
    runner = _runner(MIXTRAL, 1, "vllm")
    fit = runner.plan.moe_fit
    assert fit is not None and fit.source == "fitted:vllm"
    ops = runner.run_inference(DECODE).breakdown.ops
    op = next(o for o in ops if o.name == "experts_up")
    model = get_model(MIXTRAL)
    assert model.moe is not None
    e, k = model.moe.num_experts, model.moe.experts_per_token
    h, width = model.hidden_size, model.moe.expert_intermediate_size
    tokens = DECODE.concurrency
    routes, touched = tokens * k, e * (1 - (1 - k / e) ** tokens)
    rate = fit.peak_flops_per_s * fit.curve.gemm.compute_efficiency_at(
        routes / touched, 3 * h * width
    )
    bandwidth = fit.peak_hbm_bytes_per_s * fit.curve.gemm.memory_efficiency_at(3 * h * width)
    flops = FLOPS_PER_MAC * routes * h * 2 * width
    hbm = touched * h * 2 * width * 2 + routes * h * 2 + routes * 2 * width * 2
    launch = fit.graph_fixed_s + touched * fit.expert_s  # a decode step: in the graph
    assert fit.graph_fixed_s == pytest.approx(IN_GRAPH_FLOOR_US["vllm"] * 1e-6)
    assert op.source == "fitted:vllm"
    assert op.time_ms == pytest.approx((max(flops / rate, hbm / bandwidth) + launch) * MS_PER_S)
    names = {o.name for o in ops if o.category is OpCategory.MOE}
    assert "experts_act" not in names  # fused into the fitted up GEMM
    combine = next(o for o in ops if o.name == "moe_combine_sum")
    assert combine.source == "fitted:vllm"
    assert combine.hbm_bytes == pytest.approx(fit.curve.route_passes * routes * h * 2)


def test_collectives_take_the_engine_kernel_or_nccl_when_switched_on() -> None:
    runner = _runner(LLAMA, 4, "trtllm")
    ops = runner.run_inference(DECODE).breakdown.ops
    reduce = next(o for o in ops if o.name == "attn_all_reduce")
    fitted = runner.plan.comm_fit
    assert fitted is not None
    chosen = fitted.get(Collective.ALL_REDUCE, 4, graph=True)
    assert chosen is not None and chosen.source == "fitted:trtllm"  # the custom all-reduce
    assert reduce.source == "fitted:trtllm"
    assert reduce.time_ms == pytest.approx(chosen.curve.time_s(reduce.comm_bytes) * MS_PER_S)
    gather = fitted.get(Collective.ALL_GATHER, 4, graph=True)
    assert gather is not None and gather.source == "fitted:nccl"
    default = _runner(LLAMA, 4, None).run_inference(DECODE).breakdown.ops
    assert all(o.source == DEFAULT_SOURCE for o in default)
    assert _runner(LLAMA, 4, None).plan.comm_fit is None


def test_validate_prices_moe_and_collectives_with_the_fit_per_engine() -> None:
    device = get_device(H100)
    moe_key = ("bfloat16", 64, 4096, 14336, 2, 8, 1, 1, "balanced", "")
    prices = {
        engine: KernelPricer(device, engine).price(KernelFamily.MOE, moe_key).predicted_ms
        for engine in (None, "vllm", "trtllm")
    }
    assert len(set(prices.values())) == 3
    versions = sorted(
        version
        for device_name, engine, label, version in kernel_fit_moe().curves
        if (device_name, engine, label) == (B200, "vllm", "bfloat16")
    )
    assert len(versions) >= 2  # vLLM changed its MoE kernels between versions
    b200 = get_device(B200)
    by_version = {
        KernelPricer(b200, "vllm", version).price(KernelFamily.MOE, moe_key).predicted_ms
        for version in versions
    }
    assert len(by_version) == len(versions)
    nccl = ("half", "all_reduce", 8, 2**20)
    assert (
        KernelPricer(device, "vllm").price(KernelFamily.NCCL, nccl).predicted_ms
        == KernelPricer(device, "trtllm").price(KernelFamily.NCCL, nccl).predicted_ms
    )  # NCCL's curve, whichever engine's folder measured it


def test_validate_prices_a_skewed_distribution_with_its_factor() -> None:
    pricer = KernelPricer(get_device(H100), "trtllm")
    shape = (4096, 4096, 14336, 2, 8, 1, 1)
    balanced = pricer.price(KernelFamily.MOE, ("bfloat16", *shape, "balanced", ""))
    skewed = pricer.price(KernelFamily.MOE, ("bfloat16", *shape, "power_law_1.2", ""))
    assert balanced.predicted_ms is not None and skewed.predicted_ms is not None
    tokens_per_expert = 4096 * 2 / (8 * (1 - (1 - 2 / 8) ** 4096))
    skew = kernel_fit_moe().skew[(H100, "trtllm", "power_law_1.2")]
    assert skewed.predicted_ms == pytest.approx(
        balanced.predicted_ms * skew.factor_at(tokens_per_expert)
    )
    assert skewed.op == "moe[power_law_1.2]"
    default = KernelPricer(get_device(H100)).price(
        KernelFamily.MOE, ("bfloat16", *shape, "power_law_1.2", "")
    )
    plain = KernelPricer(get_device(H100)).price(
        KernelFamily.MOE, ("bfloat16", *shape, "balanced", "")
    )
    assert default.predicted_ms == plain.predicted_ms  # the defaults route uniformly


def test_validate_prices_non_gated_experts_with_two_matrices() -> None:
    pricer = KernelPricer(get_device(H100))  # the defaults: weights and flops scale by matrices

    def price(shape: tuple[int, int, int, int], kernel: str) -> float:
        hidden, inter, topk, experts = shape
        key = ("bfloat16", 4096, hidden, inter, topk, experts, 1, 1, "balanced", kernel)
        latency = pricer.price(KernelFamily.MOE, key).predicted_ms
        assert latency is not None
        return latency

    shape = (4096, 14336, 2, 8)
    gated, plain = price(shape, "moe_torch_flow_cutlass"), price(shape, "moe_torch_flow_nongated")
    assert plain < gated
    nemotron = sorted(NONGATED_MOE)[0]  # non-gated by its shape, whatever the label
    assert price(nemotron, "") == price(nemotron, "moe_torch_flow_nongated")
    key = ("bfloat16", 1, *shape, 1, 1, "balanced", "moe_torch_flow_min_latency")
    assert pricer.price(KernelFamily.MOE, key).op == "moe[min_latency]"
