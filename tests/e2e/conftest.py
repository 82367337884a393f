"""A real browser against the real app: Debian's chromium driven by Playwright (Python).

The app runs under uvicorn on a free loopback port with the in-process cache; chromium is
Debian's package (``.ci/run`` installs it; Playwright's own browser downloads are not used).
Without ``/usr/bin/chromium`` these tests fail loudly rather than skip.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Page,
    Playwright,
    expect,
    sync_playwright,
)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: How long an ``expect`` assertion retries (Playwright's default is 5 s, apart from the page's
#: action timeout): the sweeps page waits on pool processes that a loaded 2-core machine
#: starts and runs several times slower (a cancel test timed out there under a full check).
EXPECT_TIMEOUT_MS = 20_000
expect.set_options(timeout=EXPECT_TIMEOUT_MS)
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(log_dir: Path, **env_extra: str) -> Iterator[str]:
    """``uvicorn --factory app.main:create_app`` on loopback, one worker, memory cache (plus
    ``env_extra``); yields its URL once ``/healthz`` answers."""
    port = _free_port()
    log_path = log_dir / "uvicorn.log"
    env = {
        **os.environ,
        "APP_CACHE_BACKEND": "memory",
        "APP_LOG_LEVEL": "warning",
        **env_extra,
    }
    env.pop("APP_REDIS_URL", None)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                "app.main:create_app",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise AssertionError(f"uvicorn exited:\n{log_path.read_text(errors='replace')}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("uvicorn did not answer /healthz within 30 s")
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="session")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app without API keys, for the whole session."""
    with serve(tmp_path_factory.mktemp("uvicorn")) as url:
        yield url


@pytest.fixture(scope="session")
def playwright_instance() -> Iterator[Playwright]:
    with sync_playwright() as playwright:
        yield playwright


@pytest.fixture(scope="session")
def browser(playwright_instance: Playwright) -> Iterator[Browser]:
    assert os.path.exists(CHROMIUM), "Debian's chromium is required (.ci/run installs it)"
    browser = playwright_instance.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    try:
        yield browser
    finally:
        browser.close()


class PageErrors:
    """Console errors and uncaught exceptions of one page; a test fails on any unexpected one."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.allowed: list[str] = []

    def console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.messages.append(f"console: {message.text}")

    def page_error(self, error: Exception) -> None:
        self.messages.append(f"uncaught: {error}")

    def unexpected(self) -> list[str]:
        return [m for m in self.messages if not any(a in m for a in self.allowed)]


@pytest.fixture
def page_errors() -> PageErrors:
    return PageErrors()


def open_page(
    browser: Browser, base_url: str, errors: PageErrors, width: int = 1280, height: int = 800
) -> Page:
    context = browser.new_context(
        viewport={"width": width, "height": height},
        accept_downloads=True,
        base_url=base_url,
    )
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base_url)
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.on("console", errors.console)
    page.on("pageerror", errors.page_error)
    return page


@pytest.fixture
def page(browser: Browser, base_url: str, page_errors: PageErrors) -> Iterator[Page]:
    page = open_page(browser, base_url, page_errors)
    try:
        yield page
    finally:
        page.context.close()
    assert not page_errors.unexpected(), page_errors.unexpected()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
