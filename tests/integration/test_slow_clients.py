"""Issue 15's W4 against ``chunkwise serve`` on loopback: the request line and headers are
bounded (a 100 MB header was read whole before), and a body that stops arriving is answered
408 after ``APP_BODY_TIMEOUT_S`` of silence (300 half-sent bodies stayed open before)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.core import limits
from tests.integration.conftest import free_port, wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BODY_TIMEOUT_S = 0.5


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("APP_")}
    env.update(
        APP_CACHE_BACKEND="memory",
        APP_LOG_LEVEL="warning",
        APP_BODY_TIMEOUT_S=str(BODY_TIMEOUT_S),
        PYTHONPATH=str(ROOT),
    )
    log = (tmp_path_factory.mktemp("serve") / "serve.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: httpx.get(f"{base}/healthz").status_code == 200, timeout_s=30)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=20)
        log.close()


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def _read_all(sock: socket.socket, timeout_s: float) -> bytes:
    sock.settimeout(timeout_s)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


def test_a_header_past_the_bound_is_refused(server: str) -> None:
    big = "x" * (limits.MAX_HEADER_BYTES * 4)
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=5) as sock:
        sent = 0
        request = f"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n".encode()
        try:
            while sent < len(request):
                sent += sock.send(request[sent : sent + 65536])
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server stopped reading: what the bound is for
        answer = _read_all(sock, 5)
    assert not answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert answer == b"" or answer.startswith(b"HTTP/1.1 4")


def test_a_normal_header_is_served(server: str) -> None:
    response = httpx.get(f"{server}/healthz", headers={"X-Fine": "y" * 4000}, timeout=5)
    assert response.status_code == 200


def test_a_half_sent_body_is_answered_408(server: str) -> None:
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=5) as sock:
        sock.sendall(
            b"POST /v1/chunk-plan HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"input_length": 1'
        )
        started = time.monotonic()
        answer = _read_all(sock, 10)
        waited = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408"), answer[:300]
    assert b"body-timeout" in answer
    assert BODY_TIMEOUT_S * 0.8 <= waited < BODY_TIMEOUT_S + 5


def test_a_whole_body_is_not_cut(server: str) -> None:
    response = httpx.post(
        f"{server}/v1/chunk-plan", json={"input_length": 1000, "max_batched_tokens": 256}, timeout=5
    )
    assert response.status_code == 200
