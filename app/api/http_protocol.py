"""The HTTP/1.1 connection ``chunkwise serve`` runs: uvicorn's h11 protocol with a bounded
request head.

uvicorn bounds idle keep-alive connections after a response (``timeout_keep_alive``) but not a
connection that has not finished its first request head: 300 idle connections stayed open for
30 s and more, a client trickling its headers held one for a minute, and a head past h11's size
bound was answered by closing the socket with the rest unread (the client saw a TCP reset, not
a status). Here:

- the request line and headers must be whole ``header_timeout_s`` (``APP_HEADER_TIMEOUT_S``)
  after the connection opens or the previous response ends: a connection that sent nothing is
  closed, one with a partial head is answered 408;
- a head past :data:`app.core.limits.MAX_HEADER_BYTES` is answered 431;
- both refusals are problem+json with ``Connection: close``, and the connection then closes
  gracefully: our side is shut, what the client still sends is read and dropped (at most
  :data:`LINGER_BYTES`, :data:`LINGER_S`), so the answer reaches it instead of a reset.

The body is bounded by the app (``APP_BODY_TIMEOUT_S``, ``APP_MAX_BODY_BYTES``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from app.api.errors import PROBLEM_BASE
from app.core import limits
from app.settings import get_settings

#: After a refusal, what the client may still send is read and dropped for this long and up
#: to this much, then the connection closes (a graceful close instead of a reset).
LINGER_S = 2.0
LINGER_BYTES = 4 * 1024 * 1024
#: The blank line that ends a head (h11 also accepts bare line feeds).
_HEAD_ENDS = (b"\r\n\r\n", b"\n\n")


def _refusal(status: int, reason: str, kind: str, title: str, detail: str) -> bytes:
    body = json.dumps(
        {"type": PROBLEM_BASE + kind, "title": title, "status": status, "detail": detail}
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "content-type: application/problem+json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a head deadline, a 431 and a graceful close (see module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._lingering = -1  # bytes dropped after a refusal; -1: not refusing

    # -- the head deadline ---------------------------------------------------------------
    def _await_head(self) -> None:
        """Arm the deadline of the next request head (if not armed)."""
        if self._head_timer is None and not self.transport.is_closing():
            timeout_s = get_settings().header_timeout_s
            self._head_timer = self.loop.call_later(timeout_s, self._head_too_slow)
            self._head_bytes = 0

    def _head_arrived(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._head_bytes == 0:  # nothing sent: an idle connection, closed quietly
            self.transport.close()
            return
        timeout_s = get_settings().header_timeout_s
        self._refuse(
            _refusal(
                408,
                "Request Timeout",
                "header-timeout",
                "Request headers too slow",
                f"the request line and headers did not arrive within {timeout_s:g} s",
            )
        )

    # -- refusing ------------------------------------------------------------------------
    def _refuse(self, answer: bytes) -> None:
        """Answer, shut our side and drop what the client still sends (bounded), then close."""
        self._head_arrived()
        self._unset_keepalive_if_required()
        self._lingering = 0
        self.transport.write(answer)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)

    # -- uvicorn's protocol interface ------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_arrived()
        super().connection_lost(exc)

    def eof_received(self) -> bool | None:  # type: ignore[override]
        if self._lingering >= 0:
            self.transport.close()
        return None

    def data_received(self, data: bytes) -> None:
        if self._lingering >= 0:
            self._lingering += len(data)
            if self._lingering > LINGER_BYTES:
                self.transport.close()
            return
        if self.conn.their_state is h11.IDLE:
            self._await_head()
            self._head_bytes += len(data)
            pending = self.conn.trailing_data[0] + data
            window = pending[: limits.MAX_HEADER_BYTES + 4]
            if len(pending) > limits.MAX_HEADER_BYTES and not any(
                end in window for end in _HEAD_ENDS
            ):
                self._refuse(
                    _refusal(
                        431,
                        "Request Header Fields Too Large",
                        "headers-too-large",
                        "Request header fields too large",
                        f"the request line and headers exceed {limits.MAX_HEADER_BYTES} bytes",
                    )
                )
                return
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._head_arrived()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._await_head()
