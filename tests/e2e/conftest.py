"""End-to-end fixtures: the whole system, and a real headless Chromium to drive it.

``stack`` runs the API (uvicorn in a thread) over PostgreSQL and a private
redis-server, with a projector and a scheduler in this process and one ``jobledger
worker`` subprocess, so what a page starts really runs. The browser is Debian's
Chromium (``/usr/bin/chromium``, or ``JOBLEDGER_CHROMIUM``) driven by Playwright; the
Makefile installs it when it is missing. Without a browser the tests skip, and fail
under JOBLEDGER_REQUIRE_SERVICES. Screenshots go to ``build/screenshots/``.
"""

import os
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from playwright.sync_api import Browser, Error, Page, Playwright, expect, sync_playwright
from tests.conftest import CHEAP_PASSWORDS, missing_service

from jobledger.bootstrap import Container, bootstrap, web_app
from jobledger.domain.roles import Role
from jobledger.infra.settings import load_settings
from jobledger.runtime.scheduler import SchedulerConfig, SchedulerService

if TYPE_CHECKING:
    from tests.conftest import LiveServer

PASSWORD = "correct horse battery staple"
# Assertions wait for the page; a CI machine running other work may be slow to get there.
expect.set_options(timeout=15_000)

SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"
CHROMIUM = os.environ.get("JOBLEDGER_CHROMIUM", "/usr/bin/chromium")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _start_worker(container: Container) -> tuple[subprocess.Popen[bytes], Any]:
    settings = container.settings
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBLEDGER_")}
    environ |= {
        "JOBLEDGER_DATABASE_URL": settings.database_url,
        "JOBLEDGER_REDIS_URL": settings.redis_url,
        "JOBLEDGER_REDIS_PREFIX": settings.redis_prefix,
        "JOBLEDGER_LOG_FORMAT": "json",
        "JOBLEDGER_TEST_HANDLERS": "true",
    }
    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by the stack fixture)
    command = [sys.executable, "-m", "jobledger.cli", "worker"]
    process = subprocess.Popen(command, env=environ, stdout=subprocess.DEVNULL, stderr=log)  # noqa: S603 (our own entry point)
    return process, log


@dataclass
class Stack:
    url: str
    container: Container

    def operator(self) -> httpx.Client:
        """An operator's API client, for setting up what a test then looks at."""
        client = httpx.Client(base_url=self.url, timeout=30)
        response = client.post(
            "/api/v1/auth/login", json={"username": "operator", "password": PASSWORD}
        )
        assert response.status_code == 200, response.text
        client.headers["X-CSRF-Token"] = response.json()["csrf_token"]
        return client


@pytest.fixture(scope="module")
def stack(
    module_postgres_url: str, redis_server: str, live_server: type["LiveServer"]
) -> Iterator[Stack]:
    """The whole system over a database of this module's own."""
    settings = load_settings(
        {},
        test_handlers="true",
        database_url=module_postgres_url,
        redis_url=redis_server,
        redis_prefix=f"e{uuid.uuid4().hex[:8]}",
        projection_poll_ms="50",
        leader_ttl_ms="1000",
        leader_renew_ms="300",
        leader_poll_ms="100",
        **CHEAP_PASSWORDS,
    )
    with bootstrap(settings) as container:
        accounts = container.accounts()
        for role in Role:
            accounts.create_user(str(role), PASSWORD, role, now=datetime.now(tz=UTC))
        projector = container.projector()
        projector.start()
        scheduler = SchedulerService(
            container.scheduler(config=SchedulerConfig(recover_interval=0.2))
        )
        scheduler.start()
        worker, log = _start_worker(container)
        try:
            with live_server(web_app(container)) as server:
                yield Stack(server.url, container)
        finally:
            _stop(worker)
            log.close()
            scheduler.stop()
            projector.stop()


# ---- the browser ------------------------------------------------------------------------


# Module scope, not session: while Playwright's sync driver is open, the main thread
# counts as running an event loop, and later tests that call asyncio.run() would fail.
@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        missing_service(f"no Chromium at {CHROMIUM} (make test installs Debian's chromium)")
    try:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
    except Error as error:
        missing_service(f"Chromium at {CHROMIUM} did not start: {error}")
        raise
    try:
        yield launched
    finally:
        launched.close()


@dataclass
class Ui:
    """A browser tab on the stack, with the steps every test takes."""

    page: Page
    stack: Stack
    problems: list[str] = field(default_factory=list)

    def go(self, path: str) -> None:
        self.page.goto(self.stack.url + path)

    def sign_in(self, username: str, start: str = "/ui") -> None:
        self.go(start)
        expect(self.page.get_by_role("heading", name="Sign in to jobledger")).to_be_visible()
        self.page.get_by_label("Username").fill(username)
        self.page.get_by_label("Password").fill(PASSWORD)
        self.page.get_by_role("button", name="Sign in").click()
        expect(self.page.get_by_role("button", name="Sign out")).to_be_visible()

    def shot(self, name: str) -> None:
        """A full-page screenshot that CI keeps (build/screenshots/NAME.png)."""
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=SCREENSHOTS / f"{name}.png", full_page=True)


@pytest.fixture
def ui(browser: Browser, stack: Stack, request: pytest.FixtureRequest) -> Iterator[Ui]:
    """A fresh browser context (no cookies), whose script errors fail the test; in the
    zone a ``timezone`` mark names (else the machine's)."""
    zone = request.node.get_closest_marker("timezone")
    context = browser.new_context(
        viewport={"width": 1280, "height": 900}, timezone_id=zone.args[0] if zone else None
    )
    context.set_default_timeout(15_000)
    page = context.new_page()
    running = Ui(page, stack)
    page.on("pageerror", lambda error: running.problems.append(f"script error: {error}"))
    # Refused API calls (a 422 the form shows) log a failed load: not a script fault.
    page.on(
        "console",
        lambda message: (
            running.problems.append(f"console: {message.text}")
            if message.type == "error" and "Failed to load resource" not in message.text
            else None
        ),
    )
    try:
        yield running
    finally:
        context.close()
    assert not running.problems, running.problems
