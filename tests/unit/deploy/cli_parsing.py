"""An ``argparse`` parser built from an engine's shipped option list (tests only): parsing an
emitted command with it fails on any option the engine does not document."""

from __future__ import annotations

import argparse
from typing import NoReturn

from app.core.deploy import EngineCli


class UndocumentedOptionError(Exception):
    pass


class _Strict(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UndocumentedOptionError(message)


def documented_parser(cli: EngineCli) -> argparse.ArgumentParser:
    parser = _Strict(prog=" ".join(cli.program), add_help=False, allow_abbrev=False)
    if cli.positional_model:
        parser.add_argument("model")
    for option in cli.options:
        if option.takes_value:
            parser.add_argument(*option.names, choices=option.choices)
        else:
            parser.add_argument(*option.names, action="store_true")
    return parser


def parse_emitted(cli: EngineCli, argv: tuple[str, ...] | list[str]) -> argparse.Namespace:
    """Parse ``argv`` (the program first) with the engine's documented options only."""
    program = tuple(argv[: len(cli.program)])
    if program != cli.program:
        raise UndocumentedOptionError(f"program {program} is not {cli.program}")
    return documented_parser(cli).parse_args(list(argv[len(cli.program) :]))
