"""Domain exception tree.

::

    ChunkwiseError
     ├── InvalidParameterError      a value is outside its allowed range (names field + range)
     ├── UnknownNameError           a catalog/policy name is not known (lists valid names)
     │    ├── UnknownModelError
     │    ├── UnknownDeviceError
     │    ├── UnknownSchedulerError
     │    └── UnknownEngineError
     ├── UnsupportedError           a well-formed request the model cannot handle
     ├── InfeasibleError            the configuration cannot run at all (e.g. memory)
     ├── SimulationError            the scheduler made no progress or broke an invariant
     ├── SearchLimitError           a search would exceed its configured bounds
     └── DeadlineExceededError      a computation ran past its deadline

The API maps each class once (``app/api/errors.py``); the CLI prints ``str(err)`` and exits 2.
"""

from __future__ import annotations

from collections.abc import Iterable


class ChunkwiseError(Exception):
    """Base of every error the core raises on purpose."""

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle as the instance's class, message and attributes (subclasses take other
        arguments than the message, so the default ``cls(*args)`` would not rebuild them):
        an error raised in a child process reaches the worker as itself."""
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


def _rebuild(
    cls: type[ChunkwiseError], args: tuple[object, ...], state: dict[str, object]
) -> ChunkwiseError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class InvalidParameterError(ChunkwiseError, ValueError):
    """A parameter is outside its allowed range."""

    def __init__(self, field: str, value: object, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}={_shown(value)} is invalid: must be {allowed}")


#: The longest rendering of a rejected value in a message (a hostile body can send megabytes).
MAX_SHOWN_VALUE = 200


def _shown(value: object) -> str:
    """``repr(value)``, cut to :data:`MAX_SHOWN_VALUE` characters."""
    try:
        text = repr(value)
    except RecursionError:  # a value nested past the interpreter's limit
        text = f"<{type(value).__name__} nested too deep to show>"
    if len(text) > MAX_SHOWN_VALUE:
        text = text[: MAX_SHOWN_VALUE - 3] + "..."
    return text


class UnknownNameError(ChunkwiseError, LookupError):
    """A name is not in its catalog."""

    kind = "name"

    def __init__(self, name: str, valid: Iterable[str], *, field: str | None = None) -> None:
        self.name = name
        self.valid = sorted(valid)
        #: The request field that named it (default: the kind, e.g. ``device``).
        self.field = field or self.kind
        super().__init__(f"unknown {self.kind} {name!r}; valid: {', '.join(self.valid)}")

    def __str__(self) -> str:
        return str(self.args[0])


class UnknownModelError(UnknownNameError):
    kind = "model"


class UnknownDeviceError(UnknownNameError):
    kind = "device"


class UnknownSchedulerError(UnknownNameError):
    kind = "scheduler"


class UnknownEngineError(UnknownNameError):
    kind = "engine"


class UnsupportedError(ChunkwiseError):
    """A well-formed input the latency model cannot represent."""


class InfeasibleError(ChunkwiseError):
    """The configuration cannot serve even one request (for example its KV cache does not fit)."""


class SimulationError(ChunkwiseError, RuntimeError):
    """The simulation cannot make progress (for example a scheduler returned an empty step)."""


class SearchLimitError(ChunkwiseError):
    """A requested search exceeds its bounds."""


class DeadlineExceededError(ChunkwiseError, TimeoutError):
    """A computation ran past its deadline."""
