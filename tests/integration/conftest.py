"""A real ``redis-server`` on a free loopback port, started and stopped by the tests.

``.ci/run`` installs the Debian ``redis-server`` package; without the binary these tests fail
(loudly) rather than skip, so CI cannot go green without them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import redis

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: object, timeout_s: float = 10.0, what: str = "condition") -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (OSError, redis.RedisError, httpx.HTTPError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


@dataclass
class RedisServer:
    """One redis-server process; ``stop()`` and ``start()`` may be called mid-test."""

    workdir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    #: An append-only file in ``workdir`` (fsync on every write): a restart keeps the data.
    persistent: bool = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1)

    def start(self) -> None:
        assert self.process is None, "already running"
        self.process = subprocess.Popen(
            [
                REDIS_SERVER,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "yes" if self.persistent else "no",
                "--appendfsync",
                "always",
                "--dir",
                str(self.workdir),
                "--protected-mode",
                "yes",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(lambda: self.client().ping(), what="redis-server to answer PING")

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    assert os.path.exists(REDIS_SERVER), "redis-server is required (.ci/run installs it)"
    server = RedisServer(workdir=tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Uvicorn:
    """``uvicorn --factory app.main:create_app`` with N worker processes."""

    env: dict[str, str]
    workers: int = 2
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, log_path: Path) -> None:
        self.log_path = log_path
        log = log_path.open("wb")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                "app.main:create_app",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                str(self.workers),
                "--log-level",
                "warning",
            ],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=15)
        self.process = None

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""
