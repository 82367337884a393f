"""Optional bearer-token authentication of ``/v1`` (off unless keys are configured).

Keys come from ``APP_API_KEYS`` (comma-separated tokens) and ``APP_API_KEYS_FILE`` (one
``sha256:<hex digest>`` of a token per line, ``#`` comments): only their SHA-256 digests are kept.
A ``/v1`` request must send ``Authorization: Bearer <token>`` with one of them, else 401
problem+json with ``WWW-Authenticate: Bearer``. The digest of the token is the request's owner
(:data:`~app.services.context.REQUEST_OWNER`): the calibrations it stores are its own, and
another key is told they do not exist (404). ``/healthz``, ``/readyz``, ``/metrics``, the docs
and the dashboard's files stay open.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from fastapi import HTTPException, Request

from app.services.context import REQUEST_OWNER
from app.settings import Settings

#: A line of the keys file: the SHA-256 digest of one token.
_HASHED = re.compile(r"sha256:([0-9a-f]{64})")
_BEARER = re.compile(r"Bearer ([\x21-\x7e]{1,512})", re.IGNORECASE)


def key_digest(token: str) -> str:
    """The SHA-256 hex digest of a token (what the keys file holds, and the owner id)."""
    return hashlib.sha256(token.encode()).hexdigest()


def load_key_digests(settings: Settings) -> frozenset[str]:
    """The digests of every configured key (empty: authentication is off). A malformed keys
    file stops the service at start-up with the line that is wrong."""
    digests = {key_digest(token.strip()) for token in settings.api_keys.split(",") if token.strip()}
    if settings.api_keys_file:
        path = Path(settings.api_keys_file)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            match = _HASHED.fullmatch(text)
            if match is None:
                raise ValueError(
                    f"{path}:{number}: not a hashed key (sha256:<64 lowercase hex digits>)"
                )
            digests.add(match.group(1))
    return frozenset(digests)


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(401, detail, headers={"WWW-Authenticate": "Bearer"})


async def authenticate(request: Request) -> None:
    """The ``/v1`` routers' dependency: a valid bearer token when keys are configured (401
    otherwise), whose digest becomes the request's owner. Async, so the owner it sets is the
    handler's (and the worker threads' it starts)."""
    digests: frozenset[str] = request.app.state.key_digests
    if not digests:
        return
    header = request.headers.get("authorization", "")
    match = _BEARER.fullmatch(header.strip())
    if match is None:
        raise _unauthorized("send Authorization: Bearer <token> (APP_API_KEYS)")
    digest = key_digest(match.group(1))
    if digest not in digests:
        raise _unauthorized("the bearer token is not a key of this service")
    REQUEST_OWNER.set(digest)
