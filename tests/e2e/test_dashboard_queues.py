"""The system page's queue toggle in a real browser: pause, then resume, a queue."""

import contextlib
from typing import TYPE_CHECKING

from playwright.sync_api import expect

if TYPE_CHECKING:
    from tests.e2e.conftest import Ui

# No worker of the stack serves it, so its run stays ready and the row stays put.
QUEUE = "mail"


def test_an_operator_pauses_and_resumes_a_queue_from_the_system_page(ui: "Ui") -> None:
    """If an operator pauses a queue from the system page and confirms, then its row
    says paused by them with the reason, and the Resume button brings it back to
    leasing, where it says that no worker serves it; both through the API the page
    calls."""
    run = {"handler": "test.echo", "queue": QUEUE}
    with contextlib.closing(ui.stack.operator()) as client:
        assert client.post("/api/v1/executions", json=run).status_code == 202
    page = ui.page
    ui.sign_in("operator", start="/ui/system")
    row = page.locator(f'#depths tr[data-queue="{QUEUE}"]')
    expect(row).to_contain_text("no workers")
    row.get_by_role("button", name="Pause").click()
    page.get_by_role("dialog").get_by_role("button", name="Pause").click()
    expect(page.locator("#flash")).to_contain_text(f"Paused queue {QUEUE}")
    expect(row).to_have_attribute("data-paused", "yes")
    expect(row).to_contain_text("by operator")
    expect(row).to_contain_text("paused from the dashboard")
    ui.shot("system-queue-paused")
    row.get_by_role("button", name="Resume").click()
    expect(page.locator("#flash")).to_contain_text(f"Resumed queue {QUEUE}")
    expect(row).to_have_attribute("data-paused", "no")
    expect(row).to_contain_text("no workers")
