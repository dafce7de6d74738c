"""The dashboard's /ui/notifications over real HTTP: the rules and the notifications
sent for every signed-in role, the changes for admins only, and stored data the page
cannot show (PostgreSQL, a live API with its projector, no worker)."""

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import httpx
from tests.integration.raw_events import write_undecodable

from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.notifications import HANDLER, RULES_ID, NotificationRules
from jobledger.domain.roles import Role

if TYPE_CHECKING:
    from tests.integration.api.conftest import Api

PAGE = "/ui/notifications"
RULES = "/api/v1/notifications/rules"
# The path and query of a receiver's URL often hold a token: the page shows neither.
HOOK = "https://hooks.example.com/services/T0KEN?sig=hush"
WEBHOOK_RULE = {
    "on": "dead_letter",
    "channel": {"kind": "webhook", "url": HOOK, "secret": "PAYMENTS"},
    "job": "nightly billing",
    "queue": "payments",
}
BACKLOG_RULE = {
    "on": "queue_backlog",
    "channel": {"kind": "email", "to": ["ops@example.com", "oncall@example.com"]},
    "queue": "reports",
    "count": 100,
    "older_than_seconds": 300,
    "enabled": False,
}
ADMIN_ONLY = ('id="rule-form"', "data-action=", ">Send test</button>", ">Delete</button>")


def _saved(api: "Api", name: str, rule: dict[str, Any]) -> None:
    response = api.client(Role.ADMIN).put(f"{RULES}/{name}", json=rule)
    assert response.status_code == 200, response.text


def _tested(api: "Api", name: str) -> str:
    response = api.client(Role.ADMIN).post(f"{RULES}/{name}/test")
    assert response.status_code == 202, response.text
    execution_id: str = response.json()["execution_id"]
    return execution_id


def _sent(api: "Api", *ids: str) -> None:
    """Once the list of notifications sent (a read model) holds each of ``ids``."""
    viewer = api.client(Role.VIEWER)

    def listed() -> bool:
        shown = viewer.get("/api/v1/notifications").json()["notifications"]
        return set(ids) <= {row["execution_id"] for row in shown}

    api.wait_for(listed)


def _page(client: httpx.Client) -> str:
    response = client.get(PAGE)
    assert response.status_code == 200, response.text
    return response.text


def _row(page: str, marker: str) -> str:
    start = page.index(marker)
    return page[start : page.index("</tr>", start)]


def test_with_no_rule_the_page_says_how_to_make_one(api: "Api") -> None:
    """If no rule was ever made, then a viewer's page says so, naming the PUT route and
    the jobs file's table, and says that no notification was sent."""
    page = _page(api.session(str(Role.VIEWER)))
    assert "No rule yet" in page
    assert "PUT /api/v1/notifications/rules/{name}" in page
    assert "[[notifications]]" in page
    assert "No notification sent yet" in page
    assert '<a href="/ui/notifications" aria-current="page">Notifications</a>' in page


def test_a_viewer_reads_the_rules_and_what_was_sent_an_admin_also_changes(api: "Api") -> None:
    """If an admin made a webhook and an email rule and sent a test of the first, then a
    viewer's page lists both rules (condition, filters, thresholds, where they go without
    the URL's path, who changed them) and the test among the notifications sent, linking
    to its run, with no button or form; an admin's page has Send test and Delete on each
    rule and the form."""
    _saved(api, "payments", WEBHOOK_RULE)
    _saved(api, "reports backlog", BACKLOG_RULE)
    test_run = _tested(api, "payments")
    _sent(api, test_run)

    viewer = _page(api.session(str(Role.VIEWER)))
    payments = _row(viewer, 'data-rule="payments"')
    for shown in ("dead letter", "job nightly billing, queue payments", "no cooldown"):
        assert shown in payments
    assert "webhook → https://hooks.example.com" in payments
    assert "signed with PAYMENTS" in payments
    assert "T0KEN" not in viewer
    assert "hush" not in viewer
    assert "admin, <time" in payments
    backlog = _row(viewer, 'data-rule="reports backlog"')
    assert 'data-enabled="no"' in backlog
    assert "more than 100 due; due over 300 s; cooldown 600 s" in backlog
    assert "email → ops@example.com, oncall@example.com" in backlog
    sent = _row(viewer, f'data-execution="{test_run}"')
    assert f'href="/ui/executions/{test_run}"' in sent
    assert "a test of the notification rule &#39;payments&#39;" in sent
    assert "webhook → https://hooks.example.com" in sent
    assert "status-pending" in sent
    for admin_only in ADMIN_ONLY:
        assert admin_only not in viewer, admin_only

    admin = _page(api.session(str(Role.ADMIN)))
    for admin_only in ADMIN_ONLY:
        assert admin_only in admin, admin_only
    assert f'data-action="{RULES}/payments/test"' in admin
    assert f'data-action="{RULES}/reports%20backlog"' in admin
    assert 'data-method="DELETE"' in _row(admin, 'data-rule="payments"')


def test_stored_data_the_page_cannot_show_does_not_break_it(api: "Api") -> None:
    """If the rules' stream holds an event that no longer decodes and a notification's
    run holds a payload that is no notification, then the page still answers 200: it
    says why the rules cannot be shown (naming the quarantine list), and lists the
    notifications sent, the unreadable one as such."""
    _saved(api, "payments", WEBHOOK_RULE)
    test_run = _tested(api, "payments")
    ledger = api.container.ledger
    rules = ledger.notification_rules()
    assert rules is not None
    write_undecodable(ledger, NotificationRules.RuleSaved.TOPIC, RULES_ID, rules.version + 1)
    garbled = Execution.enqueue(
        spec=ExecutionSpec(handler=HANDLER, payload={"shape": "old"}),
        ready_at=datetime.now(tz=UTC),
        trigger=Trigger.ADHOC,
    )
    ledger.save(garbled)
    _sent(api, test_run, str(garbled.id))

    for role in (Role.VIEWER, Role.ADMIN):
        page = _page(api.session(str(role)))
        assert 'id="rules-unreadable"' in page
        assert "No rule yet" not in page
        assert f"{RULES_ID} cannot be rebuilt" in page
        assert "jobledger projections quarantine list" in page
        assert f'data-execution="{test_run}"' in page
        unreadable = _row(page, f'data-execution="{garbled.id}"')
        assert "(unreadable)" in unreadable
        assert f"run {str(garbled.id)[:8]}" in unreadable
