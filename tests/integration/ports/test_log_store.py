"""The ``LogStore`` port, on each backend: PostgreSQL's paths, SQLite's, and the
recorder's own interface (eventsourcing's in-memory recorder). Whatever path a store
takes, the ledger and its readers see the same log."""

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from eventsourcing.persistence import IntegrityError
from tests.integration.ports.backends import POSTGRES

from jobledger.adapters.store import open_ledger
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.job import Job
from jobledger.domain.schedules import CronSchedule
from jobledger.infra.settings import load_settings
from jobledger.persistence.ledger import JOB_SNAPSHOT_INTERVAL, Ledger
from jobledger.persistence.log_store import LivePage, LogRow, Window
from jobledger.projections.log.reader import part_of
from jobledger.projections.log.streams import load_many

AT = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
LEASED = "jobledger:ExecutionLeased"


@pytest.fixture(params=[POSTGRES, "sqlite", "memory"])
def ledger(request: pytest.FixtureRequest) -> Iterator[Ledger]:
    """A ledger on an empty log of each kind of store."""
    if request.param == "memory":
        opened = Ledger({"PERSISTENCE_MODULE": "eventsourcing.popo"})
    else:
        url = request.getfixturevalue(f"{request.param}_url")
        opened = open_ledger(load_settings({}, database_url=url))
    yield opened
    opened.close()


def runs(count: int, *, leased: int = 0) -> list[Execution]:
    """``count`` new runs, the first ``leased`` of them leased too."""
    spec = ExecutionSpec(handler="test.echo", payload={"n": 1})
    made = [
        Execution.enqueue(
            spec=spec, ready_at=AT, trigger=Trigger.ADHOC, trigger_key=uuid.uuid4().hex
        )
        for _ in range(count)
    ]
    for run in made[:leased]:
        run.lease(worker_id="w", lease_id=uuid.uuid4(), lease_expires_at=AT + timedelta(1))
    return made


def saved(ledger: Ledger, made: list[Execution]) -> list[Execution]:
    held = ledger.held_connection()
    try:
        ledger.save_events([e for run in made for e in run.collect_events()], held)
    finally:
        if held is not None:
            held.close()
    return made


def all_rows(ledger: Ledger, part: tuple[int, int] | None = None) -> list[LogRow]:
    page = ledger.log_store.read_rows(0, Window(1000, part=part))
    return list(page.rows)


def test_saved_events_read_back_in_order_with_rising_positions(ledger: Ledger) -> None:
    """If events are saved, then a page of the log gives them in the order saved, at
    rising positions, and a page short of its limit ends at the head."""
    made = saved(ledger, runs(3, leased=1))
    page = ledger.log_store.read_rows(0, LivePage(10))
    assert [(r[1], r[2]) for r in page.rows] == [
        (made[0].id, 1),
        (made[0].id, 2),
        (made[1].id, 1),
        (made[2].id, 1),
    ]
    positions = [r[0] for r in page.rows]
    assert positions == sorted(positions)
    assert len(set(positions)) == 4
    assert page.position == positions[-1]
    assert not page.full(10)


def test_a_topic_filter_still_moves_the_position_past_the_others(ledger: Ledger) -> None:
    """If a page asks for one topic, then it holds only that topic's events, and its
    position moves past the others up to the head."""
    saved(ledger, runs(3, leased=1))
    page = ledger.log_store.read_rows(0, LivePage(10, topics=[LEASED]))
    assert [r[3] for r in page.rows] == [LEASED]
    assert page.position == max(r[0] for r in all_rows(ledger))


def test_a_page_stops_at_its_stop_and_at_its_limit(ledger: Ledger) -> None:
    """If a page is read up to a stop, then it holds nothing past it; if it is full,
    then its position is its last row's, and the next page goes on from there."""
    saved(ledger, runs(5))
    positions = [r[0] for r in all_rows(ledger)]
    stopped = ledger.log_store.read_rows(0, Window(10, stop=positions[2]))
    assert [r[0] for r in stopped.rows] == positions[:3]
    first = ledger.log_store.read_rows(0, LivePage(2))
    assert first.full(2)
    assert first.position == positions[1]
    second = ledger.log_store.read_rows(first.position, LivePage(10))
    assert [r[0] for r in second.rows] == positions[2:]


def test_a_clash_saves_none_of_the_batch(ledger: Ledger) -> None:
    """If one event of a save takes a version already in the log, then the save raises
    IntegrityError and the log holds none of its events."""
    first = saved(ledger, runs(1))
    before = all_rows(ledger)
    again = Execution.enqueue(
        spec=first[0].spec, ready_at=AT, trigger=Trigger.ADHOC, trigger_key=first[0].trigger_key
    )
    with pytest.raises(IntegrityError):
        saved(ledger, [*runs(2), again])
    assert all_rows(ledger) == before


def test_many_streams_load_as_each_alone(ledger: Ledger) -> None:
    """If many runs are loaded together, then each is the run its own load gives, and
    an id of no run is left out."""
    made = saved(ledger, runs(4, leased=2))
    wanted = [run.id for run in made] + [uuid.uuid4()]
    loaded = load_many(ledger, Execution, wanted)
    assert set(loaded) == {run.id for run in made}
    for run in made:
        alone = ledger.get_execution(run.id)
        assert (loaded[run.id].version, loaded[run.id].status) == (alone.version, alone.status)


def test_jobs_past_a_snapshot_load_together_as_each_alone(ledger: Ledger) -> None:
    """If a job has more events than the snapshot interval, then loading jobs together
    gives each as its own load does, from its newest snapshot and the events after."""
    definition = JobDefinition(
        name="tick", spec=ExecutionSpec(handler="test.echo"), schedule=CronSchedule("* * * * *")
    )
    busy, quiet = Job.schedule(definition, at=AT, by="t"), Job.schedule(definition, at=AT, by="t")
    ledger.save(busy, quiet)
    for index in range(JOB_SNAPSHOT_INTERVAL + 3):
        if index % 2 == 0:
            busy.pause(by="t")
        else:
            busy.resume(at=AT + timedelta(seconds=index), by="t")
        ledger.save(busy)
    loaded = ledger.get_jobs([busy.id, quiet.id, uuid.uuid4()])
    assert set(loaded) == {busy.id, quiet.id}
    assert loaded[busy.id].version == busy.version == ledger.get_job(busy.id).version
    assert loaded[busy.id].paused == ledger.get_job(busy.id).paused


def test_positions_are_those_the_log_gives_or_none(ledger: Ledger) -> None:
    """If a store says where a stream's events are, then those are the positions a page
    of the log gives them; a store that cannot say says nothing."""
    made = saved(ledger, runs(2, leased=1))
    positions = ledger.log_store.positions(made[0].id)
    logged = {r[2]: r[0] for r in all_rows(ledger) if r[1] == made[0].id}
    assert positions in ({}, logged)


def test_a_share_of_the_streams_is_exactly_that_share_or_refused(ledger: Ledger) -> None:
    """If a store can read a share of the streams, then the shares' pages together hold
    every event once, each in the share of its stream; else it refuses with a
    ValueError."""
    saved(ledger, runs(12, leased=3))
    everything = all_rows(ledger)
    try:
        shares = [all_rows(ledger, part=(index, 3)) for index in range(3)]
    except ValueError:
        return
    for index, share in enumerate(shares):
        assert all(part_of(uuid.UUID(str(r[1])), 3) == index for r in share)
    assert sorted(r for share in shares for r in share) == sorted(everything)


def test_a_held_connection_saves_and_reads_until_it_is_given_back(ledger: Ledger) -> None:
    """If a store lends a connection to keep, then saves and live pages go through it,
    and after it is given back they go on without it."""
    held = ledger.held_connection()
    made = runs(2)
    ledger.save_events([e for run in made for e in run.collect_events()], held)
    page = ledger.log_store.read_rows(0, LivePage(10, held=held))
    assert [r[1] for r in page.rows] == [run.id for run in made]
    if held is not None:
        held.close()
    assert len(all_rows(ledger)) == 2
