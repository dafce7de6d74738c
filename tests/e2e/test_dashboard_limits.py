"""The limits page in a real browser: named limits made and changed from its form, and
the keys runs hold or wait for."""

import contextlib
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from playwright.sync_api import expect
from tests.roles import wait_for

if TYPE_CHECKING:
    from tests.e2e.conftest import Stack, Ui

# No worker of the stack serves it: the test leases its runs itself, as a worker would.
QUEUE = "reports"
LIMIT = "smtp"


def _enqueue_limited(stack: "Stack", count: int) -> list[str]:
    """``count`` runs on QUEUE that wait for the named limit LIMIT (no values of their
    own)."""
    run = {"handler": "test.echo", "queue": QUEUE, "limits": {"concurrency": {"key": LIMIT}}}
    with contextlib.closing(stack.operator()) as client:
        made = [client.post("/api/v1/executions", json=run) for _ in range(count)]
    assert [r.status_code for r in made] == [202] * count, made[0].text
    return [r.json()["id"] for r in made]


def _lease(stack: "Stack") -> list[str]:
    """Lease what the queue lets lease now, with leases that outlast the test: the runs
    leased."""
    ids = [uuid.uuid4() for _ in range(10)]
    now = datetime.now(UTC)
    leased = stack.container.queue.lease_round(
        QUEUE, lease_ids=ids, ttl=timedelta(minutes=5), now=now
    )
    return [str(lease.execution_id) for lease in leased.leases]


def _version(stack: "Stack") -> int:
    limit = stack.container.queue.named_limits().get(LIMIT)
    return 0 if limit is None else limit.version


def _create_and_change(ui: "Ui") -> None:
    page = ui.page
    form = page.locator("#limit-form")
    form.get_by_label("Name (the key runs give)").fill(LIMIT)
    form.get_by_label("Runs at once").fill("2")
    form.get_by_role("button", name="Create limit").click()
    expect(page.locator("#flash")).to_contain_text(f"Created the limit {LIMIT}")
    row = page.locator(f'#limits tr[data-limit="{LIMIT}"]')
    expect(row).to_have_attribute("data-version", "1")
    expect(row.locator("td").first).to_have_text("2")

    row.get_by_role("button", name="Change").click()
    expect(page.get_by_role("heading", name=f"Change the limit {LIMIT}")).to_be_visible()
    form.get_by_label("Runs at once").fill("1")
    form.get_by_label("Starts").fill("30")
    form.get_by_label("Per (seconds)").fill("60")
    form.get_by_role("button", name="Change limit").click()
    expect(page.locator("#flash")).to_contain_text(f"Changed the limit {LIMIT}")
    expect(row).to_have_attribute("data-version", "2")
    expect(row).to_contain_text("30 per 60 s")


def test_an_operator_creates_and_changes_a_limit_and_sees_its_key_in_use(ui: "Ui") -> None:
    """If an operator creates a named limit from the limits page and changes it, then
    its row shows the new values; if three runs wait for it and one leases, then the
    key shows 1 in use of 1 allowed with 2 waiting, and a run's page shows its limit."""
    page = ui.page
    ui.sign_in("operator")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Limits").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Limits")
    _create_and_change(ui)

    runs = _enqueue_limited(ui.stack, 3)
    queue = ui.stack.container.queue
    # Leasing reads the change from the queue projection, a moment behind the log.
    wait_for(lambda: _version(ui.stack) == 2, "the queue has the changed limit")
    wait_for(lambda: queue.depths(QUEUE, now=datetime.now(UTC)).ready == 3, "3 runs ready")
    leased = _lease(ui.stack)
    assert len(leased) == 1
    ui.go("/ui/limits")
    key = page.locator(f'#limit-keys tr[data-queue="{QUEUE}"][data-key="{LIMIT}"]')
    expect(key).to_contain_text("concurrency")
    expect(key.locator("td").nth(2)).to_have_text("1 / 1")
    expect(key.locator("td").nth(3)).to_have_text("2")
    row = page.locator(f'#limits tr[data-limit="{LIMIT}"]')
    expect(row.locator("td").nth(2)).to_have_text("1")
    expect(row.locator("td").nth(3)).to_have_text("2")
    ui.shot("limits")

    waiting = _record_throttled(ui.stack, next(run for run in runs if run not in leased))
    ui.go(f"/ui/executions/{waiting}")
    expect(page.locator("#run-limits")).to_have_text(f"concurrency {LIMIT} (the named limit's)")
    throttled = page.locator('#execution-events tr[data-event="ExecutionThrottled"]')
    expect(throttled).to_contain_text(f"waited for the concurrency limit {LIMIT}")
    ui.shot("execution-throttled")


def _record_throttled(stack: "Stack", waiting: str) -> str:
    """Record that a run that did not lease waited, as a worker records it."""
    ledger = stack.container.ledger
    execution = ledger.get_execution(uuid.UUID(waiting))
    execution.throttle(kind="concurrency", limit=LIMIT, at=datetime.now(UTC))
    ledger.save_all(execution)
    return waiting


def test_a_viewer_sees_the_limits_but_no_form(ui: "Ui") -> None:
    """If a viewer opens the limits page, then it lists the limits and offers neither
    the form nor a Change button."""
    page = ui.page
    ui.sign_in("viewer", start="/ui/limits")
    expect(page.get_by_role("heading", name="Named limits")).to_be_visible()
    expect(page.locator("#limit-keys")).to_be_visible()
    expect(page.locator("#limit-form, button[data-edit-limit]")).to_have_count(0)
