"""The eventsourcing Application over the log: save, load and read back the aggregates.

Jobs, executions, workflows, queues and the dependency graph share one application (one events
table, one notification log) so that a fire saves ``JobFired`` and
``ExecutionEnqueued`` atomically, and every projection follows a single ordered log.
The commands that change them are use cases (``jobledger.services``); this class only
persists and loads.
"""

import contextlib
import typing
from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import datetime
from itertools import groupby
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application, ProcessingEvent
from eventsourcing.domain import Aggregate, DomainEventProtocol, MutableOrImmutableAggregate
from eventsourcing.persistence import (
    IntegrityError,
    Mapper,
    MapperDeserialisationError,
    StoredEvent,
)
from eventsourcing.utils import Environment, TopicError

from jobledger.domain.archive import History
from jobledger.domain.definitions import DEFAULT_LIMITS, Limits
from jobledger.domain.dependencies import GRAPH_ID, DependencyGraph
from jobledger.domain.errors import ConflictError, NotFoundError, UndecodableEventError
from jobledger.domain.execution import Execution
from jobledger.domain.job import Job
from jobledger.domain.limits import Limit
from jobledger.domain.notifications import RULES_ID, NotificationRules
from jobledger.domain.queue import Queue, queue_id
from jobledger.domain.unique import UniqueKey, unique_key_id
from jobledger.domain.workflow import Workflow
from jobledger.persistence.codec import MsgspecMapper
from jobledger.persistence.log_store import (
    Held,
    LogStore,
    LogStoreFactory,
    RecorderLogStore,
    StreamRow,
)
from jobledger.persistence.undecodable import UndecodableEvent, decode_or_placeholder, error_text

A = TypeVar("A", bound=Aggregate)


# A job gains an event per fire, without end: a snapshot every this many events keeps
# the replay of a cold load short however long the job has run (ADR 17).
JOB_SNAPSHOT_INTERVAL = 200


class Ledger(Application[UUID]):
    """The job ledger. Persistence comes from the env the composition root passes in."""

    name = "jobledger"
    snapshotting_intervals: typing.ClassVar[dict[type[MutableOrImmutableAggregate[Any]], int]] = {
        Job: JOB_SNAPSHOT_INTERVAL
    }

    def __init__(
        self,
        env: Mapping[str, str],
        limits: Limits = DEFAULT_LIMITS,
        log_store: LogStoreFactory = RecorderLogStore,
    ) -> None:
        self.limits = limits
        super().__init__(env)
        snapshots = None if self.snapshots is None else self.snapshots.recorder
        # The backend's own paths, which the composition root names (ADR 87).
        self.log_store: LogStore = log_store(self.recorder, snapshots)

    def construct_env(self, name: str, env: Mapping[str, str] | None = None) -> Environment:
        # Only the settings decide: never fall back to os.environ like the base class.
        return Environment(name, {"IS_SNAPSHOTTING_ENABLED": "y", **(env or {})})

    def construct_mapper(self) -> Mapper[UUID]:
        return MsgspecMapper(compressor=self.factory.compressor(), cipher=self.factory.cipher())

    # ---- saving ---------------------------------------------------------------------

    def save_all(self, *aggregates: Aggregate) -> None:
        """Save atomically; a version clash becomes a ConflictError."""
        try:
            self.save(*aggregates)
        except IntegrityError as error:
            ids = ", ".join(str(a.id) for a in aggregates)
            raise ConflictError(f"a concurrent change was saved first for {ids}") from error

    def append(self, events: Sequence[DomainEventProtocol[UUID]]) -> None:
        """``save_events``, with a version clash as a ConflictError (like ``save_all``)."""
        try:
            self.save_events(events)
        except IntegrityError as error:
            raise ConflictError("a concurrent change was saved first") from error

    def save_events(
        self, events: Sequence[DomainEventProtocol[UUID]], held: Held | None = None
    ) -> None:
        """Record ``events`` (already collected from their aggregates) in one transaction.

        ``save`` asks a runtime-checkable Protocol about every object it is given, which
        costs more than encoding the event; the group-commit writer hands over plain
        events by the hundred, so it comes here, with the connection it holds
        (``held_connection``), and the store saves them its fastest way. Raises the
        store's IntegrityError on a version clash, like ``save``.
        """
        if events and self.log_store.appends:
            mapper = self.mapper
            store = (
                mapper.to_stored_row
                if isinstance(mapper, MsgspecMapper)
                else mapper.to_stored_event
            )
            self.log_store.append([store(e) for e in events], held)
            return
        processing_event: ProcessingEvent[UUID] = ProcessingEvent()
        processing_event.events.extend(events)
        self._notify(self._record(processing_event))

    def held_connection(self) -> Held | None:
        """A connection for one thread's saves (``save_events``) and reads to keep,
        where the store has a pool; None elsewhere (SQLite's recorder has one
        connection anyway)."""
        return self.log_store.hold()

    def snapshot_due(self, events: Sequence[DomainEventProtocol[UUID]]) -> int:
        """Snapshot each job whose saved ``events`` reached a multiple of the interval
        (``save`` does this by itself; ``save_events`` callers call this after it).
        Returns how many were taken."""
        interval = self.snapshotting_intervals[Job]
        due = [
            e for e in events if isinstance(e, Job.Event) and e.originator_version % interval == 0
        ]
        for domain_event in due:
            self.take_snapshot(domain_event.originator_id, version=domain_event.originator_version)
        return len(due)

    # ---- loading --------------------------------------------------------------------

    def get_job(self, job_id: UUID, *, version: int | None = None) -> Job:
        return self._get(Job, job_id, version)

    def get_jobs(self, job_ids: Collection[UUID]) -> dict[UUID, Job]:
        """The current state of each of ``job_ids`` that names a job, loaded together:
        on PostgreSQL one round trip for all of them instead of two per job. An id of no
        job is left out; a job whose history no longer decodes raises as ``get_job``."""
        rows = self.log_store.newest_and_after([*job_ids])
        if rows is None:
            return self._get_each(job_ids)
        jobs: dict[UUID, Job] = {}
        for job_id, stream in groupby(rows, key=_originator):
            job = self._folded(job_id, list(stream))
            if job is not None:
                jobs[job_id] = job
        return jobs

    def _folded(self, job_id: UUID, stream: Sequence[StreamRow]) -> Job | None:
        """The job from its newest snapshot (if any) and the events after it."""
        aggregate: Any = None
        try:
            for originator_id, version, topic, state in stream:
                stored = StoredEvent(
                    originator_id=originator_id,
                    originator_version=version,
                    topic=topic,
                    state=state,
                )
                domain_event: Any = self.mapper.to_domain_event(stored)
                aggregate = domain_event.mutate(aggregate)
        except (MapperDeserialisationError, TopicError):
            return self.get_job(job_id)  # which names the event that stopped the fold
        return aggregate if isinstance(aggregate, Job) else None

    def _get_each(self, job_ids: Collection[UUID]) -> dict[UUID, Job]:
        jobs: dict[UUID, Job] = {}
        for job_id in job_ids:
            with contextlib.suppress(NotFoundError):
                jobs[job_id] = self.get_job(job_id)
        return jobs

    def get_execution(self, execution_id: UUID) -> Execution:
        return self._get(Execution, execution_id, None)

    def get_unique_key(self, key: str) -> UniqueKey:
        return self._get(UniqueKey, unique_key_id(key), None)

    def get_workflow(self, workflow_id: UUID) -> Workflow:
        return self._get(Workflow, workflow_id, None)

    def get_history(self, history_id: UUID) -> History:
        return self._get(History, history_id, None)

    def queue(self, name: str) -> Queue | None:
        """The queue named ``name``; None if nobody has steered it yet."""
        try:
            return self._get(Queue, queue_id(name), None)
        except NotFoundError:
            return None

    def limit(self, limit_id: UUID) -> Limit | None:
        """The named limit with ``limit_id``; None if it was never defined."""
        try:
            return self._get(Limit, limit_id, None)
        except NotFoundError:
            return None

    def notification_rules(self) -> NotificationRules | None:
        """Every notification rule; None before the first was made."""
        try:
            return self._get(NotificationRules, RULES_ID, None)
        except NotFoundError:
            return None

    def dependency_graph(self) -> DependencyGraph | None:
        """Every job's upstreams; None before the first dependency was saved."""
        try:
            return self._get(DependencyGraph, GRAPH_ID, None)
        except NotFoundError:
            return None

    def version(self, aggregate_id: UUID) -> int | None:
        """The version of the stream's latest event in the log; None if it has none."""
        newest = self.recorder.select_events(aggregate_id, desc=True, limit=1)
        return newest[0].originator_version if newest else None

    def job_as_of(self, job_id: UUID, at: datetime) -> Job:
        """The job as it was at ``at`` (the last event recorded at or before it).

        Found by bisecting the versions on their events' times (a job's events are
        recorded in time order), so a job with a long history costs a few reads of one
        event each, then a load from its nearest snapshot."""
        newest = self.version(job_id)
        if newest is None or self._recorded_at(job_id, 1) > at:
            raise NotFoundError(f"job {job_id} did not exist at {at.isoformat()}")
        low, high = 1, newest
        while low < high:
            middle = (low + high + 1) // 2
            if self._recorded_at(job_id, middle) <= at:
                low = middle
            else:
                high = middle - 1
        return self.get_job(job_id, version=low)

    def _recorded_at(self, aggregate_id: UUID, version: int) -> datetime:
        (stored,) = self.recorder.select_events(aggregate_id, gt=version - 1, lte=version)
        domain_event = decode_or_placeholder(self.mapper, stored)
        if isinstance(domain_event, UndecodableEvent):
            raise self._located(domain_event)
        return typing.cast("Aggregate.Event", domain_event).timestamp

    def history(self, aggregate_id: UUID) -> Iterator[Any]:
        """Every event of the aggregate, oldest first; one that no longer decodes comes
        as an ``UndecodableEvent`` in its place, so a history can always be shown."""
        for stored in self.recorder.select_events(aggregate_id):
            yield decode_or_placeholder(self.mapper, stored)

    def history_of(self, kind: type[Aggregate], aggregate_id: UUID) -> list[Any]:
        """``history`` of a ``kind`` (a NotFoundError for an id that is none), without
        rebuilding it: a stream with an undecodable event still has a history."""
        events = list(self.history(aggregate_id))
        known = [e for e in events if not isinstance(e, UndecodableEvent)]
        if not events or (known and not isinstance(known[0], kind.Event)):
            raise NotFoundError(f"no {kind.__name__.lower()} with id {aggregate_id}")
        return events

    def _get(self, kind: type[A], aggregate_id: UUID, version: int | None) -> A:
        try:
            aggregate: Aggregate = self.repository.get(aggregate_id, version=version)
        except AggregateNotFoundError:
            raise NotFoundError(f"no {kind.__name__.lower()} with id {aggregate_id}") from None
        except (MapperDeserialisationError, TopicError) as error:
            raise self._first_undecodable(aggregate_id, error) from None
        if not isinstance(aggregate, kind):
            raise NotFoundError(f"{aggregate_id} is not a {kind.__name__.lower()}")
        return aggregate

    def _first_undecodable(self, aggregate_id: UUID, error: Exception) -> UndecodableEventError:
        """The error naming the event that stopped a rebuild (a snapshot, if no event)."""
        for domain_event in self.history(aggregate_id):
            if isinstance(domain_event, UndecodableEvent):
                return self._located(domain_event)
        return UndecodableEventError(aggregate_id, 0, "snapshot", error_text(error), None)

    def _located(self, placeholder: UndecodableEvent) -> UndecodableEventError:
        """The error for ``placeholder``, naming its log position (an operator looks it
        up in the quarantine list by that)."""
        positions = self.positions(placeholder.originator_id)
        return UndecodableEventError(
            placeholder.originator_id,
            placeholder.originator_version,
            placeholder.topic,
            placeholder.error,
            positions.get(placeholder.originator_version),
        )

    def positions(self, aggregate_id: UUID) -> dict[int, int]:
        """The log position of each event of one stream, by version."""
        return self.log_store.positions(aggregate_id)

    def describe(self) -> dict[str, Any]:
        return {
            "application": self.name,
            "persistence": self.env.get("PERSISTENCE_MODULE", ""),
            "max_notification_id": self.recorder.max_notification_id() or 0,
        }


def _originator(row: StreamRow) -> UUID:
    return row[0]
