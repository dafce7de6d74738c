"""The notifications page in a real browser: an admin adds a rule from its form, sends a
test through it and deletes it."""

from typing import TYPE_CHECKING

from playwright.sync_api import expect

if TYPE_CHECKING:
    from tests.e2e.conftest import Ui

RULE = "e2e hook"
# Nothing listens there: the worker's delivery fails and is retried, which is fine here.
HOOK = "https://hooks.example.invalid/services/T0KEN"


def _add_rule(ui: "Ui") -> None:
    """Fill the form for a webhook rule; a URL that is not http(s) is refused first,
    the API's message and fix next to the field."""
    page = ui.page
    form = page.locator("#rule-form")
    form.get_by_label("Name", exact=True).fill(RULE)
    form.get_by_label("On", exact=True).select_option("dead_letter")
    form.get_by_label("Channel", exact=True).select_option("webhook")
    where = form.get_by_label("URL or addresses")
    where.fill("ftp://hooks.example.invalid")
    form.get_by_label("Secret name (webhook only)").fill("E2E")
    form.get_by_label("Job", exact=True).fill("no such job")
    form.get_by_role("button", name="Save rule").click()
    error = form.locator('[data-field="channel"] .field-error')
    expect(error).to_contain_text("not an http(s) URL")
    expect(error).to_contain_text("Fix: give the receiver's http or https URL")
    expect(where).to_be_focused()

    where.fill(HOOK)
    form.get_by_role("button", name="Save rule").click()
    expect(page.locator("#flash")).to_contain_text(f"Saved the rule {RULE}")


def test_an_admin_adds_a_rule_sends_a_test_and_deletes_the_rule(ui: "Ui") -> None:
    """If an admin adds a webhook rule from the notifications page, then it is listed
    with where it goes (no URL path); if they send a test, then the notification shows
    among those sent, linking to its run; if they delete the rule and confirm, then it
    is gone while the notification stays listed."""
    page = ui.page
    ui.sign_in("admin")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Notifications").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Notifications")
    expect(page.locator("#rules")).to_contain_text("No rule yet")
    _add_rule(ui)
    row = page.locator(f'#rules tr[data-rule="{RULE}"]')
    expect(row).to_contain_text("webhook → https://hooks.example.invalid")
    expect(row).to_contain_text("signed with E2E")
    expect(row).to_contain_text("job no such job")
    expect(page.locator("#rules")).not_to_contain_text("T0KEN")

    row.get_by_role("button", name="Send test").click()
    expect(page.locator("#flash")).to_contain_text(f"Sent a test of the rule {RULE}")
    sent = page.locator("#sent tr[data-execution]")
    expect(sent).to_have_count(1)
    subject = f"jobledger: a test of the notification rule '{RULE}'"
    expect(sent.first).to_contain_text(subject)
    expect(sent.first).to_contain_text("webhook → https://hooks.example.invalid")
    execution = sent.first.get_attribute("data-execution")
    link = sent.first.get_by_role("link", name=subject)
    expect(link).to_have_attribute("href", f"/ui/executions/{execution}")
    ui.shot("notifications")

    row.get_by_role("button", name="Delete").click()
    dialog = page.locator("#confirm")
    expect(dialog).to_contain_text(f"Delete the rule {RULE}?")
    dialog.get_by_role("button", name="Delete").click()
    expect(page.locator("#flash")).to_contain_text(f"Deleted the rule {RULE}")
    expect(page.locator(f'#rules tr[data-rule="{RULE}"]')).to_have_count(0)
    expect(page.locator(f'#sent tr[data-execution="{execution}"]')).to_have_count(1)
