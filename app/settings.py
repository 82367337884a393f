"""Service settings read from the environment (pydantic-settings), when asked, never at
import time; the fields themselves are :class:`app.service_settings.ServiceSettings`."""

from __future__ import annotations

from functools import lru_cache

from pydantic_settings import BaseSettings, SettingsConfigDict

from app.service_settings import ENV_PREFIX, ServiceSettings


class Settings(ServiceSettings, BaseSettings):
    """Environment variables are prefixed with ``APP_`` (for example ``APP_CACHE_BACKEND``)."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
