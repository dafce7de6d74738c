"""Notification bodies: a rule as the API and a jobs file take it, and what is shown of
rules and of the notifications sent (``domain/notifications.py``)."""

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

import msgspec

from jobledger.domain.bounds import (
    MAX_NOTIFY_COUNT,
    MAX_NOTIFY_RECIPIENTS,
    MAX_NOTIFY_URL_CHARS,
    MAX_NOTIFY_WINDOW,
)
from jobledger.schemas.fields import Short, Strict, Tiny

Url = Annotated[str, msgspec.Meta(max_length=MAX_NOTIFY_URL_CHARS)]
Count = Annotated[int, msgspec.Meta(ge=1, le=MAX_NOTIFY_COUNT)]
Window = Annotated[float, msgspec.Meta(ge=0, le=MAX_NOTIFY_WINDOW.total_seconds())]
NotifyOnIn = Literal[
    "dead_letter", "failures_in_a_row", "workflow_failed", "breaker_opened", "queue_backlog"
]


class ChannelIn(Strict):
    """Where to send: ``webhook`` (``url``, optionally signed with the secret the workers
    hold as ``JOBLEDGER_NOTIFY_SECRET_<secret>``), ``slack`` (an incoming webhook's
    ``url``) or ``email`` (the addresses in ``to``)."""

    kind: Literal["webhook", "slack", "email"]
    url: Url | None = None
    to: Annotated[list[Short], msgspec.Meta(max_length=MAX_NOTIFY_RECIPIENTS)] = msgspec.field(
        default_factory=list
    )
    secret: Tiny | None = None


class NotificationRuleIn(Strict):
    """A rule: notify ``on`` a condition, for runs matching every filter given, through
    ``channel``. ``count``: the runs in a row (failures_in_a_row) or the due runs a queue
    may hold (queue_backlog); ``older_than_seconds``: the longest a due run may wait
    (queue_backlog); ``cooldown_seconds``: at most one notification per rule and
    subject in each window (default 600 for breaker_opened and queue_backlog, else 0)."""

    on: NotifyOnIn
    channel: ChannelIn
    job: Short | None = None
    queue: Short | None = None
    handler: Short | None = None
    workflow: Short | None = None
    count: Count | None = None
    older_than_seconds: Window | None = None
    cooldown_seconds: Window | None = None
    enabled: bool = True


class NamedRuleIn(NotificationRuleIn, kw_only=True):
    """A rule of a jobs file's ``[[notifications]]``, with its name."""

    name: Short


class NotificationsApplyIn(Strict):
    """A jobs file's rules, applied as one set of ``scope``: ``prune`` deletes the
    scope's rules no longer declared; ``dry_run`` only plans."""

    rules: list[NamedRuleIn]
    scope: Short
    prune: bool = False
    dry_run: bool = False


class ChannelOut(msgspec.Struct, kw_only=True):
    """A channel as shown: where it goes without a URL's path or query (they may hold a
    token), and the secret's name."""

    kind: str
    to: str
    secret: str | None = None


class NotificationRuleOut(msgspec.Struct, kw_only=True):
    name: str
    on: str
    channel: ChannelOut
    job: str | None = None
    queue: str | None = None
    handler: str | None = None
    workflow: str | None = None
    count: int | None = None
    older_than_seconds: float | None = None
    cooldown_seconds: float
    enabled: bool
    scope: str | None = None
    changed_by: str
    changed_at: datetime


class NotificationRuleList(msgspec.Struct, kw_only=True):
    rules: list[NotificationRuleOut]


class NotificationRuleStateOut(msgspec.Struct, kw_only=True):
    """A rule after a change (None once deleted), and whether anything changed."""

    rule: NotificationRuleOut | None
    changed: bool


class PlannedRule(msgspec.Struct, kw_only=True):
    name: str
    action: Literal["create", "update", "unchanged", "delete"]


class NotificationsApplyOut(msgspec.Struct, kw_only=True):
    plan: list[PlannedRule]
    applied: bool


class NotificationOut(msgspec.Struct, kw_only=True):
    """One notification: its run (``execution_id``) and how its delivery went."""

    execution_id: UUID
    rule: str
    on: str
    subject: str
    channel: str
    to: str
    status: str
    attempt: int
    enqueued_at: datetime | None
    finished_at: datetime | None = None
    last_error: str | None = None


class NotificationList(msgspec.Struct, kw_only=True):
    notifications: list[NotificationOut]
    next_cursor: str | None = None


class NotificationTestOut(msgspec.Struct, kw_only=True):
    """The run that sends the test notification: follow it at ``/api/v1/executions/{id}``."""

    execution_id: UUID
