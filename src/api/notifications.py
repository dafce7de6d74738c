"""Notifications: the rules (viewers read them, admins change them and send a test)
and the notifications sent, the latest first."""

from typing import Annotated

from litestar import Controller, delete, get, post, put
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody, PathParameter
from litestar.status_codes import HTTP_200_OK, HTTP_202_ACCEPTED

from jobledger.api.common import Cursor, Limit
from jobledger.api.security import ADMIN, VIEWER
from jobledger.domain.clock import Clock
from jobledger.schemas.notifications import (
    NotificationList,
    NotificationRuleIn,
    NotificationRuleList,
    NotificationRuleOut,
    NotificationRuleStateOut,
    NotificationsApplyIn,
    NotificationsApplyOut,
    NotificationTestOut,
)
from jobledger.services.actors import Actor
from jobledger.services.notifications import Notifications

# The domain checks the name and names the fix; this only bounds what reaches it.
RuleName = Annotated[str, PathParameter(max_length=200, description="the rule's name")]


class NotificationController(Controller):
    path = "/api/v1/notifications"
    tags = ["notifications"]  # noqa: RUF012 (Litestar reads a class attribute)

    @get("/", opt=VIEWER, sync_to_thread=True)
    def list_notifications(
        self,
        notifications: NamedDependency[Notifications],
        actor: NamedDependency[Actor],
        limit: Limit = 50,
        cursor: Cursor = None,
    ) -> NotificationList:
        """The notifications the rules raised, the latest first, with how each one's
        delivery went (each is a run of ``notify.send``: its attempts and errors are at
        ``/api/v1/executions/{execution_id}``)."""
        return notifications.sent(by=actor, limit=limit, cursor=cursor)

    @get("/rules", opt=VIEWER, sync_to_thread=True)
    def list_rules(
        self, notifications: NamedDependency[Notifications], actor: NamedDependency[Actor]
    ) -> NotificationRuleList:
        """Every notification rule, by name. A URL shows only its scheme and host: its
        path and query often hold a token."""
        return notifications.rules(by=actor)

    @get("/rules/{name:str}", opt=VIEWER, sync_to_thread=True)
    def get_rule(
        self,
        name: FromPath[RuleName],
        notifications: NamedDependency[Notifications],
        actor: NamedDependency[Actor],
    ) -> NotificationRuleOut:
        """One notification rule."""
        return notifications.rule(name, by=actor)

    @put("/rules/{name:str}", opt=ADMIN, sync_to_thread=True, status_code=HTTP_200_OK)
    def save_rule(
        self,
        name: FromPath[RuleName],
        data: JSONBody[NotificationRuleIn],
        notifications: NamedDependency[Notifications],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
    ) -> NotificationRuleStateOut:
        """Make the rule, or replace it whole (``changed`` false when it was the same).
        It applies to what the log records from then on."""
        return notifications.save(name, data, at=clock(), by=actor)

    @delete("/rules/{name:str}", opt=ADMIN, sync_to_thread=True, status_code=HTTP_200_OK)
    def delete_rule(
        self,
        name: FromPath[RuleName],
        notifications: NamedDependency[Notifications],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
    ) -> NotificationRuleStateOut:
        """Delete the rule (404 if there is none); notifications already raised are
        still delivered."""
        return notifications.delete(name, at=clock(), by=actor)

    @post("/rules/{name:str}/test", opt=ADMIN, sync_to_thread=True, status_code=HTTP_202_ACCEPTED)
    def test_rule(
        self,
        name: FromPath[RuleName],
        notifications: NamedDependency[Notifications],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
    ) -> NotificationTestOut:
        """Send a test notification through the rule's channel now, as a run of
        ``notify.send`` (follow it by its ``execution_id``)."""
        return notifications.test(name, at=clock(), by=actor)

    @post("/rules:apply", opt=ADMIN, sync_to_thread=True, status_code=HTTP_200_OK)
    def apply_rules(
        self,
        data: JSONBody[NotificationsApplyIn],
        notifications: NamedDependency[Notifications],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
    ) -> NotificationsApplyOut:
        """Apply a jobs file's ``[[notifications]]`` as the set of ``scope``, in one
        save: made or replaced, and with ``prune`` the scope's other rules deleted;
        ``dry_run`` only answers the plan."""
        return notifications.apply(data, at=clock(), by=actor)
