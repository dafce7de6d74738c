"""The ``ReadModelTables`` port's contract (``projections.read_models.tables``), run on
both stores through ``SqlReadModelTables``: a fold's rows are written and read back,
an older version changes nothing, counts add up and vanish at 0, rows leave by id (an
archive) or by age (a cleanup), and a rebuild's new tables are made, dropped and give
back the rows late events change.

The tests of a module share a store; each empties the tables first."""

import sqlite3
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from jobledger.adapters.sql.read_models import SqlReadModelTables
from jobledger.projections.database import Database, Row, row_values
from jobledger.projections.read_models.replay import shadow
from jobledger.projections.read_models.tables import (
    ATTEMPT_COLUMNS,
    ATTEMPTS,
    EXECUTION_COLUMNS,
    EXECUTION_KIND,
    EXECUTIONS,
    STATUS_COUNTS,
    Fold,
    ReadModelTables,
)
from jobledger.projections.times import to_ms

NOW = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture
def tables(module_database: Database) -> ReadModelTables:
    tables = SqlReadModelTables(module_database)
    with module_database.transaction() as cursor:
        tables.clear(cursor)
    return tables


class Leased:
    """Stands for an execution event: ``read_fold`` reads the rows of its stream."""

    job_id = None


def execution(status: str, *, version: int = 1, at: datetime = NOW, lease: bool = True) -> Row:
    row: Row = dict.fromkeys(EXECUTION_COLUMNS)
    ms = to_ms(at)
    row.update(
        id=str(uuid.uuid4()),
        handler="h",
        queue="default",
        priority=0,
        trigger="manual",
        status=status,
        attempt=1,
        max_attempts=3,
        enqueued_at_ms=ms,
        ready_at_ms=ms,
        finished_at_ms=ms if status != "running" else None,
        lease_seq=1 if lease else None,
        version=version,
    )
    return row


def attempt(execution_id: str, seq: int = 1) -> Row:
    row: Row = dict.fromkeys(ATTEMPT_COLUMNS)
    row.update(
        execution_id=execution_id,
        seq=seq,
        attempt=1,
        worker_id="w",
        lease_id="l",
        started_at_ms=to_ms(NOW),
    )
    return row


def write(database: Database, tables: ReadModelTables, *rows: Row) -> None:
    """``rows`` written as a fold's changes, each with its attempt and status count."""
    fold = Fold({}, {})
    for row in rows:
        fold.executions[row["id"]] = row
        fold.changed_executions.add(row["id"])
        fold.attempts[row["id"], 1] = attempt(row["id"])
        fold.changed_attempts.add((row["id"], 1))
        fold.status_counts[EXECUTION_KIND, row["status"]] += 1
    with database.transaction() as cursor:
        tables.write_fold(cursor, fold)


def read(database: Database, tables: ReadModelTables, *ids: str) -> Fold:
    with database.transaction() as cursor:
        return tables.read_fold(cursor, [(i, Leased()) for i in ids])


def counts(database: Database) -> dict[str, int]:
    with database.transaction(snapshot=True) as cursor:
        cursor.execute(f"SELECT status, count FROM {STATUS_COUNTS}")  # noqa: S608 (constant)
        return {str(status): int(n) for status, n in cursor.fetchmany(100)}


def test_a_written_fold_is_read_back(tables: ReadModelTables, module_database: Database) -> None:
    """If a fold's rows are written, then a fold of their events reads them, with the
    attempt of each leased execution, and nothing of the others."""
    leased, waiting = execution("running"), execution("pending", lease=False)
    write(module_database, tables, leased, waiting)
    fold = read(module_database, tables, leased["id"], waiting["id"], str(uuid.uuid4()))
    assert fold.executions == {leased["id"]: leased, waiting["id"]: waiting}
    assert list(fold.attempts) == [(leased["id"], 1)]
    assert fold.jobs == {}
    assert not fold.changed_executions


def test_an_older_version_changes_nothing(
    tables: ReadModelTables, module_database: Database
) -> None:
    """If a row is written again with a lower version, then the stored row stays; with
    a higher one, it is replaced."""
    row = execution("running", version=5)
    write(module_database, tables, row)
    write(module_database, tables, {**row, "status": "pending", "version": 4})
    assert read(module_database, tables, row["id"]).executions[row["id"]]["status"] == "running"
    write(module_database, tables, {**row, "status": "completed", "version": 6})
    assert read(module_database, tables, row["id"]).executions[row["id"]]["status"] == "completed"


def test_status_counts_add_up_and_vanish_at_zero(
    tables: ReadModelTables, module_database: Database
) -> None:
    """If folds add to a status's count, then the counts sum; a status whose count
    falls to 0 (an archive's forgetting) is gone."""
    done = [execution("completed") for _ in range(3)]
    write(module_database, tables, done[0])
    write(module_database, tables, *done[1:], execution("failed"))
    assert counts(module_database) == {"completed": 3, "failed": 1}
    with module_database.transaction() as cursor:
        assert tables.forget_executions(cursor, [r["id"] for r in done]) == 3
    assert counts(module_database) == {"failed": 1}
    assert read(module_database, tables, *(r["id"] for r in done)).executions == {}


def test_pruning_takes_only_finished_executions_older_than_the_cutoff(
    tables: ReadModelTables, module_database: Database
) -> None:
    """If finished executions are pruned, then those finished before the cutoff go,
    with their attempts and counts; dead letters, running ones and newer ones stay."""
    old = NOW - timedelta(days=2)
    gone = [execution("completed", at=old), execution("cancelled", at=old)]
    kept = [
        execution("dead_lettered", at=old),
        execution("running", at=old),
        execution("completed", at=NOW),
    ]
    write(module_database, tables, *gone, *kept)
    assert tables.prune_finished(before=NOW - timedelta(days=1)) == 2
    ids = [r["id"] for r in (*gone, *kept)]
    assert set(read(module_database, tables, *ids).executions) == {r["id"] for r in kept}
    assert counts(module_database) == {"dead_lettered": 1, "running": 1, "completed": 1}


def test_clearing_empties_the_tables(tables: ReadModelTables, module_database: Database) -> None:
    """If the tables are cleared, then no row or count is left."""
    row = execution("completed")
    write(module_database, tables, row)
    with module_database.transaction() as cursor:
        tables.clear(cursor)
    assert read(module_database, tables, row["id"]).executions == {}
    assert counts(module_database) == {}


def rebuilt(database: Database, executions: list[Row], attempts: list[Row]) -> None:
    """``executions`` and ``attempts`` inserted into the new tables, as a replay does."""
    with database.transaction() as cursor:
        for table, columns, rows in (
            (EXECUTIONS, EXECUTION_COLUMNS, executions),
            (ATTEMPTS, ATTEMPT_COLUMNS, attempts),
        ):
            cursor.insert_rows(shadow(table), columns, row_values(rows, columns))


def take_back(
    database: Database, tables: ReadModelTables, *ids: str
) -> tuple[list[Row], list[Row]]:
    with database.transaction() as cursor:
        return tables.take_back_rebuilt(cursor, sorted(ids))


def test_new_tables_are_made_empty_and_dropped(
    tables: ReadModelTables, module_database: Database
) -> None:
    """If the new tables are made where a rebuild left some, then they are empty; once
    dropped they are gone, and dropping them again is no error."""
    with module_database.transaction() as cursor:
        tables.create_rebuilt(cursor)
    left = execution("completed")
    rebuilt(module_database, [left], [attempt(left["id"])])
    with module_database.transaction() as cursor:
        tables.create_rebuilt(cursor)
    assert take_back(module_database, tables, left["id"]) == ([], [])
    for _ in range(2):
        with module_database.transaction() as cursor:
            tables.drop_rebuilt(cursor)
    with pytest.raises((psycopg.Error, sqlite3.Error), match=shadow(EXECUTIONS)):
        take_back(module_database, tables, left["id"])


def test_rows_are_taken_back_from_the_new_tables(
    tables: ReadModelTables, module_database: Database
) -> None:
    """If rows are taken back from the new tables, then those of the executions asked
    for come with the attempt of each one's latest lease, and leave the tables; an
    earlier attempt and other executions stay."""
    with module_database.transaction() as cursor:
        tables.create_rebuilt(cursor)
    leased = {**execution("running"), "lease_seq": 2}
    waiting, other = execution("pending", lease=False), execution("running")
    earlier, latest = attempt(leased["id"], 1), attempt(leased["id"], 2)
    rebuilt(module_database, [leased, waiting, other], [earlier, latest, attempt(other["id"])])
    taken = take_back(module_database, tables, leased["id"], waiting["id"], str(uuid.uuid4()))
    executions, attempts = taken
    assert sorted(executions, key=lambda row: row["id"]) == sorted(
        [leased, waiting], key=lambda row: row["id"]
    )
    assert attempts == [latest]
    assert take_back(module_database, tables, leased["id"], waiting["id"]) == ([], [])
    assert take_back(module_database, tables, other["id"]) == ([other], [attempt(other["id"])])
    with module_database.transaction() as cursor:
        tables.drop_rebuilt(cursor)
