"""Launch configurations: every emitted command parses with the engine's documented options,
carries the row's values, and the manifests hold the replica count and GPUs per replica."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import replace
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from app.core.catalog import get_device
from app.core.deploy import (
    ENGINE_CLIS,
    LAUNCH_ENGINES,
    TRTLLM_EXTRA_OPTION_KEYS,
    TRTLLM_EXTRA_OPTIONS_FILE,
    LaunchSpec,
    build_launch_config,
    profile_values,
)
from app.core.deploy.manifests import resource_name
from app.core.deploy.platforms import ASCEND_A2, ASCEND_A3, ASCEND_RESOURCE, platform_for
from app.core.errors import InvalidParameterError, UnknownEngineError
from app.core.parallel import ParallelLayout
from app.core.profiles import SGLANG, TRTLLM, VLLM
from tests.unit.deploy.cli_parsing import UndocumentedOptionError, parse_emitted

DENSE = ParallelLayout(tp=2, dp=4)
MOE_COUPLED = ParallelLayout(tp=1, dp=8, ep=8)


def _spec(engine: str, **overrides: Any) -> LaunchSpec:
    values: dict[str, Any] = {
        "engine": engine,
        "model": "Qwen/Qwen3-32B",
        "layout": DENSE,
        "coupled": False,
        "num_devices": 8,
        "max_batched_tokens": 8192,
        "max_running_requests": 96,
        "memory_fraction": 0.9,
    }
    values.update(overrides)
    return LaunchSpec(**values)


def _moe_spec(engine: str) -> LaunchSpec:
    """A MoE row whose experts span the DP ranks (one instance), FP8, MTP, overlap on."""
    return _spec(
        engine,
        model="deepseek-ai/DeepSeek-V3",
        layout=MOE_COUPLED,
        coupled=True,
        kv_cache_dtype="fp8",
        weight_quantization="fp8",
        num_mtp_tokens=2,
        overlap_scheduling=True,
    )


SPECS = [pytest.param(_spec(engine), id=f"{engine}-dense") for engine in LAUNCH_ENGINES] + [
    pytest.param(_moe_spec(engine), id=f"{engine}-moe-mtp") for engine in LAUNCH_ENGINES
]


@pytest.mark.parametrize("spec", SPECS)
def test_emitted_command_uses_only_documented_options(spec: LaunchSpec) -> None:
    config = build_launch_config(spec)
    args = parse_emitted(ENGINE_CLIS[spec.engine], config.argv)
    assert spec.model in (getattr(args, "model", None), getattr(args, "model_path", None))


@pytest.mark.parametrize("engine", LAUNCH_ENGINES)
def test_the_checker_rejects_an_undocumented_option(engine: str) -> None:
    config = build_launch_config(_spec(engine))
    with pytest.raises(UndocumentedOptionError):
        parse_emitted(ENGINE_CLIS[engine], (*config.argv, "--made-up-option", "1"))
    with pytest.raises(UndocumentedOptionError):  # a value outside the documented choices
        argv = list(config.argv)
        if engine == "trtllm":
            argv[argv.index("--backend") + 1] = "onnx"
        else:
            argv[argv.index("--kv-cache-dtype") + 1] = "int3"
        parse_emitted(ENGINE_CLIS[engine], argv)


def test_vllm_flags_carry_the_row() -> None:
    config = build_launch_config(_spec("vllm"))
    args = parse_emitted(ENGINE_CLIS["vllm"], config.argv)
    assert args.tensor_parallel_size == "2"
    assert args.pipeline_parallel_size == "1"
    assert args.data_parallel_size is None  # dense DP is 4 replicas, not one instance
    assert args.max_num_batched_tokens == "8192"
    assert args.max_num_seqs == "96"
    assert args.gpu_memory_utilization == "0.9"
    assert args.kv_cache_dtype == "auto"
    assert not args.enable_expert_parallel
    assert (config.replicas, config.devices_per_replica) == (4, 2)
    assert config.files == {}


def test_vllm_moe_instance_with_mtp() -> None:
    config = build_launch_config(_moe_spec("vllm"))
    args = parse_emitted(ENGINE_CLIS["vllm"], config.argv)
    assert args.data_parallel_size == "8"
    assert args.enable_expert_parallel
    assert args.kv_cache_dtype == "fp8"
    assert args.quantization == "fp8"
    assert json.loads(args.speculative_config) == {"method": "mtp", "num_speculative_tokens": 2}
    assert args.async_scheduling
    assert (config.replicas, config.devices_per_replica) == (1, 8)


def test_sglang_dp_attention_counts_are_instance_wide() -> None:
    config = build_launch_config(_moe_spec("sglang"))
    args = parse_emitted(ENGINE_CLIS["sglang"], config.argv)
    assert (args.tp_size, args.dp_size, args.ep_size) == ("8", "8", "8")
    assert args.enable_dp_attention
    # SGLang divides both by --dp-size: 8 ranks x the row's per-rank values.
    assert args.chunked_prefill_size == str(8192 * 8)
    assert args.max_running_requests == str(96 * 8)
    assert args.kv_cache_dtype == "fp8_e4m3"
    assert args.speculative_algorithm == "EAGLE"
    assert (args.speculative_num_steps, args.speculative_num_draft_tokens) == ("2", "3")
    assert not args.disable_overlap_schedule


def test_sglang_emits_redundant_expert_slots_and_the_others_refuse_them() -> None:
    """SGLang's --ep-num-redundant-experts (server_args.py) carries the engine option; vLLM and
    TensorRT-LLM launches are refused naming it rather than launched without the slots."""
    plain = parse_emitted(ENGINE_CLIS["sglang"], build_launch_config(_moe_spec("sglang")).argv)
    assert plain.ep_num_redundant_experts is None
    spec = replace(_moe_spec("sglang"), redundant_experts=32)
    args = parse_emitted(ENGINE_CLIS["sglang"], build_launch_config(spec).argv)
    assert args.ep_num_redundant_experts == "32" and args.ep_size == "8"
    for engine in ("vllm", "trtllm"):
        with pytest.raises(InvalidParameterError, match=r"engine_options\.redundant_experts"):
            replace(_moe_spec(engine), redundant_experts=32)


def test_sglang_dense_replica() -> None:
    config = build_launch_config(_spec("sglang", memory_fraction=0.871))
    args = parse_emitted(ENGINE_CLIS["sglang"], config.argv)
    assert (args.tp_size, args.dp_size, args.ep_size) == ("2", None, None)
    assert args.chunked_prefill_size == "8192"
    assert args.max_running_requests == "96"
    assert args.mem_fraction_static == "0.871"
    assert args.disable_overlap_schedule  # overlap_scheduling False in this spec
    assert args.port == "8000"


def test_trtllm_command_and_extra_options_yaml() -> None:
    config = build_launch_config(_moe_spec("trtllm"))
    args = parse_emitted(ENGINE_CLIS["trtllm"], config.argv)
    # argparse names each value after the first documented spelling
    parallel = (args.tensor_parallel_size, args.pipeline_parallel_size)
    assert (*parallel, args.moe_expert_parallel_size) == ("8", "1", "8")
    assert (args.max_batch_size, args.max_num_tokens) == ("96", "8192")
    assert args.free_gpu_memory_fraction == "0.9"
    assert args.config.endswith(TRTLLM_EXTRA_OPTIONS_FILE)
    extra = yaml.safe_load(config.files[TRTLLM_EXTRA_OPTIONS_FILE])
    assert extra == {
        "enable_attention_dp": True,
        "disable_overlap_scheduler": False,
        "kv_cache_config": {"dtype": "fp8", "free_gpu_memory_fraction": 0.9},
        "cuda_graph_config": {"enable_padding": True, "max_batch_size": 96},
        "speculative_config": {"decoding_type": "MTP", "num_nextn_predict_layers": 2},
    }
    _only_documented_keys(extra)
    assert any("pre-quantized" in note for note in config.notes)


def _only_documented_keys(extra: dict[str, Any]) -> None:
    assert set(extra) <= TRTLLM_EXTRA_OPTION_KEYS[""]
    for section, value in extra.items():
        if isinstance(value, dict):
            assert set(value) <= TRTLLM_EXTRA_OPTION_KEYS[section], section


def test_trtllm_without_graphs_and_without_mtp() -> None:
    config = build_launch_config(_spec("trtllm", cuda_graph_max_batch=0))
    extra = yaml.safe_load(config.files[TRTLLM_EXTRA_OPTIONS_FILE])
    assert extra["cuda_graph_config"] is None
    assert "speculative_config" not in extra
    assert extra["enable_attention_dp"] is False
    _only_documented_keys(extra)
    small = build_launch_config(_spec("trtllm", cuda_graph_max_batch=32))
    extra = yaml.safe_load(small.files[TRTLLM_EXTRA_OPTIONS_FILE])
    assert extra["cuda_graph_config"]["max_batch_size"] == 32


@pytest.mark.parametrize("spec", SPECS)
def test_kubernetes_manifest_structure(spec: LaunchSpec) -> None:
    config = build_launch_config(spec)
    documents = list(yaml.safe_load_all(config.kubernetes))
    kinds = [doc["kind"] for doc in documents]
    assert kinds[:2] == ["Deployment", "Service"]
    deployment, service = documents[0], documents[1]
    assert deployment["spec"]["replicas"] == config.replicas
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"] == list(config.argv)
    assert container["resources"]["limits"]["nvidia.com/gpu"] == config.devices_per_replica
    assert container["ports"][0]["containerPort"] == spec.port
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"] == labels
    assert service["spec"]["selector"] == labels
    assert service["spec"]["ports"][0]["port"] == spec.port
    if config.files:
        assert kinds[2] == "ConfigMap"
        assert documents[2]["data"] == dict(config.files)
    else:
        assert len(documents) == 2


@pytest.mark.parametrize("spec", SPECS)
def test_compose_service_structure(spec: LaunchSpec) -> None:
    config = build_launch_config(spec)
    services = yaml.safe_load(config.compose)["services"]
    (service,) = services.values()
    assert service["entrypoint"] == list(config.argv)
    assert service["deploy"]["replicas"] == config.replicas
    device = service["deploy"]["resources"]["reservations"]["devices"][0]
    assert (device["driver"], device["count"]) == ("nvidia", config.devices_per_replica)
    assert bool(service.get("volumes")) == bool(config.files)


@pytest.mark.parametrize(
    ("layout", "coupled", "num_devices", "replicas", "per_replica"),
    [
        (ParallelLayout(tp=8), False, 8, 1, 8),
        (ParallelLayout(tp=2, dp=4), False, 8, 4, 2),
        (ParallelLayout(tp=2, dp=2, pp=2), False, 8, 2, 4),
        (ParallelLayout(tp=4, dp=2), False, 16, 4, 4),  # more devices than one layout
        (ParallelLayout(tp=1, dp=8, ep=8), True, 8, 1, 8),
        (ParallelLayout(tp=2, dp=4, ep=8), True, 16, 2, 8),
    ],
)
def test_replicas_are_devices_over_devices_per_instance(
    layout: ParallelLayout, coupled: bool, num_devices: int, replicas: int, per_replica: int
) -> None:
    config = build_launch_config(
        _spec("vllm", layout=layout, coupled=coupled, num_devices=num_devices)
    )
    assert (config.replicas, config.devices_per_replica) == (replicas, per_replica)


def test_bad_specs_name_the_field() -> None:
    with pytest.raises(UnknownEngineError, match="msmodeling"):
        _spec("msmodeling")
    with pytest.raises(InvalidParameterError, match="num_devices"):
        _spec("vllm", num_devices=7)  # not a multiple of the TP2 instances
    for field, value in (
        ("max_running_requests", 0),
        ("memory_fraction", 1.5),
        ("port", 70000),
        ("num_mtp_tokens", -1),
        ("model", " "),
    ):
        with pytest.raises(InvalidParameterError, match=field):
            _spec("sglang", **{field: value})


def test_a_hostile_model_id_cannot_break_the_yaml() -> None:
    model = 'x":y,-evil:[1]{'
    config = build_launch_config(_spec("vllm", model=model))
    container = next(iter(yaml.safe_load_all(config.kubernetes)))["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert container["command"][2] == model
    assert resource_name("Qwen/Qwen3-32B  FP8") == "qwen-qwen3-32b-fp8"
    assert resource_name("///") == "llm"
    assert len(resource_name("a" * 100)) == 63


def test_profile_values_follow_the_engine_rules() -> None:
    h100 = get_device("NVIDIA_H100_SXM_80G")
    kw: dict[str, Any] = {
        "hbm_capacity_gb": h100.hbm_capacity_gb,
        "device_name": h100.name,
        "vendor": h100.vendor,
        "layout": DENSE,
    }
    vllm = profile_values(VLLM, **kw)
    assert (vllm.token_budget, vllm.running_cap, vllm.memory_fraction) == (8192, 1024, 0.9)
    sglang = profile_values(SGLANG, **kw)
    assert sglang.memory_fraction == SGLANG.static_fraction(
        h100.hbm_capacity_gb, h100.vendor, DENSE.tp, DENSE.dp
    )
    assert sglang.running_cap is None and sglang.overlap_scheduling
    trtllm = profile_values(TRTLLM, **kw)
    assert (trtllm.token_budget, trtllm.running_cap, trtllm.memory_fraction) == (8192, 2048, 0.9)
    tuned = profile_values(dataclasses.replace(VLLM, memory_fraction=0.8), **kw)
    assert tuned.memory_fraction == 0.8


@pytest.mark.parametrize("model", ["--trust-remote-code", "-q", "Qwen/Qwen3 32B", "a\nb", "x\x00"])
def test_a_model_id_that_would_be_an_option_or_split_is_refused(model: str) -> None:
    with pytest.raises(InvalidParameterError, match="model"):
        _spec("vllm", model=model)


RFC1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@given(st.text(max_size=120))
def test_kubernetes_names_are_rfc_1035_labels(text: str) -> None:
    name = resource_name(text)
    assert RFC1035.match(name) and len(name) <= 63, name


def test_a_model_starting_with_a_digit_gets_a_letter_first() -> None:
    config = build_launch_config(_spec("vllm", model="01-ai/Yi-34B"))
    for document in yaml.safe_load_all(config.kubernetes):
        assert RFC1035.match(document["metadata"]["name"])
    assert resource_name("01-ai/Yi-34B-vllm") == "m-01-ai-yi-34b-vllm"


def test_platforms_per_device() -> None:
    assert platform_for("huawei", "ATLAS_800_A3_752T_128G_DIE") is ASCEND_A3
    assert platform_for("huawei", "ATLAS_800_A2_376T_64G") is ASCEND_A2
    other = platform_for("huawei", "ATLAS_350_425T_112G")
    assert other.is_npu and other.notes
    assert not platform_for("nvidia", "NVIDIA_H100_SXM_80G").is_npu


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("moe", [False, True])
def test_ascend_launch_uses_the_npu_image_plugin_mounts_and_hccl(engine: str, moe: bool) -> None:
    spec = dataclasses.replace(_moe_spec(engine) if moe else _spec(engine), platform=ASCEND_A3)
    spec = dataclasses.replace(spec, kv_cache_dtype="auto", weight_quantization=None)
    config = build_launch_config(spec)
    args = parse_emitted(ENGINE_CLIS[engine], config.argv)
    if engine == "sglang":
        assert (args.device, args.attention_backend) == ("npu", "ascend")
    deployment = next(iter(yaml.safe_load_all(config.kubernetes)))
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"].startswith("quay.io/ascend/") and container["image"].endswith("a3")
    assert container["resources"]["limits"] == {ASCEND_RESOURCE: config.devices_per_replica}
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["HCCL_OP_EXPANSION_MODE"] == "AIV"
    assert ("HCCL_BUFFSIZE" in env) == moe
    host_paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert "/usr/local/Ascend/driver/lib64" in host_paths
    assert "nvidia" not in config.kubernetes + config.compose
    services = yaml.safe_load(config.compose)["services"]
    assert len(services) == config.replicas
    nodes = [
        d
        for svc in services.values()
        for d in svc["devices"]
        if re.fullmatch(r"/dev/davinci\d+", d)
    ]
    assert len(nodes) == len(set(nodes)) == config.replicas * config.devices_per_replica
    for svc in services.values():
        assert {"/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"} <= set(svc["devices"])
        assert svc["environment"]["HCCL_OP_EXPANSION_MODE"] == "AIV"
