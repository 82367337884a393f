"""``validate --kernels``: a measured kernel shape priced with the runner's own op costs."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.catalog import get_device, get_model
from app.core.catalog.architecture import FfnKind, LayerAttention
from app.core.catalog.quantization import AttentionQuantAction, LinearQuantAction, Quantization
from app.core.cost import ForwardShape
from app.core.parallel import ParallelLayout
from app.core.runner.layers import ForwardBuilder
from app.core.runner.ops import OpCost
from app.core.runner.plan import build_plan
from app.core.validation.kernels import (
    KERNEL_TABLES,
    KEY_COLUMNS,
    NO_DEVICE,
    SPLIT_MODULUS,
    SYSTEM_DEVICES,
    KernelFamily,
    KernelPricer,
    build_report,
    error_pct,
    error_stats,
    split_of,
    table_refusal,
)

H100 = get_device("NVIDIA_H100_SXM_80G")
GRAPH_LAUNCH_MS = H100.graph_kernel_launch_us / 1e3


@pytest.fixture(scope="module")
def pricer() -> KernelPricer:
    return KernelPricer(H100)


def test_every_system_maps_to_a_catalog_device() -> None:
    for system, name in SYSTEM_DEVICES.items():
        assert get_device(name).name == name, system


def test_every_family_has_a_table_and_key_columns() -> None:
    assert set(KERNEL_TABLES.values()) == set(KernelFamily)
    assert set(KEY_COLUMNS) == set(KernelFamily)


# -- GEMM: known answers ------------------------------------------------------------------------
def test_a_large_bf16_gemm_runs_at_the_ramped_16bit_peak(pricer: KernelPricer) -> None:
    m = n = k = 8192
    rate = H100.peak_bf16_tflops * 1e12 * H100.gemm_efficiency_16bit
    rate *= m / (m + H100.gemm_half_efficiency_tokens)
    expected_ms = 2 * m * n * k / rate * 1e3 + GRAPH_LAUNCH_MS
    got = pricer.price(KernelFamily.GEMM, ("bfloat16", m, n, k))
    assert got.predicted_ms == pytest.approx(expected_ms, rel=1e-12)
    assert (got.op, got.quantization, got.band, got.reason) == ("gemm", "bfloat16", "M>1024", "")


def test_a_one_row_fp8_gemm_streams_its_weights(pricer: KernelPricer) -> None:
    n, k = 7168, 2048
    hbm = H100.hbm_bandwidth_gb_s * 1e9 * H100.memory_efficiency
    bytes_moved = k * n * 1.0 + k * 1.0 + n * 2.0  # fp8 weights and input, 16-bit output
    expected_ms = bytes_moved / hbm * 1e3 + GRAPH_LAUNCH_MS
    got = pricer.price(KernelFamily.GEMM, ("fp8", 1, n, k))
    assert got.predicted_ms == pytest.approx(expected_ms, rel=1e-12)
    assert got.band == "M<=128"


def test_block_scaled_fp8_is_priced_as_fp8_and_labelled_apart(pricer: KernelPricer) -> None:
    block = pricer.price(KernelFamily.GEMM, ("fp8_block", 512, 4096, 4096))
    tensor = pricer.price(KernelFamily.GEMM, ("fp8", 512, 4096, 4096))
    assert block.predicted_ms == tensor.predicted_ms
    assert (block.quantization, block.band) == ("fp8_block", "M 129-1024")


@given(st.integers(1, 1 << 15), st.sampled_from(["bfloat16", "fp8", "nvfp4", "int4_wo"]))
def test_gemm_latency_grows_with_m(m: int, dtype: str) -> None:
    pricer = KernelPricer(get_device("NVIDIA_B200_SXM_180G"))
    small = pricer.price(KernelFamily.GEMM, (dtype, m, 4096, 4096)).predicted_ms
    large = pricer.price(KernelFamily.GEMM, (dtype, m + 1, 4096, 4096)).predicted_ms
    assert small is not None and large is not None and large >= small


# -- the other families are exactly the runner's ops in a real forward ----------------------------
def _ops_total(ops: list[OpCost], names: set[str]) -> float:
    picked = [op.total_ms for op in ops if op.name in names]
    assert picked, names
    return sum(picked)


def test_moe_is_the_forwards_routed_expert_ops(pricer: KernelPricer) -> None:
    model = get_model("mistralai/Mixtral-8x7B-v0.1")
    moe = model.moe
    assert moe is not None
    parallel = ParallelLayout(tp=2, ep=2)
    plan = build_plan(model, H100, parallel, Quantization(linear=LinearQuantAction.FP8))
    tokens = 64
    decode = ForwardShape(is_decode=True, concurrency=tokens, query_len=1, seq_len=2048)
    builder = ForwardBuilder(plan, (decode,), graph_mode=True)
    group = next(g for g in model.layer_groups if g.ffn is FfnKind.MOE)
    builder.layer_group(group, "layers", 1, tokens, [(decode, tokens)])
    expected = _ops_total(
        builder.ops, {"experts_up", "experts_act", "experts_down", "moe_combine_sum"}
    )
    key = (
        "fp8",
        tokens,
        model.hidden_size,
        moe.expert_intermediate_size,
        moe.experts_per_token,
        moe.num_experts,
        1,  # each expert whole (moe_tp)
        2,  # experts over two devices
        "balanced",
    )
    got = pricer.price(KernelFamily.MOE, key)
    assert got.predicted_ms == pytest.approx(expected, rel=1e-12)
    assert got.band == "tok/expert 1-16"  # 64 tokens x 2 / 8 experts = 16 (bands are (a, b])
    skewed = pricer.price(KernelFamily.MOE, (*key[:-1], "power_law_1.2"))
    assert skewed.predicted_ms == got.predicted_ms and skewed.op == "moe[power_law_1.2]"


def test_attention_is_the_forwards_attention_kernel(pricer: KernelPricer) -> None:
    model = get_model("meta-llama/Llama-3.1-8B")
    plan = build_plan(model, H100, ParallelLayout(), Quantization())
    decode = ForwardShape(is_decode=True, concurrency=32, query_len=1, seq_len=4096)
    builder = ForwardBuilder(plan, (decode,), graph_mode=True)
    builder.layer_group(model.layer_groups[0], "layers", 1, 32, [(decode, 32)])
    expected = _ops_total(builder.ops, {"decode_attention"})
    key = (
        "bfloat16",
        "bfloat16",
        32,
        1,
        4095,
        model.num_heads,
        model.num_kv_heads,
        model.head_dim,
        0,
    )
    got = pricer.price(KernelFamily.GENERATION_ATTENTION, key)
    assert got.predicted_ms == pytest.approx(expected, rel=1e-12)
    assert (got.quantization, got.band) == ("bfloat16/kv bfloat16", "ctx 1k-8k")


def test_a_sliding_window_caps_the_attended_context(pricer: KernelPricer) -> None:
    full = pricer.price(
        KernelFamily.CONTEXT_ATTENTION, ("bfloat16", "bfloat16", 1, 16384, 0, 32, 8, 128, 0)
    )
    windowed = pricer.price(
        KernelFamily.CONTEXT_ATTENTION, ("bfloat16", "bfloat16", 1, 16384, 0, 32, 8, 128, 1024)
    )
    assert full.predicted_ms is not None and windowed.predicted_ms is not None
    assert windowed.predicted_ms < full.predicted_ms / 4


def test_mla_and_its_bmms_are_the_forwards_mla_ops(pricer: KernelPricer) -> None:
    model = get_model("deepseek-ai/DeepSeek-V3")
    plan = build_plan(model, H100, ParallelLayout(tp=8), Quantization())
    decode = ForwardShape(is_decode=True, concurrency=16, query_len=1, seq_len=2048)
    builder = ForwardBuilder(plan, (decode,), graph_mode=True)
    builder.layer_group(model.layer_groups[-1], "layers", 1, 16, [(decode, 16)])
    heads = model.num_heads // 8
    mla = pricer.price(KernelFamily.GENERATION_MLA, ("bfloat16", "bfloat16", 16, 1, 2047, heads))
    assert mla.predicted_ms == pytest.approx(_ops_total(builder.ops, {"decode_attention"}))
    pre = pricer.price(KernelFamily.MLA_BMM, ("bfloat16", "mla_gen_pre", 16, heads))
    post = pricer.price(KernelFamily.MLA_BMM, ("bfloat16", "mla_gen_post", 16, heads))
    assert pre.predicted_ms == pytest.approx(_ops_total(builder.ops, {"q_absorb"}))
    assert post.predicted_ms == pytest.approx(_ops_total(builder.ops, {"v_up"}))
    assert pre.op == "mla_bmm[mla_gen_pre]"


@pytest.mark.parametrize("decode", [True, False])
def test_gated_deltanet_is_the_forwards_conv_and_delta_rule(
    pricer: KernelPricer, decode: bool
) -> None:
    model = get_model("Qwen/Qwen3.5-397B-A17B")
    dims = model.linear_attention
    assert dims is not None
    plan = build_plan(model, H100, ParallelLayout(tp=4), Quantization())
    length = 1 if decode else 2048
    shape = ForwardShape(is_decode=decode, concurrency=8, query_len=length, seq_len=length)
    builder = ForwardBuilder(plan, (shape,), graph_mode=True)
    linear = next(g for g in model.layer_groups if g.attention is LayerAttention.LINEAR)
    builder.layer_group(linear, "layers", 1, 8 * length, [(shape, 8 * length)])
    phase = "generation" if decode else "context"
    key = (phase, 8, length, dims.num_key_heads // 4, dims.key_head_dim)
    key_tail = (dims.num_value_heads // 4, dims.value_head_dim, dims.conv_kernel_size)
    conv = pricer.price(KernelFamily.GDN, ("causal_conv1d_fn", *key, *key_tail))
    rule = pricer.price(KernelFamily.GDN, ("chunk_gated_delta_rule", *key, *key_tail))
    if not decode:
        # Prefill runs eager in a forward; the kernel pays the graph cost here.
        eager_gap_ms = (H100.kernel_launch_us - H100.graph_kernel_launch_us) / 1e3
    else:
        eager_gap_ms = 0.0
    assert conv.predicted_ms is not None and rule.predicted_ms is not None
    assert conv.predicted_ms + eager_gap_ms == pytest.approx(
        _ops_total(builder.ops, {"gdn_conv1d"})
    )
    rule_op = "gdn_recurrent" if decode else "gdn_chunked"
    assert rule.predicted_ms + eager_gap_ms == pytest.approx(_ops_total(builder.ops, {rule_op}))
    assert (conv.op, rule.op, rule.quantization) == (
        f"gdn_conv1d[{phase}]",
        f"gdn_delta_rule[{phase}]",
        "bfloat16",
    )


@pytest.mark.parametrize("decode", [True, False])
def test_dsa_kernels_are_the_forwards_indexer_and_attention(
    pricer: KernelPricer, decode: bool
) -> None:
    """GLM-5's kernel tables (one layer, the table's 64 heads on one device, no engine: the
    analytic pricing) are the forward's ``indexer_logits``, ``indexer_topk`` and MLA kernel."""
    model = get_model("zhipuai/GLM-5")
    # An FP8 latent cache read by 16-bit math: the runner's INT8 attention action.
    plan = build_plan(
        model, H100, ParallelLayout(), Quantization(attention=AttentionQuantAction.INT8)
    )
    isl, step = (1, 8191) if decode else (4096, 4096)
    shape = ForwardShape(is_decode=decode, concurrency=4, query_len=isl, seq_len=isl + step)
    builder = ForwardBuilder(plan, (shape,), graph_mode=True)
    builder.layer_group(model.layer_groups[-1], "layers", 1, 4 * isl, [(shape, 4 * isl)])
    eager_gap_ms = 0.0 if decode else (H100.kernel_launch_us - H100.graph_kernel_launch_us) / 1e3
    priced = {
        source: pricer.price(KernelFamily.DSA, (source, "fp8_e4m3", 4, isl, step, 64, mode))
        for source, mode in (
            ("deep_gemm.fp8_mqa_logits", None),
            ("fast_topk_transform_fused", "flat"),
            ("flash_mla_sparse_fwd", None),
        )
    }
    logits, topk, attention = priced.values()
    assert (logits.op, topk.op, attention.op) == (
        "dsa_indexer_logits",
        "dsa_indexer_topk[flat]",
        "dsa_sparse_mla",
    )
    for prediction, op in (
        (logits, "indexer_logits"),
        (topk, "indexer_topk"),
        (attention, "decode_attention" if decode else "flash_attention"),
    ):
        assert prediction.predicted_ms is not None
        assert prediction.predicted_ms + eager_gap_ms == pytest.approx(
            _ops_total(builder.ops, {op})
        ), op


def test_a_collective_is_the_runners_collective(pricer: KernelPricer) -> None:
    tier = H100.interconnect[0]
    elements = 1 << 26
    message = elements * 2.0
    bandwidth = tier.bandwidth_gb_s * 1e9 * tier.efficiency
    # NVSwitch: (n-1)/n of the buffer per phase, ceil(log2 8) latencies per phase.
    expected_s = 2 * 7 / 8 * message / bandwidth + 2 * 3 * tier.latency_us * 1e-6
    got = pricer.price(KernelFamily.NCCL, ("half", "all_reduce", 8, elements))
    assert got.predicted_ms == pytest.approx(expected_s * 1e3 + GRAPH_LAUNCH_MS)
    assert (got.op, got.band) == ("nccl[all_reduce]", "msg>4MiB")
    eager = pricer.price(KernelFamily.CUSTOM_ALL_REDUCE, ("bfloat16", 8, elements, "vllm_eager"))
    eager_launch_ms = H100.kernel_launch_us / 1e3
    assert eager.predicted_ms == pytest.approx(expected_s * 1e3 + eager_launch_ms)
    assert eager.op == "custom_all_reduce[eager]"


# -- refusals -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("family", "key", "reason"),
    [
        (KernelFamily.GEMM, ("int2", 1, 1, 1), "GEMM dtype int2: no runner quantization"),
        (KernelFamily.GEMM, ("fp8", 0, 1, 1), "m is not a positive integer"),
        (KernelFamily.GEMM, ("fp8", None, 1, 1), "m is not a non-negative integer"),
        (
            KernelFamily.MOE,
            ("w4afp8", 1, 1024, 512, 2, 8, 1, 1, "balanced"),
            "MoE dtype w4afp8: no runner quantization",
        ),
        (
            KernelFamily.CONTEXT_ATTENTION,
            ("bfloat16", "bfloat16", 1, 16, 0, 12, 8, 128, 0),
            "num_key_value_heads does not divide num_heads",
        ),
        (
            KernelFamily.CONTEXT_ATTENTION,
            ("fp8", "bfloat16", 1, 16, 0, 8, 8, 128, 0),
            "attention in fp8 over a bfloat16 KV cache: no runner action",
        ),
        (KernelFamily.MLA_BMM, ("bfloat16", "mla_ctx", 1, 16), "MLA BMM mla_ctx: no runner op"),
        (
            KernelFamily.GDN,
            ("chunk_kda", "context", 1, 16, 16, 128, 16, 128, 4),
            "Gated DeltaNet kernel chunk_kda: no runner op",
        ),
        (
            KernelFamily.NCCL,
            ("half", "broadcast", 8, 1024),
            "collective broadcast: no runner collective",
        ),
        (
            KernelFamily.NCCL,
            ("half", "all_gather", 2048, 1024),
            "2048 devices exceed the device's 1024",
        ),
    ],
)
def test_a_shape_the_runner_cannot_represent_says_why(
    pricer: KernelPricer, family: KernelFamily, key: tuple[object, ...], reason: str
) -> None:
    got = pricer.price(family, key)
    assert (got.predicted_ms, got.reason) == (None, reason)


def test_the_runners_own_refusal_is_passed_on(pricer: KernelPricer) -> None:
    got = pricer.price(KernelFamily.MOE, ("bfloat16", 4, 1024, 512, 2, 6, 1, 4, "balanced"))
    assert got.predicted_ms is None and got.reason.startswith("runner refuses the shape: ep=4")


@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        ("mla_context_module_perf", "module measurement"),
        ("wideep_context_moe_perf", "wide-EP"),
        ("kda_perf", "Kimi delta attention"),
        ("dsa_context_module_perf", "module measurement"),
        ("dsa_generation_module_perf", "module measurement"),
        ("dsv4_csa_topk_calib_perf", "sparse-attention"),
        ("computescale_perf", "quantization kernel"),
        ("something_new_perf", "table something_new_perf: no runner op"),
    ],
)
def test_tables_without_a_runner_op_are_refused_whole(table: str, fragment: str) -> None:
    reason = table_refusal(table)
    assert reason is not None and fragment in reason


def test_modelled_tables_are_not_refused() -> None:
    assert all(table_refusal(table) is None for table in KERNEL_TABLES)
    assert NO_DEVICE


# -- report ---------------------------------------------------------------------------------------
def test_error_stats_known_answer() -> None:
    stats = error_stats([-10.0, 20.0, 30.0, -40.0])
    assert stats.n == 4
    assert stats.median_abs_pct == pytest.approx(25.0)
    assert stats.p90_abs_pct == pytest.approx(37.0)  # 30 + 0.7 x (40 - 30)
    assert stats.median_signed_pct == pytest.approx(5.0)
    assert error_pct(2.0, 1.0) == -50.0
    with pytest.raises(ValueError):
        error_stats([])


@given(st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=50))
def test_error_stats_are_ordered(errors: list[float]) -> None:
    stats = error_stats(errors)
    assert 0 <= stats.median_abs_pct <= stats.p90_abs_pct <= max(abs(e) for e in errors)
    assert min(errors) <= stats.median_signed_pct <= max(errors)


def test_report_groups_bands_and_refusals() -> None:
    errors = {
        ("h100_sxm", "vllm", "gemm", "fp8", ""): [10.0, -30.0],
        ("h100_sxm", "vllm", "gemm", "fp8", "M<=128"): [-30.0],
        ("h100_sxm", "vllm", "gemm", "fp8", "M>1024"): [10.0],
    }
    report = build_report(errors, {"module measurement": 3, "no catalog device": 1}, points=6)
    assert (report.points, report.predicted) == (6, 2)
    body = report.to_dict()
    assert body["refused"] == 4
    assert [key[4] or "all" for key, _ in report.groups] == ["all", "M<=128", "M>1024"]
    assert json.loads(json.dumps(body))["groups"][1]["band"] == "M<=128"
    assert body["refusals"] == [
        {"reason": "module measurement", "points": 3},
        {"reason": "no catalog device", "points": 1},
    ]
    table = report.format_table()
    assert "6 measured points: 2 predicted, 4 refused" in table
    assert "refused         3  module measurement" in table


def test_the_split_is_stable_and_holds_out_one_shape_in_four() -> None:
    shapes = [f"m={m} n=4096 k=4096" for m in range(4000)]
    test = [s for s in shapes if split_of(s) == "test"]
    assert split_of(shapes[7]) == split_of(str(shapes[7]))
    assert abs(len(test) / len(shapes) - 1 / SPLIT_MODULUS) < 0.03
