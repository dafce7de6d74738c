"""The workflow rows of the read models (migration 0020) as the ``ReadModelTables`` and
``ReadModelQueries`` ports keep and list them, run on both stores through the SQL
adapters: a fold's rows are written and read back, an older version changes nothing,
and the list comes newest first, filtered, counted and paged by offset and by cursor,
with a row it cannot present shown as a placeholder.

The tests of a module share a store; each empties the tables first."""

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobledger.adapters.sql.read_model_queries import SqlReadModelQueries
from jobledger.adapters.sql.read_models import SqlReadModelTables
from jobledger.domain.instants import LATEST_MS
from jobledger.domain.workflow import Workflow
from jobledger.projections.database import Database, Row
from jobledger.projections.read_models.queries import MAX_LIMIT, CursorError, Page
from jobledger.projections.read_models.tables import Fold
from jobledger.projections.read_models.workflows import WORKFLOW_COLUMNS
from jobledger.projections.times import to_ms
from jobledger.schemas.rows import StepCounts, WorkflowRow

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def tables(module_database: Database) -> SqlReadModelTables:
    tables = SqlReadModelTables(module_database)
    with module_database.transaction() as cursor:
        tables.clear(cursor)
    return tables


@pytest.fixture
def queries(module_database: Database, tables: SqlReadModelTables) -> SqlReadModelQueries:
    del tables  # emptied
    return SqlReadModelQueries(module_database)


def workflow(name: str, *, started: datetime = NOW, status: str = "running", **values: Any) -> Row:
    """A workflow's row as a fold writes it: three steps, one released."""
    ended = None if status == "running" else to_ms(started + timedelta(minutes=1))
    row: Row = dict.fromkeys(WORKFLOW_COLUMNS, 0)
    row.update(
        id=str(uuid.uuid4()),
        name=name,
        status=status,
        on_failure="stop",
        steps_total=3,
        steps_waiting=2,
        steps_released=1,
        started_at_ms=to_ms(started),
        updated_at_ms=ended or to_ms(started),
        ended_at_ms=ended,
        started_by="ada",
        started_via="session",
        version=2,
    )
    row.update(values)
    return row


def write(database: Database, *rows: Row) -> None:
    fold = Fold({}, {})
    for row in rows:
        fold.workflows.rows[row["id"]] = row
        fold.workflows.changed.add(row["id"])
    with database.transaction() as cursor:
        SqlReadModelTables(database).write_fold(cursor, fold)


def read(database: Database, *ids: str) -> dict[str, Row]:
    """The stored rows a fold of an event of each of ``ids`` reads."""
    events = [
        (key, Workflow.Completed(originator_id=uuid.UUID(key), originator_version=9, timestamp=NOW))
        for key in ids
    ]
    with database.transaction() as cursor:
        fold = SqlReadModelTables(database).read_fold(cursor, events)
    assert (fold.jobs, fold.executions) == ({}, {})
    return fold.workflows.rows


def ids(page: Page) -> list[str]:
    return [str(item.id) for item in page.items]


@pytest.mark.usefixtures("tables")
def test_written_workflow_rows_are_read_back(module_database: Database) -> None:
    """If a fold's workflow rows are written, then a fold of their events reads each
    back as written, and nothing for a workflow without a row."""
    first, second = workflow("a"), workflow("b", status="completed", steps_completed=3)
    write(module_database, first, second)
    found = read(module_database, first["id"], second["id"], str(uuid.uuid4()))
    assert found == {first["id"]: first, second["id"]: second}


def test_an_older_version_of_a_workflow_changes_nothing(
    tables: SqlReadModelTables, module_database: Database
) -> None:
    """If a workflow's row is written again with a lower or the same version, then the
    stored row stays; with a higher one, it is replaced; a clear empties the table."""
    row = workflow("a", version=5)
    write(module_database, row)
    write(module_database, {**row, "status": "failed", "version": 4})
    write(module_database, {**row, "status": "failed", "version": 5})
    assert read(module_database, row["id"])[row["id"]]["status"] == "running"
    write(module_database, {**row, "status": "cancelled", "version": 6})
    assert read(module_database, row["id"])[row["id"]]["status"] == "cancelled"
    with module_database.transaction() as cursor:
        tables.clear(cursor)
    assert read(module_database, row["id"]) == {}


def test_workflows_newest_first_with_filters_and_totals(
    queries: SqlReadModelQueries, module_database: Database
) -> None:
    """If workflows are listed, then the latest started come first (a tie by id, the
    greater first); status, name (the whole name, case and all) and the window of
    their start each narrow them, with the total of what matched; each row has its
    steps counted by state and who started it."""
    rows = [
        workflow("nightly", started=NOW - timedelta(hours=2), status="completed"),
        workflow("nightly", started=NOW - timedelta(hours=1), status="failed"),
        workflow("backfill", started=NOW, status="cancelled"),
        workflow("nightly-eu", started=NOW),
        workflow("Nightly", started=NOW + timedelta(hours=1)),
    ]
    write(module_database, *rows)
    tie = sorted([rows[2]["id"], rows[3]["id"]], reverse=True)
    everything = queries.list_workflows()
    assert ids(everything) == [rows[4]["id"], *tie, rows[1]["id"], rows[0]["id"]]
    assert everything.total == 5
    assert ids(queries.list_workflows(status="running")) == [rows[4]["id"], rows[3]["id"]]
    assert ids(queries.list_workflows(name="nightly")) == [rows[1]["id"], rows[0]["id"]]
    assert queries.list_workflows(name="nightly", status="failed").total == 1
    window = queries.list_workflows(since=NOW - timedelta(hours=1), until=NOW)
    assert ids(window) == [rows[1]["id"]]
    assert queries.list_workflows(status="unknown").total == 0
    [shown] = queries.list_workflows(name="backfill").items
    assert shown == WorkflowRow(
        id=uuid.UUID(rows[2]["id"]),
        name="backfill",
        status="cancelled",
        on_failure="stop",
        step_counts=StepCounts(
            total=3, waiting=2, released=1, completed=0, failed=0, cancelled=0, skipped=0
        ),
        started_at=NOW,
        updated_at=NOW + timedelta(minutes=1),
        ended_at=NOW + timedelta(minutes=1),
        started_by="ada",
        started_via="session",
        version=2,
    )


def test_workflows_page_by_offset_and_by_cursor(
    queries: SqlReadModelQueries, module_database: Database
) -> None:
    """If the list is read a page at a time, then the offset pages and the cursor pages
    each show every row once in the list's order, a row started meanwhile neither
    repeats nor shifts a row into the next page, and a cursor of another list or none
    is refused."""
    rows = [workflow(f"w{n}", started=NOW + timedelta(minutes=n)) for n in range(5)]
    write(module_database, *rows)
    whole = ids(queries.list_workflows())
    offsets = [ids(queries.list_workflows(limit=2, offset=n)) for n in (0, 2, 4)]
    assert [i for page in offsets for i in page] == whole
    first = queries.list_workflows(limit=2)
    assert first.next_cursor is not None
    write(module_database, workflow("later", started=NOW + timedelta(hours=1)))
    found, cursor = ids(first), first.next_cursor
    while cursor:
        page = queries.list_workflows(limit=2, cursor=cursor)
        assert page.offset == 0
        found, cursor = found + ids(page), page.next_cursor or ""
    assert found == whole
    assert queries.list_workflows(limit=MAX_LIMIT + 1).limit == MAX_LIMIT
    with pytest.raises(CursorError, match="another list"):
        queries.list_executions(cursor=first.next_cursor)
    with pytest.raises(CursorError):
        queries.list_workflows(cursor="not-a-cursor")


def test_a_workflow_row_it_cannot_present_is_a_placeholder(
    queries: SqlReadModelQueries, module_database: Database
) -> None:
    """If one stored row has a time past the range of instants and another an id that
    is no UUID, then the list still answers with every row: the first with that time
    as null and ``unreadable`` naming it, the second with the nil id, its values as
    placeholders and why."""
    late = workflow("late", ended_at_ms=LATEST_MS + 1, status="completed")
    garbled = workflow("garbled", id="not-a-uuid", started=NOW - timedelta(hours=1))
    fine = workflow("fine", started=NOW - timedelta(hours=2))
    write(module_database, late, garbled, fine)
    rows = {row.name: row for row in queries.list_workflows().items}
    assert set(rows) == {"late", "(unreadable)", "fine"}
    assert rows["late"].ended_at is None
    assert rows["late"].unreadable is not None
    assert rows["late"].unreadable.startswith("ended_at: ")
    assert rows["late"].started_at == NOW
    placeholder = rows["(unreadable)"]
    assert placeholder.id == uuid.UUID(int=0)
    assert placeholder.unreadable is not None
    assert placeholder.unreadable.startswith("row: ValueError")
    assert rows["fine"].unreadable is None
