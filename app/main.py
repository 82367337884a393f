"""Application factory: the only place that wires the service together."""

from __future__ import annotations

from fastapi import FastAPI

from app import __version__
from app.settings import Settings, get_settings


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = FastAPI(title="Chunkwise", version=__version__)
    app.state.settings = settings

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    return app
