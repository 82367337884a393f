"""Issue 15's W4 and issue 34's N13 against ``chunkwise serve`` on loopback, with real
sockets: the request line and headers are bounded in size (a 1 MiB head is answered 431, not a
TCP reset) and in time (``APP_HEADER_TIMEOUT_S``: an idle connection is closed, a trickled head
answered 408), and a body not whole ``APP_BODY_TIMEOUT_S`` after it starts is answered 408,
whether it stopped or trickles (300 half-sent bodies stayed open before, tricklers a minute)."""

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
HEADER_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("APP_")}
    env.update(
        APP_CACHE_BACKEND="memory",
        APP_LOG_LEVEL="warning",
        APP_BODY_TIMEOUT_S=str(BODY_TIMEOUT_S),
        APP_HEADER_TIMEOUT_S=str(HEADER_TIMEOUT_S),
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
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b"application/problem+json" in answer and b"headers-too-large" in answer


def test_a_one_mib_header_sent_whole_is_answered_431_not_reset(server: str) -> None:
    """The client writes its whole 1 MiB head before reading: the server answers, shuts its
    side and drains, so the client reads the 431 (a close with unread data was a reset)."""
    big = b"y" * (1024 * 1024)
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + big + b"\r\n\r\n")
        answer = _read_all(sock, 10)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]


def test_an_idle_connection_is_closed(server: str) -> None:
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=5) as sock:
        started = time.monotonic()
        answer = _read_all(sock, HEADER_TIMEOUT_S + 5)
        waited = time.monotonic() - started
    assert answer == b""
    assert HEADER_TIMEOUT_S * 0.8 <= waited < HEADER_TIMEOUT_S + 3


def test_a_trickled_head_is_answered_408(server: str) -> None:
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=5) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        answer = b""
        sock.settimeout(0.2)
        while time.monotonic() - started < HEADER_TIMEOUT_S + 5:
            try:
                sock.sendall(b"X")  # one byte of a header line every 0.2 s
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
            answer += chunk
            if not chunk or b"\r\n\r\n" in answer:
                break
        waited = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b"header-timeout" in answer
    assert waited < HEADER_TIMEOUT_S + 3


def test_a_trickled_body_is_answered_408(server: str) -> None:
    """One byte every 0.2 s never leaves the connection silent for the body timeout; the body
    as a whole is still late."""
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=5) as sock:
        sock.sendall(
            b"POST /v1/chunk-plan HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n"
        )
        started = time.monotonic()
        answer = b""
        sock.settimeout(0.2)
        for _ in range(99):
            try:
                sock.sendall(b" ")
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
            answer += chunk
            if not chunk or b"body-timeout" in answer:
                break
        waited = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408"), answer[:300]
    assert waited < BODY_TIMEOUT_S + 3


def test_keep_alive_still_serves_a_second_request(server: str) -> None:
    with httpx.Client(base_url=server, timeout=5) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/healthz").status_code == 200


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
