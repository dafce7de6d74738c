"""Dead letters: list, show, requeue or discard them (one or many, with a dry run).

One source for the API, the dashboard and the CLI: the read models list what is
dead-lettered and select what a filter matches; every change is a command on the
Execution aggregate, loaded from the log, recorded as an event with who did it and
why, and saved through the group-commit writer in batches.
"""

from collections.abc import Callable
from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec

from jobledger.domain.execution import Execution
from jobledger.domain.json_values import check_reason
from jobledger.domain.roles import Role
from jobledger.infra.writer import GroupCommitWriter
from jobledger.persistence.ledger import Ledger
from jobledger.persistence.undecodable import UndecodableEvent
from jobledger.schemas.executions import BulkReport
from jobledger.schemas.rows import DeadLetterGroup
from jobledger.services.actors import Actor
from jobledger.services.bulk_runs import apply_each, load_runs
from jobledger.services.errors import NotDeadLetteredError
from jobledger.services.views import Page, Views

__all__ = ["BulkReport", "DeadLetterFilter", "DeadLetters"]

_PAGE = 500


class DeadLetterFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which dead letters an operation covers; empty fields match everything.
    ``error_contains`` matches part of the last error, case and all."""

    queue: str | None = None
    handler: str | None = None
    job_id: UUID | None = None
    error_contains: str | None = None
    search: str | None = None  # as the executions list's (ADR 107)


class DeadLetters:
    def __init__(self, ledger: Ledger, writer: GroupCommitWriter, views: Views) -> None:
        self.ledger = ledger
        self.writer = writer
        self.views = views

    def page(
        self,
        selection: DeadLetterFilter,
        *,
        limit: int = 50,
        offset: int = 0,
        cursor: str | None = None,
    ) -> Page:
        """Dead letters that match, the latest to die first."""
        return self.views.dead_letters(
            queue=selection.queue,
            handler=selection.handler,
            job_id=selection.job_id,
            error_contains=selection.error_contains,
            search=selection.search,
            limit=limit,
            offset=offset,
            cursor=cursor,
        )

    def groups(self, *, limit: int = 100) -> list[DeadLetterGroup]:
        """Dead letters grouped by job, handler and error, the largest group first; act
        on one with the bulk actions and its job, handler and error as the filter."""
        return self.views.dead_letter_groups(limit=limit)

    def matching(self, selection: DeadLetterFilter) -> list[UUID]:
        """The ids of every dead letter that matches, page by page."""
        ids: list[UUID] = []
        cursor: str | None = None
        while True:
            page = self.page(selection, limit=_PAGE, cursor=cursor)
            ids.extend(row.id for row in page.items)
            if page.next_cursor is None:
                return ids
            cursor = page.next_cursor

    def show(self, execution_id: UUID) -> list[dict[str, Any]]:
        """Every event of the execution, oldest first, as plain fields (one that cannot
        be decoded as ``undecodable`` with its topic and error)."""
        return [
            {"event": _name(e), "version": e.originator_version, **_fields(e)}
            for e in self.ledger.history(execution_id)
        ]

    def requeue(
        self,
        ids: list[UUID],
        *,
        by: Actor,
        reason: str,
        at: datetime,
        error_contains: str | None = None,
        dry_run: bool = False,
    ) -> BulkReport:
        """Give each dead letter a fresh attempt budget; a dry run only counts."""
        return self._change(
            ids,
            by=by,
            reason=reason,
            error_contains=error_contains,
            dry_run=dry_run,
            command=lambda e: e.requeue(by=by.name, via=by.via, reason=reason, at=at),
        )

    def discard(
        self,
        ids: list[UUID],
        *,
        by: Actor,
        reason: str,
        error_contains: str | None = None,
        dry_run: bool = False,
    ) -> BulkReport:
        """Give up on each dead letter for good (the log keeps its history); a dry run
        only counts."""
        return self._change(
            ids,
            by=by,
            reason=reason,
            error_contains=error_contains,
            dry_run=dry_run,
            command=lambda e: e.discard(by=by.name, via=by.via, reason=reason),
        )

    def requeue_one(
        self, execution_id: UUID, *, by: Actor, reason: str, at: datetime
    ) -> BulkReport:
        return _one(self.requeue([execution_id], by=by, reason=reason, at=at), execution_id)

    def discard_one(self, execution_id: UUID, *, by: Actor, reason: str) -> BulkReport:
        return _one(self.discard([execution_id], by=by, reason=reason), execution_id)

    def _change(
        self,
        ids: list[UUID],
        *,
        by: Actor,
        reason: str,
        error_contains: str | None,
        dry_run: bool,
        command: Callable[[Execution], None],
    ) -> BulkReport:
        by.require(Role.OPERATOR)
        # Checked once here: per execution, a refusal would only count as "refused".
        check_reason(by.name, reason)
        selected = self._select(ids, error_contains)
        if dry_run:
            return BulkReport(len(selected), 0, 0, dry_run=True)
        return apply_each(self.writer, selected, command)

    def _select(self, ids: list[UUID], error_contains: str | None) -> list[Execution]:
        executions = load_runs(self.ledger, ids)
        if error_contains:
            executions = [e for e in executions if error_contains in (e.last_error or "")]
        return executions


def _one(report: BulkReport, execution_id: UUID) -> BulkReport:
    if report.refused:
        raise NotDeadLetteredError(f"execution {execution_id} is not dead-lettered (any more)")
    return report


def _name(domain_event: Any) -> str:  # noqa: ANN401 (any execution event)
    if isinstance(domain_event, UndecodableEvent):
        return "undecodable"
    return type(domain_event).__name__


def _fields(domain_event: Any) -> dict[str, Any]:  # noqa: ANN401 (any execution event)
    """The event's own fields as plain values: a run's spec (its payload among them:
    what an operator judges a dead letter by) and its handler's lines too."""
    skip = {"originator_id", "originator_version", "originator_topic"}
    return {k: msgspec.to_builtins(v) for k, v in vars(domain_event).items() if k not in skip}
