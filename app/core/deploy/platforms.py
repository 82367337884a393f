"""What a launch needs from the accelerator platform: the engine's container image, the
Kubernetes device-plugin resource, device nodes and driver mounts, and the environment.

CUDA (NVIDIA): the engines' own images (``options.EngineCli.image``), the NVIDIA device
plugin's ``nvidia.com/gpu`` and Docker's ``nvidia`` device driver.

Ascend NPUs (sources in ``docs/deploy.md``):

- Images: vLLM-Ascend's ``quay.io/ascend/vllm-ascend:<tag>`` (``-a3`` tags for Atlas A3,
  docs.vllm.ai/projects/ascend "Quick Start"), SGLang's ``quay.io/ascend/sglang:<tag>``
  (``-910b`` for Atlas A2, ``-a3`` for Atlas A3, docs.sglang.io "Ascend NPUs / Quickstart").
- Kubernetes: the MindCluster Ascend Device Plugin's ``huawei.com/Ascend910`` (hiascend.com
  MindCluster "Ascend Docker Runtime" usage); the plugin allocates the ``/dev/davinci<N>``
  nodes, the driver is mounted from the host as the engines' docker examples mount it.
- Docker: ``/dev/davinci<N>`` per device plus ``/dev/davinci_manager``, ``/dev/devmm_svm``,
  ``/dev/hisi_hdc``, and the driver paths (``/usr/local/dcmi``, ``npu-smi``,
  ``/usr/local/Ascend/driver/lib64``, ``version.info``, ``/etc/ascend_install.info``) read-only.
- Environment: the vLLM-Ascend tutorials' HCCL and allocator settings
  (``HCCL_OP_EXPANSION_MODE=AIV``, ``PYTORCH_NPU_ALLOC_CONF=expandable_segments:True``,
  ``TASK_QUEUE_ENABLE=1``; ``HCCL_BUFFSIZE=1024`` MB for expert-parallel dispatch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from app.core.profiles import NPU_VENDORS

#: vLLM-Ascend and SGLang-NPU image tags (the releases their docs name; ``image`` overrides).
VLLM_ASCEND_IMAGE = "quay.io/ascend/vllm-ascend:v0.23.0"
SGLANG_NPU_IMAGE = "quay.io/ascend/sglang:v0.5.14-cann9.0.0"
#: MindCluster Ascend Device Plugin resource of an Atlas A2 / A3 NPU (a die on A3).
ASCEND_RESOURCE = "huawei.com/Ascend910"
ASCEND_DEVICE_NODE = "/dev/davinci{index}"
ASCEND_CONTROL_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
ASCEND_DRIVER_PATHS = (
    "/usr/local/dcmi",
    "/usr/local/bin/npu-smi",
    "/usr/local/Ascend/driver/lib64",
    "/usr/local/Ascend/driver/version.info",
    "/etc/ascend_install.info",
)
ASCEND_ENV: tuple[tuple[str, str], ...] = (
    ("HCCL_OP_EXPANSION_MODE", "AIV"),
    ("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True"),
    ("TASK_QUEUE_ENABLE", "1"),
)
#: HCCL's buffer (MB) for expert-parallel token dispatch (the vLLM-Ascend MoE tutorials).
ASCEND_EP_ENV: tuple[tuple[str, str], ...] = (("HCCL_BUFFSIZE", "1024"),)
CUDA_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True, slots=True, kw_only=True)
class Platform:
    """How an engine container reaches the devices of one accelerator family."""

    name: str
    #: The Kubernetes extended resource one device is (device plugin).
    resource: str
    #: Per-engine image tags (empty: the engine's own CUDA image).
    images: Mapping[str, str] = field(default_factory=dict)
    #: The device node of device ``index`` (``""``: Docker's device driver reserves them).
    device_node: str = ""
    control_devices: tuple[str, ...] = ()
    #: Host paths mounted read-only into the container (the driver).
    host_paths: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    #: Extra environment of an expert-parallel launch.
    ep_env: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def is_npu(self) -> bool:
        return bool(self.device_node)

    def environment(self, expert_parallel: bool) -> tuple[tuple[str, str], ...]:
        return (*self.env, *self.ep_env) if expert_parallel else self.env


CUDA = Platform(name="cuda", resource=CUDA_RESOURCE)


def _ascend(suffix: str, sglang_suffix: str, notes: tuple[str, ...] = ()) -> Platform:
    return Platform(
        name="ascend",
        resource=ASCEND_RESOURCE,
        images={
            "vllm": VLLM_ASCEND_IMAGE + suffix,
            "sglang": f"{SGLANG_NPU_IMAGE}-{sglang_suffix}",
        },
        device_node=ASCEND_DEVICE_NODE,
        control_devices=ASCEND_CONTROL_DEVICES,
        host_paths=ASCEND_DRIVER_PATHS,
        env=ASCEND_ENV,
        ep_env=ASCEND_EP_ENV,
        notes=notes,
    )


ASCEND_A2 = _ascend("", "910b")
ASCEND_A3 = _ascend("-a3", "a3")


def platform_for(vendor: str, device_name: str) -> Platform:
    """The launch platform of a device: Atlas A3 (``_A3_`` in the name), Atlas A2, another
    Ascend card (the A2 images, with a note), or CUDA."""
    if vendor.lower() not in NPU_VENDORS:
        return CUDA
    name = device_name.upper()
    if "_A3_" in name:
        return ASCEND_A3
    if "_A2_" in name:
        return ASCEND_A2
    return _ascend(
        "",
        "910b",
        (
            f"no engine image is documented for {device_name}: the Atlas A2 images are "
            "emitted, pass image to choose another",
        ),
    )
