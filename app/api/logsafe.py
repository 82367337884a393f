"""Client-supplied text made safe for one log line."""

from __future__ import annotations


def loggable(text: str) -> str:
    """``text`` with every non-printable character escaped (``\\r`` -> ``\\x0d``), so a
    client's path or method (``%0d%0a`` decodes to CR LF) cannot forge a log line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
