"""Notification rules: list, make, replace and delete them, apply a jobs file's set,
send a test, and list the notifications sent (ADR 108).

Reading rules is a viewer's; changing them, and sending a test, an admin's: a rule
sends what the log holds (errors, inputs' excerpts) to a place outside it. The rules
are one aggregate: a change that raced another is made again on the newer rules.
"""

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Literal

import msgspec
import structlog

from jobledger.domain.errors import ConflictError, InvalidDefinitionError, NotFoundError
from jobledger.domain.execution import Execution
from jobledger.domain.notifications import (
    HANDLER,
    Channel,
    ChannelKind,
    Delivery,
    NotificationRule,
    NotificationRules,
    NotifyOn,
    delivery_key,
    delivery_run,
    no_rule,
)
from jobledger.domain.roles import Role
from jobledger.persistence.ledger import Ledger
from jobledger.projections.log.streams import load_many
from jobledger.projections.read_models.queries import UNREADABLE
from jobledger.schemas.notifications import (
    ChannelOut,
    NamedRuleIn,
    NotificationList,
    NotificationOut,
    NotificationRuleIn,
    NotificationRuleList,
    NotificationRuleOut,
    NotificationRuleStateOut,
    NotificationsApplyIn,
    NotificationsApplyOut,
    NotificationTestOut,
    PlannedRule,
)
from jobledger.schemas.rows import ExecutionRow
from jobledger.services.actors import Actor
from jobledger.services.views import Views

log = structlog.get_logger(__name__)

# Changes that lost a race for the rules are made again on the newer rules.
RULE_RETRIES = 10


def to_rule(body: NotificationRuleIn, scope: str | None = None) -> NotificationRule:
    """The rule a body describes (checked by the aggregate as it is saved)."""
    return NotificationRule(
        on=NotifyOn(body.on),
        channel=Channel(
            kind=ChannelKind(body.channel.kind),
            url=body.channel.url,
            to=tuple(body.channel.to),
            secret=body.channel.secret,
        ),
        job=body.job,
        queue=body.queue,
        handler=body.handler,
        workflow=body.workflow,
        count=body.count,
        older_than=_seconds(body.older_than_seconds),
        cooldown=_seconds(body.cooldown_seconds),
        enabled=body.enabled,
        scope=scope,
    )


def _seconds(value: float | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=value)


def rule_out(name: str, rule: NotificationRule, rules: NotificationRules) -> NotificationRuleOut:
    by, at = rules.changed[name]
    return NotificationRuleOut(
        name=name,
        on=rule.on.value,
        channel=ChannelOut(
            kind=rule.channel.kind.value, to=rule.channel.shown(), secret=rule.channel.secret
        ),
        job=rule.job,
        queue=rule.queue,
        handler=rule.handler,
        workflow=rule.workflow,
        count=rule.count,
        older_than_seconds=None if rule.older_than is None else rule.older_than.total_seconds(),
        cooldown_seconds=rule.window.total_seconds(),
        enabled=rule.enabled,
        scope=rule.scope,
        changed_by=by,
        changed_at=at,
    )


class Notifications:
    """The notification use cases (see the module docstring)."""

    def __init__(self, ledger: Ledger, views: Views) -> None:
        self.ledger = ledger
        self.views = views

    def rules(self, *, by: Actor) -> NotificationRuleList:
        by.require(Role.VIEWER)
        rules = self.ledger.notification_rules()
        if rules is None:
            return NotificationRuleList(rules=[])
        return NotificationRuleList(
            rules=[rule_out(name, rules.rules[name], rules) for name in sorted(rules.rules)]
        )

    def rule(self, name: str, *, by: Actor) -> NotificationRuleOut:
        by.require(Role.VIEWER)
        rules = self.ledger.notification_rules()
        if rules is None or name not in rules.rules:
            raise NotFoundError(no_rule(name))
        return rule_out(name, rules.rules[name], rules)

    def save(
        self, name: str, body: NotificationRuleIn, *, at: datetime, by: Actor
    ) -> NotificationRuleStateOut:
        """Make the rule ``name``, or replace it; the same rule changes nothing."""
        by.require(Role.ADMIN)
        rule = to_rule(body)
        changed = self._change(lambda rules: rules.save(name, rule, by=by.name, at=at, via=by.via))
        log.info("notification_rule.saved", rule=name, by=by.name, via=by.via, changed=changed)
        return NotificationRuleStateOut(rule=self.rule(name, by=by), changed=changed)

    def delete(self, name: str, *, at: datetime, by: Actor) -> NotificationRuleStateOut:
        by.require(Role.ADMIN)

        def deleted(rules: NotificationRules) -> bool:
            rules.delete(name, by=by.name, at=at, via=by.via)
            return True

        self._change(deleted)
        log.info("notification_rule.deleted", rule=name, by=by.name, via=by.via)
        return NotificationRuleStateOut(rule=None, changed=True)

    def apply(
        self, body: NotificationsApplyIn, *, at: datetime, by: Actor
    ) -> NotificationsApplyOut:
        """A jobs file's rules as one set of ``body.scope``: made or replaced, and with
        ``prune`` the scope's other rules deleted; in one save."""
        by.require(Role.ADMIN)
        _check_unique(body.rules)
        plan: list[PlannedRule] = []

        def applied(rules: NotificationRules) -> bool:
            plan[:] = _planned(rules, body, at=at, by=by)
            return any(step.action != "unchanged" for step in plan)

        if body.dry_run:
            applied(self.ledger.notification_rules() or NotificationRules())
            return NotificationsApplyOut(plan=plan, applied=False)
        changed = self._change(applied)
        log.info("notification_rules.applied", scope=body.scope, by=by.name, changed=changed)
        return NotificationsApplyOut(plan=plan, applied=changed)

    def test(self, name: str, *, at: datetime, by: Actor) -> NotificationTestOut:
        """Send a test notification through the rule's channel now."""
        by.require(Role.ADMIN)
        rules = self.ledger.notification_rules()
        rule = None if rules is None else rules.rules.get(name)
        if rule is None:
            raise NotFoundError(no_rule(name))
        delivery = Delivery(
            rule=name,
            on=rule.on,
            subject=f"jobledger: a test of the notification rule {name!r}",
            text=(
                f"{by.name} sent this test; the rule tells of {rule.on} "
                f"through {rule.channel.kind}."
            ),
            channel=rule.channel,
            link="/ui/notifications",
            facts={"test": True},
            at=at,
        )
        key = delivery_key(name, "test", str(uuid.uuid4()))
        run = delivery_run(delivery, key=key, at=at, by=by.name, via=by.via)
        self.ledger.save_all(run)
        log.info("notification_rule.tested", rule=name, execution_id=str(run.id), by=by.name)
        return NotificationTestOut(execution_id=run.id)

    def sent(self, *, by: Actor, limit: int = 50, cursor: str | None = None) -> NotificationList:
        """The notifications, the latest first, with how their delivery went."""
        by.require(Role.VIEWER)
        page = self.views.executions(handler=HANDLER, limit=limit, cursor=cursor)
        runs = load_many(self.ledger, Execution, [row.id for row in page.items])
        shown = [_notification(row, runs.get(row.id)) for row in page.items]
        return NotificationList(notifications=shown, next_cursor=page.next_cursor)

    def _change(self, change: Callable[[NotificationRules], bool]) -> bool:
        for _ in range(RULE_RETRIES):
            rules = self.ledger.notification_rules() or NotificationRules()
            if not change(rules):
                return False
            try:
                self.ledger.save_all(rules)
            except ConflictError:
                continue  # another change came first: again, on the newer rules
            return True
        raise ConflictError("the notification rules kept changing meanwhile; try again")


def _check_unique(rules: Sequence[NamedRuleIn]) -> None:
    seen: set[str] = set()
    for index, rule in enumerate(rules):
        if rule.name in seen:
            raise InvalidDefinitionError(
                f"notifications[{index}].name",
                f"{rule.name!r} is declared twice",
                "give each rule its own name",
            )
        seen.add(rule.name)


def _planned(
    rules: NotificationRules, body: NotificationsApplyIn, *, at: datetime, by: Actor
) -> list[PlannedRule]:
    plan: list[PlannedRule] = []
    declared = {rule.name for rule in body.rules}
    for index, rule in enumerate(body.rules):
        existed = rule.name in rules.rules
        try:
            changed = rules.save(
                rule.name, to_rule(rule, body.scope), by=by.name, at=at, via=by.via
            )
        except InvalidDefinitionError as error:
            where = f"notifications[{index}] ({rule.name}).{error.field}"
            raise InvalidDefinitionError(where, error.problem, error.fix) from None
        plan.append(PlannedRule(name=rule.name, action=_action(changed=changed, existed=existed)))
    if body.prune:
        for name, saved in sorted(rules.rules.items()):
            if saved.scope == body.scope and name not in declared:
                rules.delete(name, by=by.name, at=at, via=by.via)
                plan.append(PlannedRule(name=name, action="delete"))
    return plan


def _action(*, changed: bool, existed: bool) -> Literal["create", "update", "unchanged"]:
    if not changed:
        return "unchanged"
    return "update" if existed else "create"


def _notification(row: ExecutionRow, run: Execution | None) -> NotificationOut:
    delivery = _delivery(run)
    return NotificationOut(
        execution_id=row.id,
        rule=delivery.rule if delivery else UNREADABLE,
        on=delivery.on.value if delivery else "",
        subject=delivery.subject if delivery else "",
        channel=delivery.channel.kind.value if delivery else "",
        to=delivery.channel.shown() if delivery else "",
        status=row.status,
        attempt=row.attempt,
        enqueued_at=row.enqueued_at,
        finished_at=row.finished_at,
        last_error=row.last_error,
    )


def _delivery(run: Execution | None) -> Delivery | None:
    """A run's notification; None for one that cannot be read (the list stays whole)."""
    if run is None:
        return None
    try:
        return msgspec.convert(run.spec.payload, Delivery)
    except msgspec.ValidationError:
        return None
