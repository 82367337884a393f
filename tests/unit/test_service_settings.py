"""The CLI's reading of the environment (app.service_settings.settings_from_environ, no
pydantic-settings) gives what the service's Settings() reads: the same values, the same errors."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from app.service_settings import ServiceSettings, settings_from_environ
from app.settings import Settings

ENVIRONMENTS = [
    {},
    {"APP_CACHE_BACKEND": "memory"},
    {"APP_CACHE_BACKEND": "redis", "APP_REDIS_URL": "redis://cache:6380/2"},
    # Names are case-insensitive; unknown APP_ names and other variables are ignored.
    {"app_port": "9000", "App_Response_Cache": "false", "APP_NOT_A_SETTING": "x", "HOME": "/h"},
    {"APP_HEAVY_PROCESSES": "2", "APP_CACHE_BACKEND": "redis", "APP_CACHE_TTL_S": "60"},
    {"APP_GIL_SWITCH_INTERVAL_S": "0.002", "APP_CORS_ORIGINS": "https://a.example, *"},
    # Of two spellings of one name, the later wins.
    {"APP_WORKERS": "3", "app_workers": "5"},
]
BAD_ENVIRONMENTS = [
    {"APP_CACHE_BACKEND": "disk"},
    {"APP_PORT": "0"},
    {"APP_PORT": ""},
    {"APP_HEAVY_PROCESSES": "2"},  # processes need the Redis cache (a model validator)
    {"APP_CORS_ORIGINS": "https://a.example/path"},
    {"APP_REQUEST_DEADLINE_S": "soon", "APP_WORKERS": "-1"},
]


def service_reading(monkeypatch: pytest.MonkeyPatch, environ: dict[str, str]) -> Settings:
    for name in list(os.environ):
        if name.upper().startswith("APP_"):
            monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    return Settings()


@pytest.mark.parametrize("environ", ENVIRONMENTS)
def test_the_cli_reads_the_environment_as_the_service_does(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str]
) -> None:
    cli = settings_from_environ(environ)
    assert type(cli) is ServiceSettings
    assert cli.model_dump() == service_reading(monkeypatch, environ).model_dump()


def test_the_environments_set_what_they_name() -> None:
    # The comparison above would pass if neither reading saw a variable: these read them.
    assert settings_from_environ(ENVIRONMENTS[3]).port == 9000
    assert settings_from_environ(ENVIRONMENTS[3]).response_cache is False
    assert settings_from_environ(ENVIRONMENTS[4]).heavy_process_count == 2
    assert settings_from_environ(ENVIRONMENTS[6]).workers == 5


@pytest.mark.parametrize("environ", BAD_ENVIRONMENTS)
def test_a_bad_setting_is_the_same_error(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str]
) -> None:
    with pytest.raises(ValidationError) as cli:
        settings_from_environ(environ)
    with pytest.raises(ValidationError) as service:
        service_reading(monkeypatch, environ)
    assert [(e["loc"], e["msg"], e["type"], e["input"]) for e in cli.value.errors()] == [
        (e["loc"], e["msg"], e["type"], e["input"]) for e in service.value.errors()
    ]
