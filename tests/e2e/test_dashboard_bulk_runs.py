"""Acting on many runs from the executions page, in a real Chromium: pick rows or use
the page's filter, see the count first, then cancel or retry now."""

from typing import TYPE_CHECKING

from playwright.sync_api import expect

if TYPE_CHECKING:
    from tests.e2e.conftest import Ui


def test_an_operator_cancels_picked_runs_and_retries_a_waiting_one_now(ui: "Ui") -> None:
    """If runs wait in a queue no worker serves, then picking one and cancelling it asks
    first with the count and cancels only it; cancelling all that match the page's
    filter then ends the rest; and a run due in ten minutes, retried now from its row,
    completes at once."""
    page = ui.page
    operator = ui.stack.operator()
    queued = [
        operator.post("/api/v1/executions", json={"handler": "test.echo", "queue": "e2e-bulk"})
        for _ in range(3)
    ]
    later = operator.post("/api/v1/executions", json={"handler": "test.echo", "delay_seconds": 600})
    operator.close()
    assert all(sent.status_code == 202 for sent in [*queued, later]), [s.text for s in queued]
    stuck = [str(sent.json()["id"]) for sent in queued]
    ui.sign_in("operator", start="/ui/executions?queue=e2e-bulk&status=pending")
    rows = page.locator("#executions tr[data-execution]")
    expect(rows).to_have_count(3, timeout=30_000)

    page.get_by_role("checkbox", name=f"Select execution {stuck[0][:8]}").check()
    page.get_by_label("Reason (recorded with every change)").fill("sent to the wrong queue")
    page.get_by_role("button", name="Cancel 1 selected").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Cancel: 1 run?")
    dialog.get_by_role("button", name="Cancel: 1 run").click()
    expect(page.locator("#flash")).to_contain_text("1 of 1 cancelled")
    expect(rows).to_have_count(2, timeout=30_000)

    page.get_by_role("button", name="Cancel all that match…").click()
    expect(dialog).to_contain_text("Cancel: 2 runs?")
    ui.shot("executions-bulk-cancel")
    dialog.get_by_role("button", name="Cancel: 2 runs").click()
    expect(page.locator("#flash")).to_contain_text("2 of 2 cancelled")
    expect(rows).to_have_count(0, timeout=30_000)

    waiting = str(later.json()["id"])
    ui.go("/ui/executions?status=pending&queue=default")
    page.get_by_role("checkbox", name=f"Select execution {waiting[:8]}").check()
    page.get_by_role("button", name="Retry 1 selected now").click()
    expect(dialog).to_contain_text("Retry now: 1 run?")
    dialog.get_by_role("button", name="Retry now: 1 run").click()
    expect(page.locator("#flash")).to_contain_text("1 of 1 brought forward")
    ui.go(f"/ui/executions/{waiting}")
    brought = page.locator('#execution-events tr[data-event="ExecutionBroughtForward"]')
    expect(brought).to_contain_text("operator")
    expect(page.locator('#execution-events tr[data-event="ExecutionCompleted"]')).to_have_count(
        1, timeout=30_000
    )
