"""The dashboard's workflow views in a real browser: a job's upstream and downstream
jobs, the backfill dialog, a workflow's DAG, the list of workflows, and the form's new
schedule fields."""

import contextlib
import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import expect

if TYPE_CHECKING:
    from tests.e2e.conftest import Ui


def test_a_job_page_shows_its_links_and_backfills_through_the_dialog(ui: "Ui") -> None:
    """If a report job waits for an hourly import, then each job page links the other;
    the import's backfill dialog previews the occurrences of a window and their count,
    and running it fires them, which a second run then finds already fired."""
    with contextlib.closing(ui.stack.operator()) as client:
        imported = client.post(
            "/api/v1/jobs",
            json={
                "name": "daily import",
                "handler": "test.echo",
                "schedule": {"kind": "cron", "cron": "0 * * * *"},
            },
        ).json()
        report = client.post(
            "/api/v1/jobs",
            json={
                "name": "daily report",
                "handler": "test.echo",
                "depends_on": [{"job": imported["id"]}],
            },
        ).json()
    page = ui.page
    ui.sign_in("operator", f"/ui/jobs/{report['id']}")
    expect(page.locator("#upstreams")).to_contain_text("daily import")
    page.locator("#upstreams").get_by_role("link", name="daily import").click()
    expect(page.locator("#downstreams")).to_contain_text("daily report")

    page.get_by_role("button", name="Backfill…").click()
    dialog = page.get_by_role("dialog", name="Backfill daily import")
    expect(dialog).to_be_visible()
    # Half past the hour, so that the window holds six whole hours at any wall time.
    hour = datetime.now(tz=UTC).replace(minute=30, second=0, microsecond=0)
    end = (hour - timedelta(hours=2)).astimezone()
    start = end - timedelta(hours=5, minutes=59)
    dialog.get_by_label("From (your local time)").fill(start.strftime("%Y-%m-%dT%H:%M:%S"))
    dialog.get_by_label("To (your local time)").fill(end.strftime("%Y-%m-%dT%H:%M:%S"))
    dialog.get_by_role("button", name="Preview").click()
    summary = page.locator("#backfill-summary")
    expect(summary).to_contain_text("6 occurrences in the window, 0 already fired, 6 to fire")
    expect(page.locator("#backfill-list li")).to_have_count(6)
    ui.shot("job-backfill-preview")
    dialog.get_by_role("button", name="Backfill", exact=True).click()
    expect(summary).to_contain_text("fired 6 now")
    dialog.get_by_role("button", name="Preview").click()
    expect(summary).to_contain_text("6 already fired, 0 to fire")
    dialog.get_by_role("button", name="Close").click()
    expect(page.locator("#job-executions tr[data-execution]")).to_have_count(6)


def test_a_workflow_page_draws_its_dag_with_each_steps_state(ui: "Ui") -> None:
    """If a diamond workflow runs while its page is open, then the page draws the four
    steps and four edges as an SVG, and, without a reload, its heading and every step
    turn completed once the runs are done (its first step takes 5 s)."""
    steps = [
        {"name": "extract", "handler": "test.delay", "payload": {"seconds": 5}},
        {"name": "clean", "handler": "test.echo", "after": ["extract"]},
        {"name": "enrich", "handler": "test.echo", "after": ["extract"]},
        {"name": "publish", "handler": "test.echo", "after": ["clean", "enrich"]},
    ]
    with contextlib.closing(ui.stack.operator()) as client:
        workflow = client.post("/api/v1/workflows", json={"name": "diamond", "steps": steps}).json()
    page = ui.page
    ui.sign_in("viewer", f"/ui/workflows/{workflow['id']}")
    expect(page.locator("h1")).to_contain_text("running")
    dag = page.locator("figure.dag svg")
    expect(dag.locator("g.step")).to_have_count(4)
    expect(dag.locator("path.edge")).to_have_count(4)
    expect(page.locator("h1")).to_contain_text("completed")
    expect(dag.locator('g.step[data-status="completed"]')).to_have_count(4)
    expect(page.locator("#steps tr[data-step]")).to_have_count(4)
    ui.shot("workflow-dag")
    page.locator('#steps tr[data-step="publish"]').get_by_role("link").click()
    expect(page.get_by_role("link", name=re.compile(workflow["id"][:8]))).to_be_visible()


def test_the_form_previews_an_interval_with_an_excluded_date(ui: "Ui") -> None:
    """If an operator picks an interval schedule and excludes tomorrow, then the live
    preview lists the next fires and marks those on the excluded date; the job saves
    with its rules."""
    page = ui.page
    ui.sign_in("operator", "/ui/jobs/new")
    page.get_by_label("Name", exact=True).fill("every 45 minutes")
    page.get_by_label("Interval").check()
    page.get_by_label("Every (seconds)").fill("2700")
    page.get_by_label("Offset (seconds)").fill("300")
    tomorrow = (datetime.now(tz=UTC) + timedelta(days=1)).date().isoformat()
    page.get_by_label("Excluded dates").fill(tomorrow)
    fires = page.locator("#preview-list li")
    expect(fires).to_have_count(5)
    page.get_by_label("Every (seconds)").fill("86400")
    page.get_by_label("Offset (seconds)").fill("0")
    expect(page.locator("#preview-list li.excluded")).to_have_count(1)
    ui.shot("job-form-interval")
    page.get_by_role("button", name="Create job").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("every 45 minutes")
    expect(page.locator("dd").filter(has_text="every 86400 s")).to_contain_text(
        f"except {tomorrow}"
    )


@pytest.mark.timezone("Asia/Tokyo")
def test_the_workflow_list_counts_steps_filters_by_status_and_opens_a_dag(ui: "Ui") -> None:
    """If one workflow completes and another is cancelled while its first step runs,
    then the Workflows page (from the main navigation) lists both in compact rows with
    their status, their steps counted by state and who started them; its times follow
    the UTC/local switch; the status filter keeps the cancelled one alone; and a name
    opens that workflow's DAG."""
    slow = [
        {"name": "slow", "handler": "test.delay", "payload": {"seconds": 30}},
        {"name": "after", "handler": "test.echo", "after": ["slow"]},
    ]
    with contextlib.closing(ui.stack.operator()) as client:
        done = client.post(
            "/api/v1/workflows",
            json={"name": "listed done", "steps": [{"name": "only", "handler": "test.echo"}]},
        ).json()
        stopped = client.post("/api/v1/workflows", json={"name": "listed stopped", "steps": slow})
        stopped_id = stopped.json()["id"]
        cancel = client.post(f"/api/v1/workflows/{stopped_id}/cancel", json={"reason": "no"})
        assert cancel.status_code == 200, cancel.text
    page = ui.page
    ui.sign_in("viewer")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Workflows").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Workflows")
    done_row = page.locator(f'#workflows tr[data-workflow="{done["id"]}"]')
    stopped_row = page.locator(f'#workflows tr[data-workflow="{stopped_id}"]')
    # The list refreshes itself: each row shows its end once the log has it.
    expect(done_row).to_have_attribute("data-status", "completed")
    expect(done_row).to_contain_text("1 of 1 completed")
    expect(done_row).to_contain_text("operator via session")
    expect(stopped_row).to_have_attribute("data-status", "cancelled")
    expect(stopped_row).to_contain_text("0 of 2 completed; 1 cancelled, 1 skipped")
    header = page.locator("#workflows thead tr").bounding_box()
    shown = done_row.bounding_box()
    assert header is not None
    assert shown is not None
    assert shown["height"] < 1.6 * header["height"], (shown, header)
    ended = done_row.locator("time[datetime]").last
    expect(ended).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$"))
    page.locator("#time-zone").click()
    expect(ended).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+09:00$"))
    ui.shot("workflows")
    page.get_by_label("Status").select_option("cancelled")
    page.get_by_role("button", name="Filter").click()
    expect(stopped_row).to_be_visible()
    expect(done_row).to_have_count(0)
    stopped_row.get_by_role("link", name="listed stopped").click()
    expect(page.locator("h1")).to_contain_text("listed stopped")
    expect(page.locator("figure.dag svg g.step")).to_have_count(2)
