"""Act on many runs at once: cancel them, or bring forward (retry now) those that wait
for a later time; chosen by id or by the executions list's filter, with a dry run that
only counts. Each change is the run's own event, recording who asked and why; a run
another change got to first is counted as refused, never changed twice (ADR 105)."""

from collections.abc import Callable
from datetime import datetime
from uuid import UUID

import msgspec

from jobledger.domain.errors import ConflictError, DomainError
from jobledger.domain.execution import Execution
from jobledger.domain.json_values import check_reason
from jobledger.domain.roles import Role
from jobledger.infra.writer import GroupCommitWriter
from jobledger.persistence.ledger import Ledger
from jobledger.projections.log.streams import load_many
from jobledger.schemas.executions import BulkReport
from jobledger.services.actors import Actor
from jobledger.services.errors import InvalidRequestError
from jobledger.services.views import Views

# The most runs one request acts on: a filter that matches more is refused with its
# count, so a mistaken filter cannot cancel a million runs in one call.
MOST_AT_ONCE = 10_000
# Ids one request may name.
MOST_IDS = 1_000
_PAGE = 500


class RunSelection(msgspec.Struct, frozen=True, kw_only=True):
    """Which runs: the ``ids`` named, or every run the filter matches (the executions
    list's filters); one of the two, never both, never neither."""

    ids: tuple[UUID, ...] = ()
    status: str | None = None
    job_id: UUID | None = None
    queue: str | None = None
    handler: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    search: str | None = None

    def filters(self) -> dict[str, object]:
        named = {f: getattr(self, f) for f in self.__struct_fields__ if f != "ids"}
        return {name: value for name, value in named.items() if value is not None}


class BulkRuns:
    """The bulk actions on runs (see the module docstring)."""

    def __init__(self, ledger: Ledger, writer: GroupCommitWriter, views: Views) -> None:
        self.ledger = ledger
        self.writer = writer
        self.views = views

    def cancel(
        self, selection: RunSelection, *, by: Actor, reason: str, dry_run: bool = False
    ) -> BulkReport:
        """Cancel every selected run that has not ended; a running one is told to stop."""
        return self._change(
            selection,
            by=by,
            reason=reason,
            dry_run=dry_run,
            command=lambda e: e.cancel(by=by.name, via=by.via, reason=reason),
        )

    def bring_forward(
        self,
        selection: RunSelection,
        *,
        by: Actor,
        reason: str,
        at: datetime,
        dry_run: bool = False,
    ) -> BulkReport:
        """Make every selected pending run that waits for a later time (a back-off, a
        snooze, a deferral, its run_at) due at ``at``, its attempts as they are."""
        return self._change(
            selection,
            by=by,
            reason=reason,
            dry_run=dry_run,
            command=lambda e: e.bring_forward(by=by.name, via=by.via, reason=reason, at=at),
        )

    def _change(
        self,
        selection: RunSelection,
        *,
        by: Actor,
        reason: str,
        dry_run: bool,
        command: Callable[[Execution], None],
    ) -> BulkReport:
        by.require(Role.OPERATOR)
        check_reason(by.name, reason)  # once here: per run it would count as refused
        ids = self.selected(selection)
        if dry_run:
            return BulkReport(len(ids), 0, 0, dry_run=True)
        return apply_each(self.writer, load_runs(self.ledger, ids), command)

    def selected(self, selection: RunSelection) -> list[UUID]:
        """The ids of the selected runs, at most ``MOST_AT_ONCE``."""
        filters = selection.filters()
        if selection.ids and filters:
            raise InvalidRequestError(
                "a bulk action takes ids or a filter, not both",
                field="ids",
                fix="send the ids alone, or the filter alone",
            )
        if selection.ids:
            if len(selection.ids) > MOST_IDS:
                raise InvalidRequestError(
                    f"{len(selection.ids)} ids; one request names at most {MOST_IDS:,}",
                    field="ids",
                    fix="send them in several requests",
                )
            return list(dict.fromkeys(selection.ids))
        if not filters:
            raise InvalidRequestError(
                "a bulk action needs ids or a filter",
                field="ids",
                fix="name the runs in ids, or filter them (status, job_id, queue, handler,"
                " since, until, search); every pending run is status=pending",
            )
        return self._matching(filters)

    def _matching(self, filters: dict[str, object]) -> list[UUID]:
        ids: list[UUID] = []
        cursor: str | None = None
        while True:
            page = self.views.executions(limit=_PAGE, cursor=cursor, **filters)  # type: ignore[arg-type]
            if page.total > MOST_AT_ONCE:
                raise InvalidRequestError(
                    f"the filter matches {page.total:,} runs; one request acts on at most"
                    f" {MOST_AT_ONCE:,}",
                    field="filter",
                    fix="narrow the filter (since and until, a queue, a handler) and act on"
                    " each part",
                )
            ids.extend(row.id for row in page.items)
            if page.next_cursor is None:
                return ids
            cursor = page.next_cursor


def load_runs(ledger: Ledger, ids: list[UUID]) -> list[Execution]:
    """The runs, in the order of ``ids``, read in one statement where the store can; an
    id of no run raises NotFoundError, as loading it alone does."""
    found = load_many(ledger, Execution, ids)
    for missing in (i for i in ids if i not in found):
        ledger.get_execution(missing)  # raises NotFoundError naming it
    return [found[i] for i in ids]


def apply_each(
    writer: GroupCommitWriter, executions: list[Execution], command: Callable[[Execution], None]
) -> BulkReport:
    """``command`` on each execution, saved together through the writer; a run the
    command refuses (its state moved on) or whose save conflicts counts as refused."""
    futures = []
    refused = 0
    for execution in executions:
        try:
            command(execution)
        except DomainError:
            refused += 1
            continue
        futures.append(writer.submit(execution))
    changed = 0
    for future in futures:
        try:
            future.result()
            changed += 1
        except ConflictError:
            refused += 1
    return BulkReport(len(executions), changed, refused, dry_run=False)
