"""The ``ReadModelQueries`` port's contract (``projections.read_models.queries``), run on
both stores through ``SqlReadModelQueries``: each list's order, filters and totals, its
pages by offset and by cursor, one row by id, the attempts in order, the statuses of
many executions at once, the minutes' statistics and the status counts.

The tests of a module share a store; each empties the tables and writes its own rows
(as a fold writes them)."""

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from jobledger.adapters.sql.read_model_queries import SqlReadModelQueries
from jobledger.adapters.sql.read_models import SqlReadModelTables
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.execution import Execution, ExecutionStatus, Trigger
from jobledger.domain.policies import RetryPolicy
from jobledger.projections.database import Database, Row
from jobledger.projections.read_models.queries import (
    JOB_STATUSES,
    MAX_LIMIT,
    CursorError,
    Page,
    ReadModelQueries,
)
from jobledger.projections.read_models.tables import (
    ATTEMPT_COLUMNS,
    DURATION,
    EXECUTION_COLUMNS,
    EXECUTION_KIND,
    FIRED,
    JOB_COLUMNS,
    JOB_KIND,
    LATENESS,
    Fold,
    bucket_of,
)
from jobledger.projections.times import to_ms
from jobledger.services.bodies import from_definition

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def queries(module_database: Database) -> ReadModelQueries:
    with module_database.transaction() as cursor:
        SqlReadModelTables(module_database).clear(cursor)
    return SqlReadModelQueries(module_database)


def job(name: str, *, status: str = "active", queue: str = "default", **values: Any) -> Row:
    row: Row = dict.fromkeys(JOB_COLUMNS)
    row.update(
        id=str(uuid.uuid4()),
        name=name,
        handler="test.echo",
        queue=queue,
        priority=0,
        schedule_kind="manual",
        status=status,
        created_at_ms=to_ms(NOW),
        created_by="tester",
        updated_at_ms=to_ms(NOW),
        version=1,
        definition=msgspec.json.encode(
            JobDefinition(name=name, spec=ExecutionSpec(handler="test.echo"))
        ).decode(),
        source="api",
    )
    row.update(values)
    return row


def execution(status: str, *, enqueued: datetime, queue: str = "default", **values: Any) -> Row:
    row: Row = dict.fromkeys(EXECUTION_COLUMNS)
    finished = status not in {"pending", "running"}
    row.update(
        id=str(uuid.uuid4()),
        handler="test.echo",
        queue=queue,
        priority=0,
        trigger="manual",
        status=status,
        attempt=1,
        max_attempts=3,
        enqueued_at_ms=to_ms(enqueued),
        ready_at_ms=to_ms(enqueued),
        finished_at_ms=to_ms(enqueued + timedelta(seconds=1)) if finished else None,
        version=1,
    )
    row.update(values)
    return row


def attempt(execution_id: str, seq: int, outcome: str | None) -> Row:
    row: Row = dict.fromkeys(ATTEMPT_COLUMNS)
    row.update(
        execution_id=execution_id,
        seq=seq,
        attempt=seq,
        worker_id=f"w{seq}",
        lease_id=str(uuid.uuid4()),
        started_at_ms=to_ms(NOW) + seq,
        outcome=outcome,
    )
    return row


def write(
    database: Database, *, jobs: Sequence[Row] = (), executions: Sequence[Row] = (), **more: Any
) -> None:
    """The rows written as a fold writes them, each job and execution counted in its
    status; ``more`` sets the fold's attempts, stats or histograms."""
    fold = Fold({}, {})
    for row in jobs:
        fold.jobs[row["id"]] = row
        fold.changed_jobs.add(row["id"])
        fold.status_counts[JOB_KIND, row["status"]] += 1
    for row in executions:
        fold.executions[row["id"]] = row
        fold.changed_executions.add(row["id"])
        fold.status_counts[EXECUTION_KIND, row["status"]] += 1
    for row in more.get("attempts", ()):
        fold.attempts[row["execution_id"], row["seq"]] = row
        fold.changed_attempts.add((row["execution_id"], row["seq"]))
    fold.stats.update(more.get("stats", {}))
    fold.histograms.update(more.get("histograms", {}))
    with database.transaction() as cursor:
        SqlReadModelTables(database).write_fold(cursor, fold)


def ids(page: Page) -> list[uuid.UUID]:
    return [item.id for item in page.items]


def walk(listing: Any, limit: int, **filters: Any) -> list[uuid.UUID]:
    """Every id of a list, page by page along its cursors."""
    found: list[uuid.UUID] = []
    cursor = None
    for _page in range(20):  # more than any list here has: a cursor that repeats fails
        page = listing(limit=limit, cursor=cursor, **filters)
        assert page.offset == 0
        found.extend(ids(page))
        if page.next_cursor is None:
            return found
        cursor = page.next_cursor
    pytest.fail("the cursors never reach the end of the list")


def test_jobs_by_name_ignoring_case_with_filters_and_totals(
    queries: ReadModelQueries, module_database: Database
) -> None:
    """If jobs are listed, then they come by name ignoring case; each filter narrows
    them with the total of what matched, and a search matches part of the name
    (``_`` and ``%`` are no wildcards)."""
    rows = [
        job("beta", queue="hooks"),
        job("Alpha"),
        job("gamma_backup", status="paused", queue="hooks", handler="shell.command"),
        job("delta", status="deleted", source="code"),
        job("gammaXbackup"),
    ]
    write(module_database, jobs=rows)
    listing = queries.list_jobs

    def names(**filters: Any) -> list[str]:
        return [row.name for row in listing(present=from_definition, **filters).items]

    assert names() == ["Alpha", "beta", "delta", "gamma_backup", "gammaXbackup"]
    assert names(status="paused") == ["gamma_backup"]
    assert names(queue="hooks") == ["beta", "gamma_backup"]
    assert names(handler="shell.command") == ["gamma_backup"]
    assert names(source="code") == ["delta"]
    assert names(search="A_B") == ["gamma_backup"]
    assert names(search="%") == []
    assert listing(present=from_definition, status="active").total == 3
    assert listing(present=from_definition, queue="hooks", status="paused").total == 1
    page = listing(present=from_definition, limit=2, offset=1)
    assert [row.name for row in page.items] == ["beta", "delta"]
    assert (page.total, page.limit, page.offset) == (5, 2, 1)
    found = queries.get_job(uuid.UUID(rows[2]["id"]), present=from_definition)
    assert found is not None
    assert (found.name, found.status, found.queue) == ("gamma_backup", "paused", "hooks")
    assert found.definition is not None
    assert found.definition.name == "gamma_backup"
    assert queries.get_job(uuid.uuid4(), present=from_definition) is None


def test_executions_newest_first_with_filters_and_their_jobs_names(
    queries: ReadModelQueries, module_database: Database
) -> None:
    """If executions are listed, then the latest enqueued come first (a tie by id, the
    greater first); each filter narrows them with the total of what matched, and each
    row names its job."""
    parent = job("parent")
    runs = [
        execution("completed", enqueued=NOW, job_id=parent["id"]),
        execution("pending", enqueued=NOW + timedelta(minutes=1), queue="hooks"),
        execution("completed", enqueued=NOW + timedelta(minutes=2), handler="shell.command"),
        execution("running", enqueued=NOW + timedelta(minutes=2)),
    ]
    write(module_database, jobs=[parent], executions=runs)
    tied = sorted([runs[2]["id"], runs[3]["id"]], reverse=True)
    newest = [uuid.UUID(i) for i in [*tied, runs[1]["id"], runs[0]["id"]]]
    everything = queries.list_executions()
    assert (ids(everything), everything.total) == (newest, 4)
    completed = queries.list_executions(status="completed")
    assert (ids(completed), completed.total) == ([uuid.UUID(runs[i]["id"]) for i in (2, 0)], 2)
    assert ids(queries.list_executions(queue="hooks")) == [uuid.UUID(runs[1]["id"])]
    assert ids(queries.list_executions(handler="shell.command")) == [uuid.UUID(runs[2]["id"])]
    by_job = queries.list_executions(job_id=uuid.UUID(parent["id"]))
    assert (ids(by_job), by_job.total) == ([uuid.UUID(runs[0]["id"])], 1)
    window = queries.list_executions(
        since=NOW + timedelta(seconds=30), until=NOW + timedelta(minutes=2)
    )
    assert (ids(window), window.total) == ([uuid.UUID(runs[1]["id"])], 1)
    page = queries.list_executions(limit=2, offset=1)
    assert (ids(page), page.total) == (newest[1:3], 4)
    row = queries.get_execution(uuid.UUID(runs[0]["id"]))
    assert row is not None
    assert (row.job_name, row.status, row.job_id) == (
        "parent",
        "completed",
        uuid.UUID(parent["id"]),
    )
    assert queries.get_execution(uuid.uuid4()) is None


def test_dead_letters_the_latest_to_die_first(
    queries: ReadModelQueries, module_database: Database
) -> None:
    """If dead letters are listed, then only dead-lettered executions come, the latest to
    die first; the error filter matches part of the error, case and all."""
    early = execution(
        "dead_lettered", enqueued=NOW + timedelta(minutes=5), last_error="HTTP 503 Busy"
    )
    late = execution(
        "dead_lettered",
        enqueued=NOW,
        queue="hooks",
        last_error="boom 50%",
        finished_at_ms=to_ms(NOW + timedelta(hours=1)),
    )
    write(module_database, executions=[early, late, execution("completed", enqueued=NOW)])
    letters = queries.list_dead_letters()
    assert (ids(letters), letters.total) == ([uuid.UUID(late["id"]), uuid.UUID(early["id"])], 2)
    assert ids(queries.list_dead_letters(queue="hooks")) == [uuid.UUID(late["id"])]
    assert ids(queries.list_dead_letters(error_contains="503")) == [uuid.UUID(early["id"])]
    assert ids(queries.list_dead_letters(error_contains="BOOM")) == []
    assert ids(queries.list_dead_letters(error_contains="50%")) == [uuid.UUID(late["id"])]
    assert queries.list_dead_letters(error_contains="503").total == 1


def test_cursors_walk_every_list_and_belong_to_it(
    queries: ReadModelQueries, module_database: Database
) -> None:
    """If a list is followed along its cursors, then the pages hold every row once, in
    the list's order, and the last page has none; a cursor of another list, or none at
    all, is refused; a limit is clamped to 1..MAX_LIMIT."""
    jobs = [job(name) for name in ("b", "B", "a", "c", "A")]
    runs = [execution("dead_lettered", enqueued=NOW + timedelta(seconds=i % 3)) for i in range(7)]
    write(module_database, jobs=jobs, executions=runs)
    lists: list[tuple[Any, dict[str, Any]]] = [
        (queries.list_jobs, {"present": from_definition}),
        (queries.list_executions, {}),
        (queries.list_executions, {"status": "dead_lettered", "queue": "default"}),
        (queries.list_dead_letters, {}),
    ]
    for listing, filters in lists:
        whole = ids(listing(**filters))
        assert len(whole) in {5, 7}
        for limit in (1, 2, 3):
            assert walk(listing, limit, **filters) == whole
    first = queries.list_executions(limit=0)
    assert (first.limit, len(first.items)) == (1, 1)
    assert queries.list_executions(limit=MAX_LIMIT + 1).limit == MAX_LIMIT
    assert first.next_cursor is not None
    with pytest.raises(CursorError, match="another list"):
        queries.list_dead_letters(cursor=first.next_cursor)
    with pytest.raises(CursorError, match="another list"):
        queries.list_jobs(present=from_definition, cursor=first.next_cursor)
    with pytest.raises(CursorError):
        queries.list_executions(cursor="not-a-cursor")


def test_attempts_in_order_and_many_statuses_at_once(
    queries: ReadModelQueries, module_database: Database
) -> None:
    """If an execution's attempts are listed, then they come in lease order; if the
    statuses of many executions are asked for (more than one statement's ids), then
    each the read model has comes with its version, and the others are left out."""
    run = execution("completed", enqueued=NOW, version=4)
    others = [execution("pending", enqueued=NOW) for _ in range(3)]
    tries = [attempt(run["id"], 2, "completed"), attempt(run["id"], 1, "retried")]
    write(module_database, executions=[run, *others], attempts=tries)
    listed = queries.list_attempts(uuid.UUID(run["id"]))
    assert [(a.attempt, a.outcome, a.worker_id) for a in listed] == [
        (1, "retried", "w1"),
        (2, "completed", "w2"),
    ]
    assert queries.list_attempts(uuid.uuid4()) == []
    asked = [uuid.uuid4() for _ in range(600)] + [uuid.UUID(r["id"]) for r in (run, *others)]
    statuses = queries.execution_statuses(asked)
    assert statuses == {
        uuid.UUID(run["id"]): ("completed", 4),
        **{uuid.UUID(r["id"]): ("pending", 1) for r in others},
    }


def test_minute_stats_count_and_rank_with_quiet_minutes(
    queries: ReadModelQueries, module_database: Database
) -> None:
    """If minutes are asked for, then each from the minute of ``since`` up to ``until``
    has its counters and percentiles, a quiet one zeros; too many are refused."""
    minute = to_ms(NOW)
    fired = [0, 0, 0, 0]
    fired[FIRED] = 3
    histograms = {
        (minute, LATENESS, bucket_of(100.0)): 8,
        (minute, LATENESS, bucket_of(1000.0)): 2,
        (minute, DURATION, bucket_of(50.0)): 1,
    }
    write(module_database, stats={minute: fired}, histograms=histograms)
    stats = queries.minute_stats(
        since=NOW + timedelta(seconds=30), until=NOW + timedelta(minutes=2)
    )
    assert [s.minute for s in stats] == [NOW, NOW + timedelta(minutes=1)]
    busy, quiet = stats
    assert (busy.fired, busy.completed) == (3, 0)
    lateness = (busy.lateness_p50_ms, busy.lateness_p95_ms, busy.lateness_p99_ms)
    assert lateness == pytest.approx((100, 1000, 1000), rel=0.02)
    assert busy.duration_p50_ms == pytest.approx(50, rel=0.02)
    assert (quiet.fired, quiet.lateness_p50_ms, quiet.duration_p99_ms) == (0, None, None)
    assert queries.minute_stats(since=NOW, until=NOW) == []
    with pytest.raises(ValueError, match="7 days"):
        queries.minute_stats(since=NOW, until=NOW + timedelta(days=8))


def test_status_counts_list_every_status(
    queries: ReadModelQueries, module_database: Database
) -> None:
    """If the counts are asked for, then every status of jobs and executions is there,
    those nothing is in at 0."""
    write(
        module_database,
        jobs=[job("a"), job("b", status="paused")],
        executions=[execution("completed", enqueued=NOW) for _ in range(2)],
    )
    counts = queries.status_counts()
    assert counts[JOB_KIND] == {**dict.fromkeys(JOB_STATUSES, 0), "active": 1, "paused": 1}
    assert counts[EXECUTION_KIND] == {
        **dict.fromkeys((s.value for s in ExecutionStatus), 0),
        "completed": 2,
    }


def folded(database: Database, *runs: Execution, jobs: Sequence[Row] = ()) -> None:
    """The runs' events folded (as the read models fold them) and written."""
    fold = Fold({row["id"]: row for row in jobs}, {})
    fold.changed_jobs.update(row["id"] for row in jobs)
    for run in runs:
        for event in run.collect_events():
            fold.execution_event(str(run.id), event)
    with database.transaction() as cursor:
        SqlReadModelTables(database).write_fold(cursor, fold)


def run_of(payload: dict[str, Any], *, job_id: uuid.UUID | None = None) -> Execution:
    spec = ExecutionSpec(
        handler="billing.charge", payload=payload, retry=RetryPolicy(max_retries=0)
    )
    return Execution.enqueue(spec=spec, ready_at=NOW, trigger=Trigger.ADHOC, job_id=job_id)


def test_a_search_finds_runs_by_input_result_error_job_name_and_id_start(
    queries: ReadModelQueries, module_database: Database
) -> None:
    """If runs are searched, then a word of a run's input, result or last error finds
    it in any case, as do a word of its job's name and the start of its id or its job's
    id; a word nobody has finds none, and the dead letters' search finds only dead
    letters."""
    nightly = job("Nightly Invoices")
    by_job = run_of({"customer": "Acme Corp"}, job_id=uuid.UUID(nightly["id"]))
    done = run_of({"customer": "Globex"})
    done.lease(worker_id="w", lease_id=(lease := uuid.uuid4()), lease_expires_at=NOW)
    done.complete(lease_id=lease, duration=timedelta(seconds=1), result={"receipt": "R-7781"})
    dead = run_of({"customer": "Initech"})
    dead.lease(worker_id="w", lease_id=(lease := uuid.uuid4()), lease_expires_at=NOW)
    dead.fail(lease_id=lease, error="Card Declined: insufficient funds", at=NOW)
    folded(module_database, by_job, done, dead, jobs=[nightly])
    assert ids(queries.list_executions(search="acme")) == [by_job.id]
    assert ids(queries.list_executions(search="r-7781")) == [done.id]
    assert ids(queries.list_executions(search="DECLINED")) == [dead.id]
    assert ids(queries.list_executions(search="invoices")) == [by_job.id]
    assert ids(queries.list_executions(search=str(dead.id)[:8])) == [dead.id]
    assert ids(queries.list_executions(search=nightly["id"][:6])) == [by_job.id]
    assert queries.list_executions(search="billing.charge").total == 3
    assert queries.list_executions(search="umbrella").total == 0
    assert ids(queries.list_executions(search="50%")) == []  # % is a character here
    assert ids(queries.list_dead_letters(search="initech")) == [dead.id]
    assert ids(queries.list_dead_letters(search="acme")) == []
