"""Service settings: one pydantic-settings class, read when asked, never at import time."""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Environment variables are prefixed with ``APP_`` (for example ``APP_CACHE_BACKEND``)."""

    model_config = SettingsConfigDict(env_prefix="APP_", extra="ignore")

    cache_backend: Literal["memory", "redis"] = "memory"
    redis_url: str = "redis://127.0.0.1:6379/0"
    log_level: str = "info"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
