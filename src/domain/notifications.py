"""Notification rules: what an operator wants to be told of, and where (ADR 108).

A rule names a condition (``NotifyOn``), optional filters (a job, a queue, a handler, a
workflow) and one channel: a signed webhook, a Slack-compatible incoming webhook, or
email. All rules live in one aggregate, ``NotificationRules``, so that a list of them is
one read and every change is checked against the others (a name is taken once).

A notification is a run of the ``notify.send`` handler (``Delivery`` is its payload),
enqueued by the scheduler leader's notifier with an id derived from the rule and what
raised it: a second notifier, or the same one after a restart, collides instead of
telling twice. The run's retries, back-off and dead letter are the queue's own.
"""

import enum
import re
import uuid
from datetime import datetime, timedelta
from typing import Any, Final

import msgspec
from eventsourcing.domain import Aggregate, event

from jobledger.domain.bounds import (
    MAX_NOTIFY_COUNT,
    MAX_NOTIFY_RECIPIENTS,
    MAX_NOTIFY_URL_CHARS,
    MAX_NOTIFY_WINDOW,
)
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.errors import InvalidDefinitionError, NotFoundError
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.job import SYSTEM
from jobledger.domain.json_values import check_actor
from jobledger.domain.names import check_name
from jobledger.domain.policies import MAX_PRIORITY, RetryPolicy

RULES_ID: Final = uuid.UUID("8f1d0c2e-6b7a-4e59-9a3c-2d41f5b7e903")
NOTIFICATIONS_NAMESPACE: Final = uuid.UUID("5b0e7f2a-93c4-4d18-b6e1-0a9f3c72d845")
HANDLER: Final = "notify.send"
SECRET_PREFIX: Final = "JOBLEDGER_NOTIFY_SECRET_"  # noqa: S105 (a name, not a secret)
MAX_RULES: Final = 200
MIN_IN_A_ROW: Final = 2  # one dead letter in a row is what dead_letter tells of
# Conditions that hold for a while (an open breaker, a backlog) tell once per window.
DEFAULT_COOLDOWN: Final = timedelta(minutes=10)
# A delivery runs ahead of other work and keeps trying for about a day: a receiver that
# is down for an hour still gets the message.
DELIVERY_QUEUE: Final = "default"
DELIVERY_RETRY: Final = RetryPolicy(
    max_retries=30, initial_backoff=timedelta(seconds=5), max_backoff=timedelta(hours=1)
)
DELIVERY_TIMEOUT: Final = timedelta(minutes=1)
_SECRET_NAME: Final = re.compile(r"^[A-Z0-9_]{1,64}$")
# Deliberately loose: the mail server decides; this only catches a missing @ or a space.
_ADDRESS: Final = re.compile(r"^[^@\s<>,;]+@[^@\s<>,;]+\.[^@\s<>,;]+$")


class NotifyOn(enum.StrEnum):
    """What a rule tells of."""

    DEAD_LETTER = "dead_letter"  # a run was dead-lettered
    FAILURES_IN_A_ROW = "failures_in_a_row"  # a job's last ``count`` runs were dead-lettered
    WORKFLOW_FAILED = "workflow_failed"
    BREAKER_OPENED = "breaker_opened"  # a handler's circuit breaker opened
    QUEUE_BACKLOG = "queue_backlog"  # more than ``count`` due runs, or one older than T


class ChannelKind(enum.StrEnum):
    WEBHOOK = "webhook"  # a JSON POST, signed as Standard Webhooks sign
    SLACK = "slack"  # a Slack-compatible incoming webhook ({"text": ...})
    EMAIL = "email"  # over the workers' SMTP server


class Channel(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Where a rule's notifications go. ``secret`` names the webhook's signing secret,
    whose value the workers read from ``JOBLEDGER_NOTIFY_SECRET_<SECRET>``: the log
    never holds it."""

    kind: ChannelKind
    url: str | None = None
    to: tuple[str, ...] = ()
    secret: str | None = None

    def check(self) -> None:
        if self.kind is ChannelKind.EMAIL:
            self._check_email()
        else:
            self._check_url()
        if self.secret is not None:
            if self.kind is not ChannelKind.WEBHOOK:
                raise InvalidDefinitionError(
                    "channel.secret",
                    f"a {self.kind} channel is not signed",
                    "leave secret out, or use a webhook channel",
                )
            if not _SECRET_NAME.fullmatch(self.secret):
                raise InvalidDefinitionError(
                    "channel.secret",
                    f"{self.secret!r} is not a secret's name",
                    f"use 1-64 of A-Z 0-9 _; the workers read {SECRET_PREFIX}<NAME>",
                )

    def _check_url(self) -> None:
        url = self.url or ""
        if self.to:
            raise InvalidDefinitionError(
                "channel.to", f"a {self.kind} channel has no recipients", "leave to out"
            )
        if not url.startswith(("https://", "http://")) or len(url) > MAX_NOTIFY_URL_CHARS:
            raise InvalidDefinitionError(
                "channel.url",
                "is missing, too long or not an http(s) URL",
                "give the receiver's http or https URL "
                f"(at most {MAX_NOTIFY_URL_CHARS} characters)",
            )

    def _check_email(self) -> None:
        if self.url is not None:
            raise InvalidDefinitionError(
                "channel.url", "an email channel has no URL", "give the addresses in to"
            )
        if not 1 <= len(self.to) <= MAX_NOTIFY_RECIPIENTS:
            raise InvalidDefinitionError(
                "channel.to",
                f"has {len(self.to)} addresses",
                f"give 1-{MAX_NOTIFY_RECIPIENTS} email addresses",
            )
        for address in self.to:
            if not _ADDRESS.fullmatch(address) or len(address) > MAX_NOTIFY_URL_CHARS:
                raise InvalidDefinitionError(
                    "channel.to",
                    f"{address!r} is not an email address",
                    "give addresses as name@example.com",
                )

    def shown(self) -> str:
        """Where it goes, without what may be a token (a URL's path and query)."""
        if self.kind is ChannelKind.EMAIL:
            return ", ".join(self.to)
        scheme, _, rest = (self.url or "").partition("://")
        authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
        return f"{scheme}://{authority.rsplit('@', 1)[-1]}"


class NotificationRule(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """When to notify (``on`` and the filters: each given one must match) and where.

    ``count``: the runs in a row (``failures_in_a_row``, at least 2) or the due runs a
    queue may hold (``queue_backlog``); ``older_than``: the longest a due run may wait
    (``queue_backlog``; give ``count``, ``older_than`` or both). ``cooldown``: at most
    one notification per rule and subject (a job, a handler, a queue) in each window of
    that length; a breaker or a backlog defaults to 10 minutes, the rest to none.
    ``scope``: the jobs-as-code set that manages the rule (None: made through the API).
    """

    on: NotifyOn
    channel: Channel
    job: str | None = None
    queue: str | None = None
    handler: str | None = None
    workflow: str | None = None
    count: int | None = None
    older_than: timedelta | None = None
    cooldown: timedelta | None = None
    enabled: bool = True
    scope: str | None = None

    def check(self) -> None:
        self.channel.check()
        for field in ("job", "queue", "handler", "workflow"):
            value = getattr(self, field)
            if value is not None:
                check_name(value, field)
        self._check_filters()
        self._check_thresholds()
        if self.cooldown is not None:
            _check_window("cooldown", self.cooldown, allow_zero=True)

    def _check_filters(self) -> None:
        if self.workflow is not None and self.on is not NotifyOn.WORKFLOW_FAILED:
            raise InvalidDefinitionError(
                "workflow", f"a {self.on} rule has no workflow", "use on = workflow_failed"
            )
        if self.on is NotifyOn.FAILURES_IN_A_ROW and self.job is None:
            raise InvalidDefinitionError(
                "job", "failures_in_a_row counts one job's runs", "name the job"
            )
        if self.on is NotifyOn.QUEUE_BACKLOG and (self.job or self.handler):
            raise InvalidDefinitionError(
                "job", "a backlog is a queue's", "leave job and handler out; name a queue or none"
            )

    def _check_thresholds(self) -> None:
        needs_count = self.on in {NotifyOn.FAILURES_IN_A_ROW, NotifyOn.QUEUE_BACKLOG}
        if self.count is not None and not needs_count:
            raise InvalidDefinitionError(
                "count", f"a {self.on} rule counts nothing", "leave count out"
            )
        if self.older_than is not None and self.on is not NotifyOn.QUEUE_BACKLOG:
            raise InvalidDefinitionError(
                "older_than", f"a {self.on} rule has no age", "leave older_than out"
            )
        if (
            self.on is NotifyOn.FAILURES_IN_A_ROW
            and not MIN_IN_A_ROW <= (self.count or 0) <= MAX_NOTIFY_COUNT
        ):
            raise InvalidDefinitionError(
                "count",
                f"{self.count} is out of range",
                f"use {MIN_IN_A_ROW}-{MAX_NOTIFY_COUNT} runs in a row",
            )
        if self.on is NotifyOn.QUEUE_BACKLOG:
            if self.count is None and self.older_than is None:
                raise InvalidDefinitionError(
                    "count",
                    "a backlog rule needs a size or an age",
                    "give count (due runs), older_than_seconds, or both",
                )
            if self.count is not None and not 1 <= self.count <= MAX_NOTIFY_COUNT:
                raise InvalidDefinitionError(
                    "count", f"{self.count} is out of range", f"use 1-{MAX_NOTIFY_COUNT} due runs"
                )
            if self.older_than is not None:
                _check_window("older_than", self.older_than, allow_zero=False)

    @property
    def window(self) -> timedelta:
        """The cooldown in force: the given one, else the condition's default."""
        if self.cooldown is not None:
            return self.cooldown
        lasting = {NotifyOn.BREAKER_OPENED, NotifyOn.QUEUE_BACKLOG}
        return DEFAULT_COOLDOWN if self.on in lasting else timedelta(0)


def _check_window(field: str, value: timedelta, *, allow_zero: bool) -> None:
    least = timedelta(0) if allow_zero else timedelta(seconds=1)
    if not least <= value <= MAX_NOTIFY_WINDOW:
        raise InvalidDefinitionError(
            f"{field}_seconds",
            f"{value.total_seconds():g} s is out of range",
            f"use {least.total_seconds():g}-{MAX_NOTIFY_WINDOW.total_seconds():g} seconds",
        )


class NotificationRules(Aggregate):
    """Every notification rule, by name (see the module docstring)."""

    TOPIC = "jobledger:NotificationRules"

    class Created(Aggregate.Created):
        TOPIC = "jobledger:NotificationRulesCreated"

    class RuleSaved(Aggregate.Event):
        """A rule was made, or replaced by a new one of that name."""

        TOPIC = "jobledger:NotificationRuleSaved"
        name: str
        rule: NotificationRule
        by: str
        at: datetime
        via: str | None = None

    class RuleDeleted(Aggregate.Event):
        TOPIC = "jobledger:NotificationRuleDeleted"
        name: str
        by: str
        at: datetime
        via: str | None = None

    @event(Created)
    def __init__(self) -> None:
        self.rules: dict[str, NotificationRule] = {}
        self.changed: dict[str, tuple[str, datetime]] = {}  # by whom and when, by name

    @staticmethod
    def create_id() -> uuid.UUID:
        return RULES_ID

    def save(
        self, name: str, rule: NotificationRule, *, by: str, at: datetime, via: str | None = None
    ) -> bool:
        """Make or replace the rule ``name``; False (nothing recorded) if it is the same."""
        check_rule_name(name)
        rule.check()
        check_actor(by)
        if self.rules.get(name) == rule:
            return False
        if name not in self.rules and len(self.rules) >= MAX_RULES:
            raise InvalidDefinitionError(
                "name", f"there are {MAX_RULES} rules already", "delete one you no longer need"
            )
        self._saved(name=name, rule=rule, by=by, at=at, via=via)
        return True

    @event(RuleSaved)
    def _saved(
        self, *, name: str, rule: NotificationRule, by: str, at: datetime, via: str | None = None
    ) -> None:
        del via
        self.rules[name] = rule
        self.changed[name] = (by, at)

    def delete(self, name: str, *, by: str, at: datetime, via: str | None = None) -> None:
        check_actor(by)
        if name not in self.rules:
            raise NotFoundError(no_rule(name))
        self._deleted(name=name, by=by, at=at, via=via)

    @event(RuleDeleted)
    def _deleted(self, *, name: str, by: str, at: datetime, via: str | None = None) -> None:
        del by, at, via
        self.rules.pop(name, None)
        self.changed.pop(name, None)


def check_rule_name(name: str) -> None:
    """A name (the rule for names), without the ``/`` its URL cannot carry."""
    check_name(name)
    if "/" in name:
        raise InvalidDefinitionError(
            "name",
            f"{name!r} holds a /, which its URL cannot carry",
            "use : or . to separate its parts, e.g. billing:failures",
        )


def no_rule(name: str) -> str:
    return (
        f"no notification rule named {name!r}: make it with PUT /api/v1/notifications/rules/{name}"
    )


# ---- what a notification carries -----------------------------------------------------


class Delivery(msgspec.Struct, frozen=True, kw_only=True):
    """The payload of a ``notify.send`` run: the message, and where it goes."""

    rule: str
    on: NotifyOn
    subject: str
    text: str
    channel: Channel
    link: str | None = None  # a dashboard path (the workers add their public URL)
    facts: dict[str, Any] = msgspec.field(default_factory=dict)
    at: datetime | None = None  # when what it tells of happened


def delivery_key(rule: str, subject: str, cause: str) -> str:
    """The trigger key of a notification's run: a second one for the same rule, subject
    and cause collides with the first."""
    raised = uuid.uuid5(NOTIFICATIONS_NAMESPACE, f"{rule}\n{subject}\n{cause}")
    return f"notify:{raised}"


def cause_of(rule: NotificationRule, at: datetime, event: str) -> str:
    """What one notification stands for: the event that raised it (``event``: its
    stream and version) or, under a cooldown, the window ``at`` falls in, so a lasting
    condition tells once per window however often it is seen."""
    seconds = rule.window.total_seconds()
    if seconds <= 0:
        return event
    return f"window {int(at.timestamp() // seconds)} of {seconds:g} s"


def delivery_run(
    delivery: Delivery, *, key: str, at: datetime, by: str = SYSTEM, via: str | None = None
) -> Execution:
    """The run that sends ``delivery``, due at ``at``; its id follows from ``key``."""
    spec = ExecutionSpec(
        handler=HANDLER,
        payload=msgspec.to_builtins(delivery),
        queue=DELIVERY_QUEUE,
        priority=MAX_PRIORITY,
        timeout=DELIVERY_TIMEOUT,
        retry=DELIVERY_RETRY,
    )
    return Execution.enqueue(
        spec=spec, ready_at=at, trigger=Trigger.ADHOC, trigger_key=key, by=by, via=via
    )
