"""Who may see what on the dashboard: viewers read only, strangers go to the login."""

import re
from typing import TYPE_CHECKING

import httpx
from playwright.sync_api import expect

from jobledger.api.security import SESSION_COOKIE

if TYPE_CHECKING:
    from tests.e2e.conftest import Stack, Ui

# Everything on a page that would change something (filters and the history slider
# only read).
CHANGES = (
    "button[data-action], button[data-requeue], button[data-discard], input.pick, "
    "#dlq-bulk, #verify-queue, #rebuild-queue, #limit-form, button[data-edit-limit], "
    "#rule-form"
)
JOB = {
    "name": "viewer can see me",
    "handler": "test.echo",
    "schedule": {"kind": "cron", "cron": "0 3 * * *", "timezone": "UTC"},
}


REFRESH_WAIT_MS = 20_000


def test_a_viewer_sees_no_action_buttons_and_cannot_open_the_forms(ui: "Ui") -> None:
    """If a viewer browses the pages, then no page offers a change (no action button,
    no new-job link, no requeue, no queue maintenance, no limit or notification rule
    form), and the job form answers 403."""
    operator = ui.stack.operator()
    job = operator.post("/api/v1/jobs", json=JOB).json()
    execution = operator.post(f"/api/v1/jobs/{job['id']}/trigger").json()
    operator.close()
    page = ui.page
    ui.sign_in("viewer")
    for path in (
        "/ui/jobs",
        f"/ui/jobs/{job['id']}",
        f"/ui/executions/{execution['id']}",
        "/ui/dlq",
        "/ui/system",
        "/ui/limits",
        "/ui/notifications",
    ):
        ui.go(path)
        expect(page.get_by_role("heading", level=1)).to_be_visible()
        expect(page.locator(CHANGES)).to_have_count(0)
        expect(page.get_by_role("link", name="New job")).to_have_count(0)
        expect(page.get_by_role("link", name="Edit")).to_have_count(0)
    ui.shot("jobs-as-viewer")
    response = page.goto(f"{ui.stack.url}/ui/jobs/new")
    assert response is not None
    assert response.status == 403
    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()


def test_a_page_sends_a_stranger_to_the_login_and_back(ui: "Ui") -> None:
    """If a page is asked for without a session, then a browser is sent to the login
    page (303) and after signing in lands on the page it asked for, while a client that
    does not ask for HTML gets the API's 401."""
    url = ui.stack.url
    refused = httpx.get(f"{url}/ui/jobs?status=active", headers={"Accept": "text/html"})
    assert refused.status_code == 303
    assert refused.headers["location"] == "/ui/login?next=/ui/jobs%3Fstatus%3Dactive"
    script = httpx.get(f"{url}/ui/jobs")
    assert script.status_code == 401
    assert script.json()["error"]["code"] == "unauthenticated"

    ui.sign_in("operator", start="/ui/jobs?status=active")
    expect(ui.page).to_have_url(f"{url}/ui/jobs?status=active")


def test_the_login_page_goes_straight_on_when_signed_in(ui: "Ui") -> None:
    """If a signed-in browser opens the login page, then the server redirects before
    any form is drawn."""
    ui.sign_in("viewer")
    response = ui.page.goto(f"{ui.stack.url}/ui/login?next=/ui/workers")
    assert response is not None
    assert response.request.redirected_from is not None
    expect(ui.page).to_have_url(f"{ui.stack.url}/ui/workers")
    expect(ui.page.get_by_label("Password")).to_have_count(0)


def test_an_expired_session_leads_back_to_the_login(ui: "Ui", stack: "Stack") -> None:
    """If the session ends while a page is open, then its next refresh goes to the login
    page, which says the session expired and returns to the page after signing in."""
    ui.sign_in("viewer")
    cookie = next(c for c in ui.page.context.cookies() if c["name"] == SESSION_COOKIE)
    stack.container.accounts().logout(cookie["value"])
    # The overview refreshes every 5 s: allow a few refreshes on a busy machine.
    expect(ui.page).to_have_url(
        re.compile(r"/ui/login\?next=/ui&expired=1$"), timeout=REFRESH_WAIT_MS
    )
    expect(ui.page.get_by_text("Your session has expired")).to_be_visible()
    ui.shot("login-expired")
    ui.page.get_by_label("Username").fill("viewer")
    ui.page.get_by_label("Password").fill("correct horse battery staple")
    ui.page.get_by_role("button", name="Sign in").click()
    expect(ui.page).to_have_url(f"{stack.url}/ui")
