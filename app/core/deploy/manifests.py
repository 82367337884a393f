"""Kubernetes and docker-compose text for a launch (YAML written by hand, no YAML library).

Strings are written as JSON strings, which YAML reads as double-quoted scalars, so a model id
or an argument with YAML syntax in it cannot change the document's structure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

from app.core.deploy.platforms import Platform

#: Where config files are mounted in the container (TensorRT-LLM's extra-options YAML).
CONFIG_DIR = "/config"
#: A Kubernetes object name (RFC 1123 label, and RFC 1035 for a Service): at most 63
#: characters, lower-case letters, digits and ``-``, starting with a letter.
MAX_NAME_CHARS = 63
#: Put before a name that would start with a digit (``01-ai/Yi-34B``).
NAME_PREFIX = "m-"
#: Readiness probe: an engine loads weights and captures graphs before it serves.
READINESS_INITIAL_DELAY_S = 60
READINESS_PERIOD_S = 10
READINESS_FAILURES = 90


def resource_name(text: str) -> str:
    """``Qwen/Qwen3-32B-vllm`` -> ``qwen-qwen3-32b-vllm`` (a valid Kubernetes name)."""
    name = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if name[:1].isdigit():
        name = NAME_PREFIX + name
    name = name[:MAX_NAME_CHARS].rstrip("-")
    return name or "llm"


def _q(text: str) -> str:
    return json.dumps(text)


def _block(text: str, indent: int) -> list[str]:
    pad = " " * indent
    return [pad + line if line else "" for line in text.splitlines()]


def kubernetes_text(
    *,
    name: str,
    image: str,
    argv: Sequence[str],
    port: int,
    devices: int,
    replicas: int,
    health_path: str,
    files: Mapping[str, str],
    platform: Platform,
    env: Sequence[tuple[str, str]] = (),
) -> str:
    """A Deployment (``replicas`` pods of ``devices`` accelerators each, the platform's
    device-plugin resource) and its Service; a ConfigMap when the launch has config files.
    An NPU pod mounts the host's driver read-only (the plugin allocates the device nodes)."""
    labels = f"app.kubernetes.io/name: {_q(name)}"
    lines = [
        "apiVersion: apps/v1",
        "kind: Deployment",
        "metadata:",
        f"  name: {_q(name)}",
        "  labels:",
        f"    {labels}",
        "spec:",
        f"  replicas: {replicas}",
        "  selector:",
        "    matchLabels:",
        f"      {labels}",
        "  template:",
        "    metadata:",
        "      labels:",
        f"        {labels}",
        "    spec:",
        "      containers:",
        "        - name: engine",
        f"          image: {_q(image)}",
        "          command:",
        *(f"            - {_q(arg)}" for arg in argv),
        *_k8s_env(env),
        "          ports:",
        "            - name: http",
        f"              containerPort: {port}",
        "          resources:",
        "            limits:",
        f"              {platform.resource}: {devices}",
        "          readinessProbe:",
        "            httpGet:",
        f"              path: {_q(health_path)}",
        "              port: http",
        f"            initialDelaySeconds: {READINESS_INITIAL_DELAY_S}",
        f"            periodSeconds: {READINESS_PERIOD_S}",
        f"            failureThreshold: {READINESS_FAILURES}",
        "          volumeMounts:",
        "            - name: dshm",
        "              mountPath: /dev/shm",
    ]
    if files:
        lines += [
            "            - name: config",
            f"              mountPath: {_q(CONFIG_DIR)}",
            "              readOnly: true",
        ]
    lines += _driver_mounts(platform)
    lines += [
        "      volumes:",
        "        - name: dshm",
        "          emptyDir:",
        "            medium: Memory",
    ]
    lines += _driver_volumes(platform)
    if files:
        lines += [
            "        - name: config",
            "          configMap:",
            f"            name: {_q(name + '-config')}",
        ]
    lines += [
        "---",
        "apiVersion: v1",
        "kind: Service",
        "metadata:",
        f"  name: {_q(name)}",
        "spec:",
        "  selector:",
        f"    {labels}",
        "  ports:",
        "    - name: http",
        f"      port: {port}",
        "      targetPort: http",
    ]
    lines += _config_map(name, files)
    return "\n".join(lines) + "\n"


def _config_map(name: str, files: Mapping[str, str]) -> list[str]:
    """The ConfigMap holding the launch's config files (none without files)."""
    if not files:
        return []
    lines = [
        "---",
        "apiVersion: v1",
        "kind: ConfigMap",
        "metadata:",
        f"  name: {_q(name + '-config')}",
        "data:",
    ]
    for file_name, text in files.items():
        lines.append(f"  {_q(file_name)}: |")
        lines += _block(text, 4)
    return lines


def _driver_mounts(platform: Platform) -> list[str]:
    """The container's read-only mounts of the host's driver paths (an NPU pod's)."""
    lines: list[str] = []
    for index, path in enumerate(platform.host_paths):
        lines += [
            f"            - name: driver-{index}",
            f"              mountPath: {_q(path)}",
            "              readOnly: true",
        ]
    return lines


def _driver_volumes(platform: Platform) -> list[str]:
    """The pod's hostPath volumes behind :func:`_driver_mounts`."""
    lines: list[str] = []
    for index, path in enumerate(platform.host_paths):
        lines += [
            f"        - name: driver-{index}",
            "          hostPath:",
            f"            path: {_q(path)}",
        ]
    return lines


def compose_text(
    *,
    name: str,
    image: str,
    argv: Sequence[str],
    port: int,
    devices: int,
    replicas: int,
    files: Mapping[str, str],
    platform: Platform,
    env: Sequence[tuple[str, str]] = (),
) -> str:
    """A docker-compose service: ``replicas`` containers of ``devices`` GPUs each (the host
    ports are left to Docker so the replicas can share a host); config files are mounted
    from the directory of the compose file. NPUs have no Docker device driver: one service
    per replica, each given its own ``/dev/davinci<N>`` nodes (replica ``r`` the devices
    ``r * devices`` on), the control devices and the host's driver read-only."""
    if platform.is_npu:
        lines = ["services:"]
        for replica in range(replicas):
            nodes = [
                platform.device_node.format(index=replica * devices + d) for d in range(devices)
            ]
            lines += _compose_service(f"{name}-{replica}", image, argv, port, files, env)
            lines.append("    devices:")
            lines += [f"      - {_q(node)}" for node in (*nodes, *platform.control_devices)]
            if not files:
                lines.append("    volumes:")
            lines += [f"      - {_q(f'{path}:{path}:ro')}" for path in platform.host_paths]
        return "\n".join(lines) + "\n"
    lines = ["services:", *_compose_service(name, image, argv, port, files, env)]
    lines += [
        "    deploy:",
        f"      replicas: {replicas}",
        "      resources:",
        "        reservations:",
        "          devices:",
        "            - driver: nvidia",
        f"              count: {devices}",
        "              capabilities: [gpu]",
    ]
    return "\n".join(lines) + "\n"


def _compose_service(
    name: str,
    image: str,
    argv: Sequence[str],
    port: int,
    files: Mapping[str, str],
    env: Sequence[tuple[str, str]],
) -> list[str]:
    lines = [
        f"  {name}:",
        f"    image: {_q(image)}",
        "    entrypoint:",
        *(f"      - {_q(arg)}" for arg in argv),
        *_compose_env(env),
        "    ports:",
        f"      - {_q(str(port))}",
        "    ipc: host",
    ]
    if files:
        lines.append("    volumes:")
        lines += [f"      - {_q(f'./{f}:{CONFIG_DIR}/{f}:ro')}" for f in files]
    return lines


def _k8s_env(env: Sequence[tuple[str, str]]) -> list[str]:
    """A container's ``env:`` list (none when empty)."""
    if not env:
        return []
    lines = ["          env:"]
    for key, value in env:
        lines += [f"            - name: {key}", f"              value: {_q(value)}"]
    return lines


def _compose_env(env: Sequence[tuple[str, str]]) -> list[str]:
    """A compose service's ``environment:`` mapping (none when empty)."""
    if not env:
        return []
    return ["    environment:", *(f"      {key}: {_q(value)}" for key, value in env)]
