"""The API docs render in a browser that can reach nothing but the Lattice server."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _offline(page):
    """Abort every request that leaves localhost; return the list of what was refused."""
    refused: list[str] = []

    def route(r):
        host = urlsplit(r.request.url).hostname or ""
        if host in ("127.0.0.1", "localhost"):
            r.continue_()
        else:
            refused.append(r.request.url)
            r.abort()

    page.context.route("**/*", route)
    return refused


def test_swagger_ui_renders_with_no_network(login, live_server_url, operator):
    page = login("op", "pw-op-123")
    refused = _offline(page)
    page.goto(f"{live_server_url}/api/docs/")
    page.wait_for_selector(".swagger-ui .info .title", timeout=15_000)
    assert "Lattice API" in page.locator(".swagger-ui .info .title").inner_text()
    # The operations were read from the schema, so the page is usable, not just its frame.
    page.wait_for_selector(".opblock-summary-path[data-path='/api/v1/allocations/']", timeout=15_000)
    assert refused == []


def _left_behind(request) -> bool:
    """The tab's icon, asked for by the page shown after the login and cancelled when this test
    goes on to the next page (the browser aborts it, though the server answered): not a request
    of the page under test."""
    return request.url.endswith("/static/favicon.svg") and request.failure == "net::ERR_ABORTED"


def test_redoc_renders_with_no_network(login, live_server_url, operator):
    page = login("op", "pw-op-123")
    refused = _offline(page)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("requestfailed", lambda r: None if _left_behind(r) else errors.append(f"failed: {r.url} ({r.failure})"))
    page.goto(f"{live_server_url}/api/redoc/")
    page.wait_for_selector("h1:has-text('Lattice API')", timeout=15_000)
    assert page.locator("text=/api/v1/allocations/").count() > 0
    # The side menu's "API docs by Redocly" (whose logo came from a CDN) is drawn, and settled.
    page.wait_for_selector("a[href='https://redocly.com/redoc/']", timeout=15_000)
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(500)
    assert refused == []
    assert errors == []
