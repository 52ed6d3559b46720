"""A live Daphne on the test database and Debian's Chromium driven by Playwright."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from django.db import connection, connections

from tests.conftest import ROOT

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def live_server_url(db):
    """Daphne serving the test database; tasks run in its process (no broker), as in the embedded mode."""
    settings_dict = connection.settings_dict
    url = (f"postgres://{settings_dict['USER']}@{settings_dict['HOST'] or '127.0.0.1'}:"
           f"{settings_dict['PORT'] or 5432}/{settings_dict['NAME']}")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env.update({"DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "lattice_site.settings.test",
                "ALLOWED_HOSTS": "127.0.0.1,localhost", "LOG_LEVEL": "WARNING"})
    proc = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                             "lattice_site.asgi:application"], cwd=ROOT, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.2)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)
    time.sleep(0.5)  # let PostgreSQL notice the server's sessions are gone before teardown


@pytest.fixture
def browser(monkeypatch):
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the test's own ORM calls are
    # still synchronous and single-threaded, which is what the guard protects.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
        yield b
        # Inside Playwright's sync API the test ran in a greenlet of its own, with a context
        # (and so a database connection) of its own: close it here, where it is visible, or
        # it outlives the session and blocks dropping the test database.
        connections.close_all()
        b.close()


@pytest.fixture
def login(browser, live_server_url):
    def page_for(username: str, password: str):
        page = browser.new_context().new_page()
        page.goto(f"{live_server_url}/accounts/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        page.wait_for_load_state()
        return page

    return page_for
