"""Reading a measurement file's text with the csv module (shared by every file reader)."""

from __future__ import annotations

import csv
import io

from app.core.errors import InvalidParameterError


def csv_lines(text: str) -> io.StringIO:
    """``text`` as the csv module reads a file: newlines kept (a file saved with CR or CRLF
    line ends parses; a newline inside a quoted field stays in it)."""
    return io.StringIO(text, newline="")


def malformed_csv(exc: csv.Error) -> InvalidParameterError:
    """The 422 of a file the csv module cannot read (a stray quote, a field too large)."""
    return InvalidParameterError("csv", str(exc), "a well-formed CSV file")
