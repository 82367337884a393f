"""``chunkwise optimize --emit ENGINE``: the best row's launch after the table (the JSON
document carries it under ``deploy``), through the same service as ``POST /v1/deploy``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the wire models load with the command, not with the parser
    from app.models.optimize import OptimizeRequest, OptimizeResponse

#: The key of the launch in ``chunkwise optimize --format json --emit ...``.
DEPLOY_KEY = "deploy"


class _LaunchEngines:
    """``--emit``'s choices, :data:`app.core.deploy.LAUNCH_ENGINES`, read when argparse first
    asks (an ``--emit`` given, or the help): a search without ``--emit`` never loads the
    launch builders (about 13 ms of the CLI's start-up)."""

    @staticmethod
    def _names() -> tuple[str, ...]:
        from app.core.deploy import LAUNCH_ENGINES

        return LAUNCH_ENGINES

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


def add_emit_flag(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--emit",
        choices=_LaunchEngines(),
        metavar="ENGINE",  # argparse would list the choices when the flag is added
        default=None,
        help="print the best row's launch for this engine (%(choices)s) after the table: "
        "command, config file, replicas, Kubernetes and docker-compose manifests (JSON: under "
        "'deploy')",
    )


def launch_for_best(
    engine: str, request: OptimizeRequest, response: OptimizeResponse
) -> dict[str, Any] | None:
    """The launch of ``response``'s best row (``None``: no best row)."""
    from app.services.deploy import deploy, deploy_request_for_row

    if response.best is None:
        return None
    return deploy(deploy_request_for_row(engine, request, response.best)).model_dump(mode="json")


def launch_text(launch: dict[str, Any]) -> str:
    """A launch as text: the command, each file, the replicas and both manifests."""
    lines = [
        f"launch ({launch['engine']}): {launch['replicas']} replica(s) x "
        f"{launch['devices_per_replica']} device(s)",
        "",
        launch["command"]["text"],
    ]
    for name, text in launch["files"].items():
        lines += ["", f"# {name}", text.rstrip("\n")]
    lines += ["", "# kubernetes.yaml", launch["kubernetes"].rstrip("\n")]
    lines += ["", "# docker-compose.yaml", launch["compose"].rstrip("\n")]
    lines += [f"note: {note}" for note in launch["notes"]]
    return "\n".join(lines)


def print_launches(bodies: list[dict[str, Any]], fmt_name: str) -> None:
    """After the table (a CSV keeps stdout to itself: the launch goes to stderr); JSON
    already holds each launch under :data:`DEPLOY_KEY`."""
    if fmt_name == "json":
        return
    stream = sys.stderr if fmt_name == "csv" else sys.stdout
    for body in bodies:
        launch = body.get(DEPLOY_KEY)
        if launch is None:
            print(f"chunkwise: note: no best {body['mode']} row to emit", file=sys.stderr)
            continue
        print(launch_text(launch), file=stream)
