"""The dashboard in a real browser, as an operator and an admin use it."""

import re
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import expect

if TYPE_CHECKING:
    from tests.e2e.conftest import Ui

PAGES = {
    "overview": "/ui",
    "jobs": "/ui/jobs",
    "executions": "/ui/executions",
    "workflows": "/ui/workflows",
    "workers": "/ui/workers",
    "dead-letters": "/ui/dlq",
    "system": "/ui/system",
    "limits": "/ui/limits",
    "notifications": "/ui/notifications",
    "audit": "/ui/audit",
}


def test_an_operator_fixes_a_cron_error_previews_creates_and_runs_a_job(ui: "Ui") -> None:
    """If an operator saves a cron job with an invalid expression, then the error shows
    next to the cron field; if they fix it, then the preview lists the next fires in the
    job's zone; if they save and trigger it, then the execution appears on the job's
    page and completes, the timeline names the operator, the slider shows the first
    version, and signing out leads back to the login page."""
    page = ui.page
    ui.sign_in("operator")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs").click()
    page.get_by_role("link", name="New job").click()
    page.get_by_label("Name", exact=True).fill("hourly digest")
    page.get_by_label("Time zone").fill("Europe/Berlin")
    cron = page.get_by_label("Cron expression")
    cron.fill("61 * * * *")
    page.get_by_role("button", name="Create job").click()

    error = page.locator('[data-field="schedule.cron"] .field-error')
    expect(error).to_contain_text("not a valid cron expression")
    expect(cron).to_have_attribute("aria-invalid", "true")
    expect(cron).to_be_focused()
    ui.shot("job-form-field-error")

    cron.fill("15 * * * *")
    fires = page.locator("#preview-list li")
    expect(fires).to_have_count(5)
    expect(fires.first).to_have_text(re.compile(r":15:00 \+0[12]:00"))
    expect(error).to_be_hidden()
    ui.shot("job-form-preview")

    page.get_by_role("button", name="Create job").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("hourly digest")
    page.get_by_role("button", name="Trigger").click()
    runs = page.locator("#job-executions tr[data-execution]")
    expect(runs).to_have_count(1)
    expect(runs.first).to_have_attribute("data-status", "completed", timeout=30_000)
    timeline = page.locator("#timeline")
    expect(timeline.locator('tr[data-event="JobScheduled"]')).to_contain_text("operator")
    expect(timeline.locator('tr[data-event="JobTriggered"]')).to_contain_text("operator")

    page.get_by_role("slider", name="Version").focus()
    page.keyboard.press("Home")  # the slider by keyboard: back to the first version
    expect(page.locator("#as-of")).to_contain_text("version 1")
    expect(page.locator("#as-of")).to_contain_text("15 * * * * in Europe/Berlin")
    ui.shot("job-detail")

    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(re.compile(r"/ui/login$"))
    ui.go("/ui/jobs")
    expect(page).to_have_url(re.compile(r"/ui/login\?next=/ui/jobs$"))


def test_a_failed_job_is_dead_lettered_and_requeued_from_the_page(ui: "Ui") -> None:
    """If a job of test.fail with no retries is triggered, then its execution appears
    on the dead-letter page with its error; if the operator requeues what matches, then
    a dry run first says how many, and the execution's page shows its input, the
    traceback its attempt logged, and events that record who requeued it and why."""
    page = ui.page
    ui.sign_in("operator", start="/ui/jobs/new")
    page.get_by_label("Name", exact=True).fill("always fails")
    page.get_by_label("Handler").select_option("test.fail")
    page.get_by_label("Payload (JSON object)").fill('{"error": "upstream said 503"}')
    page.get_by_label("Only when triggered").check()
    expect(page.locator("#preview-note")).to_have_text("Runs only when triggered.")
    page.get_by_label("Retries", exact=True).fill("0")
    page.get_by_role("button", name="Create job").click()
    page.get_by_role("button", name="Trigger").click()
    run = page.locator("#job-executions tr[data-execution]")
    expect(run).to_have_attribute("data-status", "dead_lettered", timeout=30_000)
    execution_id = run.get_attribute("data-execution")

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Dead letters").click()
    dead = page.locator(f'#dlq tr[data-execution="{execution_id}"]')
    expect(dead).to_contain_text("upstream said 503")
    expect(page.locator("#dlq-groups tr[data-count]")).to_contain_text("upstream said 503")
    page.get_by_label("Reason (recorded with every change)").fill("upstream is back")
    ui.shot("dead-letters")
    page.get_by_role("button", name="Requeue all that match the filter…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("1 dead letter matches the filter")
    ui.shot("dead-letters-dry-run")
    dialog.get_by_role("button", name="Requeue 1").click()
    expect(page.locator("#flash")).to_contain_text("Requeued 1 of 1")

    ui.go(f"/ui/executions/{execution_id}")
    requeued = page.locator('#execution-events tr[data-event="ExecutionRequeued"]')
    expect(requeued).to_contain_text("operator")
    expect(requeued).to_contain_text("upstream is back")
    expect(page.locator("#attempts tbody tr")).to_have_count(2, timeout=30_000)
    expect(page.locator("#payload")).to_contain_text('"error": "upstream said 503"')
    raised = page.locator('#run-logs tr[data-level="warning"]').first
    expect(raised).to_contain_text("handler.raised")
    expect(raised.locator(".traceback")).to_contain_text("HandlerError: upstream said 503")
    ui.shot("execution-detail")


def test_every_page_fits_a_laptop_and_a_phone_and_describes_its_charts(ui: "Ui") -> None:
    """If an admin opens each page at laptop and at phone width, then nothing is wider
    than the window, the skip link comes first on Tab, and each chart has a caption
    with its figures and a table of them."""
    page = ui.page
    ui.sign_in("admin")
    for width, label in ((1280, "laptop"), (390, "phone")):
        page.set_viewport_size({"width": width, "height": 900})
        for name, path in PAGES.items():
            ui.go(path)
            expect(page.get_by_role("heading", level=1)).to_be_visible()
            wide = page.evaluate("document.documentElement.scrollWidth > window.innerWidth")
            assert not wide, f"{path} is wider than {width} px"
            ui.shot(f"{name}-{label}")
    ui.go("/ui")
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    charts = page.locator("figure.chart")
    expect(charts).to_have_count(3)
    for index in range(3):
        chart = charts.nth(index)
        expect(chart.locator("svg[role=img]")).to_have_attribute(
            "aria-labelledby", re.compile("summary")
        )
        expect(chart.locator("figcaption")).to_contain_text("in the last hour", ignore_case=True)
        expect(chart.locator("table caption")).to_contain_text("per minute")


def test_an_admin_verifies_and_rebuilds_the_queue_with_progress(ui: "Ui") -> None:
    """If an admin verifies the queue and then rebuilds it from the page, then the
    verification reports a match and the rebuild's progress ends in done."""
    page = ui.page
    ui.sign_in("admin", start="/ui/system")
    expect(page.locator("#breakers")).to_contain_text("test.echo")
    page.get_by_role("button", name="Verify the queue").click()
    expect(page.locator("#verify-result")).to_contain_text("The queue matches the log.")
    page.get_by_role("button", name="Rebuild the queue").click()
    page.get_by_role("dialog").get_by_role("button", name="Rebuild").click()
    expect(page.locator("#rebuild-text")).to_contain_text("done")
    expect(page.locator("#flash")).to_contain_text("Queue rebuild done.")
    ui.shot("system-rebuilt")


def test_a_job_row_stays_one_line_with_its_actions_secondary(ui: "Ui") -> None:
    """If an operator lists jobs, then each row's actions are secondary buttons (no row
    shouts "Trigger" in the primary colour) and a row with them is no taller than one
    line of the table's text and its padding: well under twice the header's height."""
    job = {"name": "compact row", "handler": "test.echo", "schedule": {"kind": "manual"}}
    operator = ui.stack.operator()
    created = operator.post("/api/v1/jobs", json=job)
    operator.close()
    assert created.status_code == 201, created.text
    ui.sign_in("operator", start="/ui/jobs")
    row = ui.page.locator(f'#jobs tr[data-job="{created.json()["id"]}"]')
    trigger = row.get_by_role("button", name="Trigger")
    expect(trigger).to_have_class(re.compile(r"\bsecondary\b"))
    header = ui.page.locator("#jobs thead tr").bounding_box()
    shown = row.bounding_box()
    assert header is not None
    assert shown is not None
    assert shown["height"] < 1.6 * header["height"], (shown, header)


@pytest.mark.timezone("Asia/Tokyo")
def test_times_show_in_utc_or_in_the_browsers_zone(ui: "Ui") -> None:
    """If a viewer switches the times to local in a browser in Tokyo, then every time
    on the page shows in one format with the +09:00 offset, the choice holds on the next
    page, and switching back shows UTC again."""
    operator = ui.stack.operator()
    made = operator.post("/api/v1/executions", json={"handler": "test.echo", "payload": {}})
    operator.close()
    assert made.status_code == 202, made.text
    ui.sign_in("viewer", start=f"/ui/executions/{made.json()['id']}")
    page = ui.page
    shown = page.locator("main time[datetime]").first
    expect(shown).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$"))
    switch = page.locator("#time-zone")
    expect(switch).to_have_text("UTC")
    switch.click()
    expect(switch).to_have_attribute("aria-pressed", "true")
    expect(shown).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+09:00$"))
    ui.go("/ui/executions")
    listed = page.locator("main time[datetime]").first
    expect(listed).to_have_text(re.compile(r" \+09:00$"))
    page.locator("#time-zone").click()
    expect(listed).to_have_text(re.compile(r" UTC$"))
