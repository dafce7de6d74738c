"""What the dashboard writes for a run's limits, for the wait a limit caused, and for a
notification rule's filters and thresholds."""

import uuid
from datetime import UTC, datetime, timedelta

from jobledger.api.dashboard.presenters import (
    cause_of,
    rule_filters,
    rule_thresholds,
    run_limits,
    summary_of,
)
from jobledger.domain.limits import ConcurrencyLimit, RateLimit, RunLimits
from jobledger.schemas.events import EventOut
from jobledger.schemas.notifications import ChannelOut, NotificationRuleOut


def test_a_runs_own_limit_values_are_written_out() -> None:
    """If a run carries its own concurrency and rate values, then the page names both
    keys with their values."""
    limits = RunLimits(
        concurrency=ConcurrencyLimit(key="customer:7", max=2),
        rate=RateLimit(key="stripe", limit=10, per=timedelta(seconds=60)),
    )
    assert run_limits(limits) == (
        "concurrency customer:7 (at most 2 at once); rate stripe (10 starts per 60 s)"
    )


def test_a_run_without_values_takes_the_named_limits() -> None:
    """If a run names a key without values, then the page says the named limit decides;
    without limits it says nothing."""
    assert run_limits(RunLimits(rate=RateLimit(key="stripe"))) == "rate stripe (the named limit's)"
    assert run_limits(None) == ""


def test_a_throttled_event_says_which_limit_the_run_waited_for() -> None:
    """If a run waited for a limit, then its timeline entry names the kind and key."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    event = EventOut(
        type="ExecutionThrottled",
        aggregate_id=uuid.uuid4(),
        version=2,
        timestamp=at,
        data={"kind": "rate", "limit": "stripe", "at": at.isoformat()},
    )
    assert summary_of(event, None) == "waited for the rate limit stripe"


def _event(event_type: str, data: dict[str, object]) -> EventOut:
    at = datetime(2026, 12, 7, tzinfo=UTC)
    return EventOut(type=event_type, aggregate_id=uuid.uuid4(), version=1, timestamp=at, data=data)


def test_a_timeline_names_who_asked_and_how_they_came() -> None:
    """If an event records who asked and how they came, then the timeline says both;
    an event stored before ``via`` existed names the user alone, and a run nobody
    asked for names its trigger."""
    by_token = _event("ExecutionEnqueued", {"by": "ada", "via": "token:ci", "trigger": "adhoc"})
    assert cause_of(by_token) == "ada via token:ci"
    assert cause_of(_event("JobPaused", {"by": "ada", "via": None})) == "ada"
    scheduled = _event("ExecutionEnqueued", {"by": None, "via": None, "trigger": "schedule"})
    assert cause_of(scheduled) == "schedule trigger"


def _rule(
    on: str,
    cooldown: float = 0,
    *,
    job: str | None = None,
    queue: str | None = None,
    count: int | None = None,
    older_than: float | None = None,
) -> NotificationRuleOut:
    return NotificationRuleOut(
        name="r",
        on=on,
        channel=ChannelOut(kind="slack", to="https://hooks.slack.com"),
        job=job,
        queue=queue,
        count=count,
        older_than_seconds=older_than,
        cooldown_seconds=cooldown,
        enabled=True,
        changed_by="admin",
        changed_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_a_rule_names_its_filters_and_when_it_tells() -> None:
    """If a rule has filters, then the page names each given one ("any" for none); its
    threshold reads as runs in a row or a backlog's size and age, with the cooldown in
    force."""
    assert rule_filters(_rule("dead_letter")) == "any"
    failing = _rule("failures_in_a_row", job="nightly", queue="q", count=3)
    assert rule_filters(failing) == "job nightly, queue q"
    assert rule_thresholds(failing) == "3 in a row; no cooldown"
    backlog = _rule("queue_backlog", 600, count=100, older_than=90.5)
    assert rule_thresholds(backlog) == "more than 100 due; due over 90.5 s; cooldown 600 s"
