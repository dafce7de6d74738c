"""Notification rules: what a rule may say, the rules aggregate, and how notifications
are told apart (pure; no store)."""

from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobledger.domain.errors import InvalidDefinitionError, NotFoundError
from jobledger.domain.notifications import (
    DEFAULT_COOLDOWN,
    HANDLER,
    MAX_RULES,
    Channel,
    ChannelKind,
    Delivery,
    NotificationRule,
    NotificationRules,
    NotifyOn,
    cause_of,
    delivery_key,
    delivery_run,
)

AT = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
HOOK = Channel(kind=ChannelKind.WEBHOOK, url="https://hooks.example.com/a/b?token=s3cret")
MAIL = Channel(kind=ChannelKind.EMAIL, to=("ops@example.com",))


def rule(on: NotifyOn = NotifyOn.DEAD_LETTER, **fields: object) -> NotificationRule:
    return msgspec.structs.replace(NotificationRule(on=on, channel=HOOK), **fields)


VALID = [
    rule(),
    rule(job="billing", queue="default", handler="http.webhook"),
    rule(NotifyOn.FAILURES_IN_A_ROW, job="billing", count=3),
    rule(NotifyOn.WORKFLOW_FAILED, workflow="nightly"),
    rule(NotifyOn.BREAKER_OPENED, handler="http.webhook"),
    rule(NotifyOn.QUEUE_BACKLOG, count=100),
    rule(NotifyOn.QUEUE_BACKLOG, queue="default", older_than=timedelta(minutes=5)),
    rule(channel=MAIL, cooldown=timedelta(0)),
    rule(channel=Channel(kind=ChannelKind.WEBHOOK, url="https://x.example", secret="OPS_1")),
    rule(channel=Channel(kind=ChannelKind.SLACK, url="https://hooks.slack.com/services/T/B/X")),
]

# (the rule, the field its refusal names)
REFUSED = [
    (rule(NotifyOn.FAILURES_IN_A_ROW, count=3), "job"),
    (rule(NotifyOn.FAILURES_IN_A_ROW, job="billing", count=1), "count"),
    (rule(NotifyOn.QUEUE_BACKLOG), "count"),
    (rule(NotifyOn.QUEUE_BACKLOG, count=0), "count"),
    (rule(NotifyOn.QUEUE_BACKLOG, count=5, job="billing"), "job"),
    (rule(count=5), "count"),
    (rule(older_than=timedelta(seconds=5)), "older_than"),
    (rule(NotifyOn.QUEUE_BACKLOG, older_than=timedelta(0)), "older_than_seconds"),
    (rule(workflow="nightly"), "workflow"),
    (rule(cooldown=timedelta(days=8)), "cooldown_seconds"),
    (rule(job="bad\u202ename"), "job"),
    (rule(channel=Channel(kind=ChannelKind.WEBHOOK)), "channel.url"),
    (rule(channel=Channel(kind=ChannelKind.WEBHOOK, url="ftp://x.example")), "channel.url"),
    (rule(channel=Channel(kind=ChannelKind.EMAIL)), "channel.to"),
    (rule(channel=Channel(kind=ChannelKind.EMAIL, to=("not an address",))), "channel.to"),
    (rule(channel=Channel(kind=ChannelKind.EMAIL, to=("a@b.example",), url="https://x")),
     "channel.url"),
    (rule(channel=Channel(kind=ChannelKind.SLACK, url="https://x.example", secret="A")),
     "channel.secret"),
    (rule(channel=Channel(kind=ChannelKind.WEBHOOK, url="https://x.example", secret="a b")),
     "channel.secret"),
]  # fmt: skip


@pytest.mark.parametrize("valid", VALID)
def test_a_valid_rule_passes_its_check(valid: NotificationRule) -> None:
    """If a rule fits its condition, then its check passes."""
    valid.check()


@pytest.mark.parametrize(("refused", "field"), REFUSED)
def test_a_rule_that_cannot_work_is_refused_naming_the_field_and_the_fix(
    refused: NotificationRule, field: str
) -> None:
    """If a rule asks for what its condition does not have (or misses what it needs),
    then the check refuses it, naming the field and how to fix it."""
    with pytest.raises(InvalidDefinitionError) as caught:
        refused.check()
    assert caught.value.field == field
    assert caught.value.fix


def test_lasting_conditions_tell_once_per_ten_minutes_unless_told_otherwise() -> None:
    """If a rule gives no cooldown, then a breaker or a backlog rule tells once per 10
    minutes and the others every time."""
    assert rule(NotifyOn.BREAKER_OPENED).window == DEFAULT_COOLDOWN
    assert rule(NotifyOn.QUEUE_BACKLOG, count=1).window == DEFAULT_COOLDOWN
    assert rule().window == timedelta(0)
    assert rule(cooldown=timedelta(minutes=1)).window == timedelta(minutes=1)


def test_a_channel_is_shown_without_what_may_be_a_token() -> None:
    """If a channel's URL has a path, a query or a user, then only its scheme and host
    are shown."""
    assert HOOK.shown() == "https://hooks.example.com"
    user = Channel(kind=ChannelKind.SLACK, url="https://me:pw@hooks.example.com:8443/x")
    assert user.shown() == "https://hooks.example.com:8443"
    assert MAIL.shown() == "ops@example.com"
    query = Channel(kind=ChannelKind.WEBHOOK, url="https://h.example?token=x#y")
    assert query.shown() == "https://h.example"


def test_the_rules_record_who_changed_them_and_refuse_what_is_not_there() -> None:
    """If a rule is saved, replaced with the same, changed and deleted, then the same
    rule records nothing, each change records who, and deleting a missing rule is
    refused with the way to make it."""
    rules = NotificationRules()
    assert rules.save("ops", rule(), by="ana", at=AT)
    assert not rules.save("ops", rule(), by="ana", at=AT)
    assert rules.save("ops", rule(job="billing"), by="bo", at=AT, via="session")
    assert rules.changed["ops"] == ("bo", AT)
    rules.delete("ops", by="bo", at=AT)
    assert rules.rules == {}
    with pytest.raises(NotFoundError, match="PUT /api/v1/notifications/rules/ops"):
        rules.delete("ops", by="bo", at=AT)
    with pytest.raises(InvalidDefinitionError, match="cannot carry"):
        rules.save("ops/billing", rule(), by="ana", at=AT)
    kinds = [type(e).__name__ for e in rules.collect_events()]
    assert kinds == ["Created", "RuleSaved", "RuleSaved", "RuleDeleted"]


def test_the_rules_are_bounded_and_a_bad_rule_writes_nothing() -> None:
    """If there are as many rules as allowed, then a new one is refused (a replacement
    is not); and a refused rule records no event."""
    rules = NotificationRules()
    for number in range(MAX_RULES):
        rules.save(f"rule {number}", rule(), by="ana", at=AT)
    with pytest.raises(InvalidDefinitionError, match="delete one"):
        rules.save("one more", rule(), by="ana", at=AT)
    assert rules.save("rule 0", rule(job="billing"), by="ana", at=AT)
    before = rules.version
    with pytest.raises(InvalidDefinitionError):
        rules.save("rule 1", rule(count=3), by="ana", at=AT)
    assert rules.version == before


@given(
    seconds=st.integers(min_value=1, max_value=7 * 86400),
    offset=st.floats(min_value=0, max_value=10**8),
    later=st.floats(min_value=0, max_value=10**6),
)
def test_a_cooldown_makes_one_cause_per_window(seconds: int, offset: float, later: float) -> None:
    """If two moments fall in the same cooldown window, then they stand for the same
    notification; if they fall in different windows, then for different ones."""
    windowed = rule(NotifyOn.BREAKER_OPENED, cooldown=timedelta(seconds=seconds))
    first = datetime.fromtimestamp(offset, UTC)
    second = first + timedelta(seconds=later)
    same = int(first.timestamp() // seconds) == int(second.timestamp() // seconds)
    assert (cause_of(windowed, first, "a") == cause_of(windowed, second, "b")) == same


def test_without_a_cooldown_each_event_is_its_own_notification() -> None:
    """If a rule has no cooldown, then the cause is the event itself, and the key of a
    notification follows from the rule, the subject and the cause alone."""
    assert cause_of(rule(), AT, "run:3") == "run:3"
    assert delivery_key("ops", "billing", "run:3") == delivery_key("ops", "billing", "run:3")
    assert delivery_key("ops", "billing", "run:3") != delivery_key("ops", "billing", "run:4")
    assert delivery_key("ops", "billing", "run:3") != delivery_key("dev", "billing", "run:3")


def test_a_delivery_is_a_run_of_notify_send_whose_id_follows_from_its_key() -> None:
    """If the same notification is made twice, then both runs have one id (the second
    save collides), and the run carries the delivery as its payload."""
    delivery = Delivery(rule="ops", on=NotifyOn.DEAD_LETTER, subject="s", text="t", channel=HOOK)
    key = delivery_key("ops", "billing", "run:3")
    first = delivery_run(delivery, key=key, at=AT)
    second = delivery_run(delivery, key=key, at=AT + timedelta(seconds=5))
    assert first.id == second.id
    assert first.spec.handler == HANDLER
    assert msgspec.convert(first.spec.payload, Delivery) == delivery
    assert first.spec.retry.max_retries > 3
