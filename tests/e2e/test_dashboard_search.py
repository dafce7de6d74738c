"""Finding runs from the dashboard in a real Chromium: the header's search box and the
executions page's search field."""

from typing import TYPE_CHECKING

from playwright.sync_api import expect

if TYPE_CHECKING:
    from tests.e2e.conftest import Ui


def test_an_operator_finds_a_run_by_its_input_and_opens_one_by_its_id(ui: "Ui") -> None:
    """If two runs differ in their input, then a word of one's input typed in the
    header's search lists that run alone, and its whole id typed there opens its page."""
    operator = ui.stack.operator()
    sent = [
        operator.post(
            "/api/v1/executions",
            json={"handler": "test.echo", "queue": "e2e-find", "payload": {"customer": name}},
        )
        for name in ("Umbrella Corp", "Soylent Inc")
    ]
    operator.close()
    assert all(answer.status_code == 202 for answer in sent), [a.text for a in sent]
    umbrella, soylent = (str(answer.json()["id"]) for answer in sent)
    page = ui.page
    ui.sign_in("viewer", start="/ui/executions?queue=e2e-find")
    expect(page.locator("#executions tr[data-execution]")).to_have_count(2, timeout=30_000)

    finder = page.get_by_role("searchbox", name="Find a run or job")
    finder.fill("SOYLENT")
    finder.press("Enter")
    rows = page.locator("#executions tr[data-execution]")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-execution", soylent)
    expect(page.get_by_label("Search", exact=True)).to_have_value("SOYLENT")
    ui.shot("executions-search")

    finder = page.get_by_role("searchbox", name="Find a run or job")
    finder.fill(umbrella)
    finder.press("Enter")
    expect(page).to_have_url(f"{ui.stack.url}/ui/executions/{umbrella}")
