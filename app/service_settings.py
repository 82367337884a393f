"""The service's settings as a plain pydantic model, and the environment read as
pydantic-settings reads it, without importing pydantic-settings.

pydantic-settings costs a command-line process ~25 ms of imports (python-dotenv, its cloud
sources, asyncio); a CLI command reads its settings with :func:`settings_from_environ`, the
service (``chunkwise serve``, workers) with :class:`app.settings.Settings`, a subclass that
adds nothing but the environment source. tests/unit/test_settings_environ.py holds the two
readings equal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: The prefix of every setting's environment variable.
ENV_PREFIX = "APP_"

_ORIGIN = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?")


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


class ServiceSettings(BaseModel):
    """The service's settings as values; :class:`app.settings.Settings` reads them from the
    environment (variables prefixed with ``APP_``, for example ``APP_CACHE_BACKEND``)."""

    # As pydantic-settings configures a BaseSettings: defaults validated, other keys ignored.
    model_config = ConfigDict(extra="ignore", validate_default=True)

    # Latency cache: "memory" is an in-process LRU (one worker); "redis" is shared by workers.
    cache_backend: Literal["memory", "redis"] = "memory"
    # The port `chunkwise serve` listens on when --port is not given (the container's
    # healthcheck reads the same variable).
    port: int = Field(default=8000, ge=1, le=65535)
    redis_url: str = "redis://127.0.0.1:6379/0"
    cache_max_entries: int = Field(default=200_000, ge=1)
    cache_max_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)  # in-process backend only
    cache_ttl_s: int = Field(default=7 * 24 * 3600, ge=1)
    # Closed-loop plans (scheduling decisions, no latency) a process keeps: runs plus request
    # records, ~93 bytes each (500,000: ~47 MB; one 4-layout closed-loop search of 8 GPUs plans
    # ~165,000); 0 keeps none (every search and simulation plans afresh).
    plan_cache_items: int = Field(default=500_000, ge=0)
    # Stored calibration profiles (POST /v1/calibrations) expire after this long.
    calibration_ttl_s: int = Field(default=30 * 24 * 3600, ge=1)
    # Short socket timeouts: a sick Redis must cost milliseconds, not the request.
    redis_connect_timeout_s: float = Field(default=0.25, gt=0)
    redis_socket_timeout_s: float = Field(default=0.5, gt=0)
    # After a Redis failure, requests skip Redis for this long before trying to reconnect.
    redis_retry_interval_s: float = Field(default=1.0, ge=0)

    # Worker processes serving one port (`chunkwise serve --workers` sets it): with more than
    # one and the in-process cache, calibrations are refused (each worker would remember its
    # own: a profile stored by one would 404 on the next).
    workers: int = Field(default=1, ge=1, le=1024)

    # Identical optimize requests are answered from the cache backend (whole response).
    response_cache: bool = True
    # CPU-bound computations per worker process: running at once, and waiting before a 503.
    # In threads (heavy_processes 0) they share the GIL, so fewer slots let the light lane
    # through faster (bench/deadline.py while 16 heavy requests ran: cheap p99 53-118 ms at 1
    # slot, 98-112 ms at 2, 434 ms at 8), but then a request waiting on a hung cache waits
    # behind a whole computation (tests/integration/test_faults.py): 8 keeps those overlapping;
    # parallelism comes from worker processes.
    max_concurrent_computations: int = Field(default=8, ge=1, le=256)
    # Heavy computations in this many child processes per worker (0: in the worker's threads;
    # unset: one child with Redis, threads with the in-process cache). Children share nothing
    # but the cache backend, so processes need APP_CACHE_BACKEND=redis; the worker's
    # interpreter then serves the event loop and the light lane alone, and a cheap request
    # never waits for the lock a search holds (bench/deadline.py: cheap p99 344 ms in threads,
    # 20 ms with one child per worker; app/services/processes.py).
    heavy_processes: int | None = Field(default=None, ge=0, le=64)
    # The light lane's slots (chunk plans, forwards, small simulations); 0: one lane for all.
    max_light_computations: int = Field(default=4, ge=0, le=256)
    # A request body not whole this long after the app starts reading it is answered 408
    # (slow, trickled or half-sent).
    body_timeout_s: float = Field(default=10.0, gt=0, le=600)
    # The request line and headers must be whole this long after the connection opens or
    # the previous response ends (chunkwise serve): a partial head is answered 408, a
    # connection that sent nothing is closed.
    header_timeout_s: float = Field(default=10.0, gt=0, le=600)
    max_queued_computations: int = Field(default=256, ge=0)
    # The interpreter's thread switch interval in a worker (Python's default is 5 ms).
    gil_switch_interval_s: float = Field(default=0.001, gt=0, le=0.1)
    # Largest accepted request body (an inline config.json is a few KB).
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    # Wall-clock budget of one optimize/simulate computation.
    request_deadline_s: float = Field(default=30.0, gt=0)

    # Bearer-token authentication of /v1 (off when both are empty): API_KEYS, comma-separated
    # tokens; API_KEYS_FILE, a file of "sha256:<hex digest>" lines (one hashed token each, #
    # comments). A request without a valid `Authorization: Bearer <token>` gets 401; stored
    # calibrations belong to the key that created them (another key gets 404).
    api_keys: str = Field(default="", repr=False)
    api_keys_file: str = ""

    # Sweeps (POST /v1/sweeps, chunkwise worker; docs/sweeps.md). The Celery broker: this Redis
    # URL, else APP_REDIS_URL when the cache backend is Redis; none: the API runs sweeps in
    # its own process pool (sweep_processes) and keeps them in memory until it stops.
    broker_url: str = ""
    # Where sweep state and rows, and stored calibrations, live (a Redis with persistence and
    # noeviction); empty: the broker's Redis (which Celery needs unevicted anyway).
    sweep_store_url: str = ""
    # A task not acknowledged this long after a worker took it is handed to another worker
    # (the worker died): longer than the slowest batch (MAX_BATCH scenarios), or a batch runs
    # twice (harmless: a row is written once, but the work is done twice).
    sweep_visibility_timeout_s: int = Field(default=3600, ge=1)
    # How often a worker looks for tasks whose visibility timeout passed.
    sweep_restore_interval_s: float = Field(default=10.0, gt=0)
    # Without a broker: processes of the API's own sweep pool (started with the first sweep).
    sweep_processes: int = Field(default=1, ge=1, le=64)
    # A sweep's state and rows are kept this long (from its creation).
    sweep_ttl_s: int = Field(default=30 * 24 * 3600, ge=1)

    log_level: str = "info"
    # Origins a browser page may call the API from (comma-separated, for example
    # "https://dash.example.com,http://localhost:3000"); empty: none (no CORS headers at all).
    cors_origins: str = ""

    @property
    def heavy_process_count(self) -> int:
        """Child processes for the heavy lane (``heavy_processes``, or its default)."""
        if self.heavy_processes is None:
            return 1 if self.cache_backend == "redis" else 0
        return self.heavy_processes

    @model_validator(mode="after")
    def _processes_share_a_cache(self) -> ServiceSettings:
        if self.heavy_processes and self.cache_backend != "redis":
            raise ValueError(
                "heavy_processes needs cache_backend 'redis' (child processes share only the "
                "cache backend; an in-process cache would be one per child)"
            )
        return self

    @field_validator("cors_origins")
    @classmethod
    def _check_origins(cls, value: str) -> str:
        for origin in _split(value):
            if origin != "*" and not _ORIGIN.fullmatch(origin):
                raise ValueError(
                    f"{origin!r} is not an origin: scheme://host[:port] (no path), or *"
                )
        return value

    @property
    def sweep_broker(self) -> str:
        """The sweeps' broker URL (empty: none, sweeps run in the API's own pool)."""
        if self.broker_url:
            return self.broker_url
        return self.redis_url if self.cache_backend == "redis" else ""

    @property
    def store_url(self) -> str:
        """The durable store's Redis, where sweeps and calibrations live: ``sweep_store_url``,
        else the sweeps' broker (empty: none, each process keeps its own)."""
        return self.sweep_store_url or self.sweep_broker

    @property
    def cors_origin_list(self) -> list[str]:
        return _split(self.cors_origins)


def settings_from_environ(environ: Mapping[str, str]) -> ServiceSettings:
    """The settings ``environ`` gives, read as :class:`app.settings.Settings` reads the process
    environment (pydantic-settings' defaults for a flat model of scalar fields: names compared
    case-insensitively, of two spellings of one name the later wins, values passed as the
    strings they are, an empty value included); a bad value raises the same ValidationError."""
    variables = {name.lower(): value for name, value in environ.items()}
    prefix = ENV_PREFIX.lower()
    given = {
        field: variables[prefix + field]
        for field in ServiceSettings.model_fields
        if prefix + field in variables
    }
    return ServiceSettings.model_validate(given)
