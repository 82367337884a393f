"""``/docs`` (Swagger UI) and ``/redoc`` render the service's own schema from vendored bundles:
the browser reaches no other origin, and the pages keep the security headers."""

from __future__ import annotations

import httpx
from playwright.sync_api import Page, Request

from tests.e2e.conftest import PageErrors


def _only_this_origin(page: Page, base_url: str) -> list[str]:
    foreign: list[str] = []

    def check(request: Request) -> None:
        if not (request.url.startswith(base_url) or request.url.startswith(("data:", "blob:"))):
            foreign.append(request.url)

    page.on("request", check)
    return foreign


def test_swagger_ui_renders_every_operation_offline(
    page: Page, base_url: str, page_errors: PageErrors
) -> None:
    foreign = _only_this_origin(page, base_url)
    page.goto("/docs")
    page.get_by_text("/v1/simulate", exact=True).first.wait_for()
    for path in ("/v1/optimize", "/v1/calibrations", "/v1/plan", "/v1/deploy"):
        assert page.get_by_text(path, exact=True).count() >= 1, path
    assert foreign == []


def test_redoc_renders_offline(page: Page, base_url: str, page_errors: PageErrors) -> None:
    foreign = _only_this_origin(page, base_url)
    page.goto("/redoc")
    page.get_by_text("/v1/simulate").first.wait_for()
    assert foreign == []


def test_the_docs_pages_keep_the_security_headers(base_url: str) -> None:
    for path in ("/docs", "/redoc"):
        response = httpx.get(f"{base_url}{path}")
        assert response.status_code == 200
        policy = response.headers["content-security-policy"]
        assert "script-src 'self';" in policy and "frame-ancestors 'none'" in policy
        assert response.headers["x-frame-options"] == "DENY"


def test_the_dashboard_links_both(page: Page) -> None:
    page.goto("/")
    assert page.get_by_role("link", name="API docs").get_attribute("href") == "/docs"
    assert page.get_by_role("link", name="ReDoc").get_attribute("href") == "/redoc"
