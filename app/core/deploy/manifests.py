"""Kubernetes and docker-compose text for a launch (YAML written by hand, no YAML library).

Strings are written as JSON strings, which YAML reads as double-quoted scalars, so a model id
or an argument with YAML syntax in it cannot change the document's structure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

#: Where config files are mounted in the container (TensorRT-LLM's extra-options YAML).
CONFIG_DIR = "/config"
#: The GPU resource of the NVIDIA device plugin (one per device of a replica).
GPU_RESOURCE = "nvidia.com/gpu"
#: A Kubernetes object name (RFC 1123 label): at most 63 characters.
MAX_NAME_CHARS = 63
#: Readiness probe: an engine loads weights and captures graphs before it serves.
READINESS_INITIAL_DELAY_S = 60
READINESS_PERIOD_S = 10
READINESS_FAILURES = 90


def resource_name(text: str) -> str:
    """``Qwen/Qwen3-32B-vllm`` -> ``qwen-qwen3-32b-vllm`` (a valid Kubernetes name)."""
    name = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
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
) -> str:
    """A Deployment (``replicas`` pods of ``devices`` GPUs each) and its Service; a ConfigMap
    when the launch has config files."""
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
        "          ports:",
        "            - name: http",
        f"              containerPort: {port}",
        "          resources:",
        "            limits:",
        f"              {GPU_RESOURCE}: {devices}",
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
    lines += [
        "      volumes:",
        "        - name: dshm",
        "          emptyDir:",
        "            medium: Memory",
    ]
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
    if files:
        lines += [
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
    return "\n".join(lines) + "\n"


def compose_text(
    *,
    name: str,
    image: str,
    argv: Sequence[str],
    port: int,
    devices: int,
    replicas: int,
    files: Mapping[str, str],
) -> str:
    """A docker-compose service: ``replicas`` containers of ``devices`` GPUs each (the host
    ports are left to Docker so the replicas can share a host); config files are mounted
    from the directory of the compose file."""
    lines = [
        "services:",
        f"  {name}:",
        f"    image: {_q(image)}",
        "    entrypoint:",
        *(f"      - {_q(arg)}" for arg in argv),
        "    ports:",
        f"      - {_q(str(port))}",
        "    ipc: host",
    ]
    if files:
        lines.append("    volumes:")
        lines += [f"      - {_q(f'./{f}:{CONFIG_DIR}/{f}:ro')}" for f in files]
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
