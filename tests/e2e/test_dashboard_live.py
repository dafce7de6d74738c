"""The dashboard hears the log's stream in a real Chromium: a page's live regions
change when events come, not at the next poll."""

from typing import TYPE_CHECKING

from playwright.sync_api import expect

if TYPE_CHECKING:
    from tests.e2e.conftest import Ui


def test_the_executions_page_shows_a_new_run_as_the_log_streams_it(ui: "Ui") -> None:
    """If the executions page is open and listening to the log, then a run enqueued
    through the API shows in its list with the stream's refresh: the page's own poll
    is every 30 s while it listens, and the row comes well within that."""
    page = ui.page
    ui.sign_in("viewer", start="/ui/executions?queue=e2e-live")
    expect(page.locator("body")).to_have_attribute("data-live", "on")
    rows = page.locator("#executions tr[data-execution]")
    expect(rows).to_have_count(0)
    operator = ui.stack.operator()
    sent = operator.post("/api/v1/executions", json={"handler": "test.echo", "queue": "e2e-live"})
    operator.close()
    assert sent.status_code == 202, sent.text
    expect(rows).to_have_count(1, timeout=10_000)
    expect(rows.first).to_have_attribute("data-execution", str(sent.json()["id"]))
    ui.shot("executions-live")
