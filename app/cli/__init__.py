"""The ``chunkwise`` command line: a thin adapter over the service functions."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from app.cli.parser import build_parser

__all__ = ["EXIT_BROKEN_PIPE", "build_parser", "main"]

#: Exit status of a command whose reader closed the pipe (``chunkwise ... | head``): 128 + SIGPIPE.
EXIT_BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except BrokenPipeError:
        # The reader has what it wanted; no traceback, and no second error when Python
        # flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
