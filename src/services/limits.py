"""Named limits: define one, change it, delete it, and list limits with their use now.

A named limit is a ``Limit`` aggregate in the log; the queue projection carries it
into the backend, whose lease step then holds every run naming its key to its values
(within a second). Use comes from the queue backend: runs holding each concurrency
key, starts in each rate window, and due runs waiting.
"""

from datetime import datetime, timedelta

import structlog

from jobledger.domain.errors import AlreadyExistsError, ConflictError, NotFoundError
from jobledger.domain.limits import Limit, LimitValues, limit_id
from jobledger.domain.roles import Role
from jobledger.persistence.ledger import Ledger
from jobledger.projections.queue.backend import QueueBackend
from jobledger.schemas.limits import KeyUse, LimitList, LimitOut, LimitStateOut, LimitValuesIn
from jobledger.services.actors import Actor
from jobledger.services.caps import (
    MAX_NAMED_LIMITS_SETTING,
    NO_LIMIT,
    check_room,
)
from jobledger.services.pages import Order, paged

log = structlog.get_logger(__name__)


def to_values(body: LimitValuesIn) -> LimitValues:
    per = None if body.per_seconds is None else timedelta(seconds=body.per_seconds)
    return LimitValues(concurrency=body.concurrency, rate=body.rate, per=per)


class Limits:
    """The named-limit use cases; every change is a direct save, like the queues'."""

    def __init__(self, ledger: Ledger, backend: QueueBackend, *, most: int = NO_LIMIT) -> None:
        self.ledger = ledger
        self.backend = backend
        self.most = most

    def define(self, name: str, values: LimitValuesIn, *, at: datetime, by: Actor) -> LimitStateOut:
        """Create the named limit ``name`` (again, if it was deleted); AlreadyExistsError
        if it exists."""
        by.require(Role.OPERATOR)
        limit = Limit.define(name, to_values(values), by=by.name, via=by.via, at=at)
        deleted = self.ledger.limit(limit.id)
        if deleted is not None and deleted.deleted:
            limit = deleted
            limit.change(to_values(values), by=by.name, via=by.via, at=at)
        check_room(
            name,
            self.backend.named_limits().keys(),
            most=self.most,
            what="named limit",
            field="name",
            setting=MAX_NAMED_LIMITS_SETTING,
        )
        try:
            self.ledger.save_all(limit)
        except (AlreadyExistsError, ConflictError):
            raise AlreadyExistsError(
                f"a limit named {name!r} exists: change it with PUT /api/v1/limits/{name}"
            ) from None
        log.info("limit.defined", limit=name, by=by.name, via=by.via)
        return LimitStateOut(limit=self._out(limit, []), changed=True)

    def change(self, name: str, values: LimitValuesIn, *, at: datetime, by: Actor) -> LimitStateOut:
        """Give the named limit new values; the same values change nothing."""
        by.require(Role.OPERATOR)
        limit = self._get(name)
        changed = limit.change(to_values(values), by=by.name, via=by.via, at=at)
        if changed:
            self.ledger.save_all(limit)
        log.info("limit.changed", limit=name, by=by.name, via=by.via, changed=changed)
        return LimitStateOut(limit=self._out(limit, []), changed=changed)

    def delete(self, name: str, *, at: datetime, by: Actor) -> LimitStateOut:
        """Stop applying the named limit: runs naming its key go back to their own
        values (and those without values wait for nothing)."""
        by.require(Role.OPERATOR)
        limit = self._get(name)
        limit.delete(by=by.name, via=by.via, at=at)
        self.ledger.save_all(limit)
        log.info("limit.deleted", limit=name, by=by.name, via=by.via)
        return LimitStateOut(limit=self._out(limit, []), changed=True)

    def set(self, name: str, values: LimitValuesIn, *, at: datetime, by: Actor) -> LimitStateOut:
        """Create the named limit, or change it if it exists (what the CLI's ``limit
        set`` does)."""
        by.require(Role.OPERATOR)
        existing = self.ledger.limit(limit_id(name))
        if existing is None or existing.deleted:
            try:
                return self.define(name, values, at=at, by=by)
            except AlreadyExistsError:
                pass  # created meanwhile: change it instead
        return self.change(name, values, at=at, by=by)

    def get(self, name: str, *, at: datetime, by: Actor) -> LimitOut:
        by.require(Role.VIEWER)
        return self._out(self._get(name), self._uses(at))

    def overview(
        self, *, at: datetime, by: Actor, limit: int | None = None, cursor: str | None = None
    ) -> LimitList:
        """The named limits with their use (``limit`` of them after the cursor's, by
        name; None: all), and every key in use or waited for."""
        by.require(Role.VIEWER)
        uses = self._uses(at)
        known = self.backend.named_limits()
        names, following = paged(known, _BY_NAME, limit=limit or len(known) or 1, cursor=cursor)
        limits = [self._out(found, uses) for found in self._existing(names)]
        return LimitList(limits=limits, keys=uses, next_cursor=following)

    def _existing(self, names: list[str]) -> list[Limit]:
        found = []
        for name in names:
            try:
                found.append(self._get(name))
            except NotFoundError:
                continue  # the projection knows a limit the log lost: never, but not fatal
        return found

    def _get(self, name: str) -> Limit:
        limit = self.ledger.limit(limit_id(name))
        if limit is None or limit.deleted:
            raise NotFoundError(f"no limit named {name!r}: create it with POST /api/v1/limits")
        return limit

    def _uses(self, at: datetime) -> list[KeyUse]:
        return [
            KeyUse(
                queue=use.queue,
                kind=use.kind,
                key=use.key,
                in_use=use.in_use,
                waiting=use.waiting,
                allowed=use.allowed,
            )
            for queue in sorted(self.backend.queues())
            for use in self.backend.limit_usage(queue, now=at)
        ]

    @staticmethod
    def _out(limit: Limit, uses: list[KeyUse]) -> LimitOut:
        values = limit.values
        own = [use for use in uses if use.key == limit.name]
        return LimitOut(
            name=limit.name,
            version=limit.version,
            concurrency=values.concurrency,
            rate=values.rate,
            per_seconds=None if values.per is None else values.per.total_seconds(),
            changed_at=limit.changed_at,
            in_use=sum(use.in_use for use in own),
            waiting=sum(use.waiting for use in own),
        )


_BY_NAME = Order[str]("limits", lambda name: (name,))
