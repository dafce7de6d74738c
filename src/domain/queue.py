"""The Queue aggregate: a named queue as something an operator steers.

A queue exists in the log from the first time someone steers it (pause, resume or
drain); before that it is only a name that executions carry. Its id is derived from
the name, so every process finds the same stream without a lookup.

Pausing a paused queue and resuming a running one are no-ops, as for jobs: an
operator who repeats a pause (two tabs, a retried request) gets the state asked for,
and the log records only changes. Every event names its queue, so a follower that
starts in the middle of the log needs no other event to place it.
"""

import uuid
from datetime import datetime

from eventsourcing.domain import Aggregate, event

from jobledger.domain.definitions import check_queue_name
from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.json_values import check_actor, check_reason

# Namespace for queue ids, derived from the queue's name.
QUEUE_NAMESPACE = uuid.UUID("b6a1f1d2-4c7e-4a5b-9f3e-2d8c6e0a7b19")


def check_reason_given(reason: str, action: str) -> None:
    """A paused or drained queue stops work others rely on: the log says why."""
    if not reason.strip():
        raise InvalidDefinitionError(
            "reason", "is empty", f"say why you {action} the queue (it is recorded)"
        )


def queue_id(name: str) -> uuid.UUID:
    """The id of the queue named ``name`` (checked: a name no job could use is refused)."""
    check_queue_name(name)
    return uuid.uuid5(QUEUE_NAMESPACE, name)


class Queue(Aggregate):
    """A queue's operator state: paused or running, and its drains."""

    TOPIC = "jobledger:Queue"

    class Created(Aggregate.Created):
        # Never emitted (queues begin with Registered); eventsourcing wants every event
        # class of an aggregate with a stable topic to have one.
        TOPIC = "jobledger:QueueCreated"

    class Registered(Aggregate.Created):
        """The queue was first steered; recorded in the same save as that command."""

        TOPIC = "jobledger:QueueRegistered"
        queue: str

    class Paused(Aggregate.Event):
        TOPIC = "jobledger:QueuePaused"
        queue: str
        by: str
        reason: str
        at: datetime  # when the operator paused it (the caller's clock, as for jobs)
        via: str | None = None  # how ``by`` came; None before it existed

    class Resumed(Aggregate.Event):
        TOPIC = "jobledger:QueueResumed"
        queue: str
        by: str
        at: datetime
        via: str | None = None

    class Drained(Aggregate.Event):
        """Its pending runs were cancelled (each by an ``ExecutionCancelled`` of its own,
        in the same save); ``cancelled`` lists them."""

        TOPIC = "jobledger:QueueDrained"
        queue: str
        by: str
        reason: str
        cancelled: tuple[uuid.UUID, ...]
        via: str | None = None

    @event(Registered)
    def __init__(self, *, queue: str) -> None:
        self.name = queue
        self.paused = False
        self.paused_by: str | None = None
        self.pause_reason: str | None = None
        self.paused_since: datetime | None = None

    @classmethod
    def register(cls, name: str) -> "Queue":
        return cls._create(cls.Registered, id=queue_id(name), queue=name)

    # ---- commands -------------------------------------------------------------------

    def pause(self, *, by: str, reason: str, at: datetime, via: str | None = None) -> bool:
        """Stop leasing from the queue; running work finishes. False (and nothing
        recorded) if it is already paused."""
        check_reason(by, reason)
        check_reason_given(reason, "pause")  # refused whatever the state, as a drain's
        if self.paused:
            return False
        self._paused(queue=self.name, by=by, reason=reason, at=at, via=via)
        return True

    def resume(self, *, by: str, at: datetime, via: str | None = None) -> bool:
        """Lease from the queue again. False (and nothing recorded) if it runs."""
        check_actor(by)
        if not self.paused:
            return False
        self._resumed(queue=self.name, by=by, at=at, via=via)
        return True

    def drain(
        self,
        *,
        by: str,
        reason: str,
        cancelled: tuple[uuid.UUID, ...],
        via: str | None = None,
    ) -> None:
        """Record that the runs ``cancelled`` were cancelled as a drain of the queue."""
        check_reason(by, reason)
        check_reason_given(reason, "drain")
        self._drained(queue=self.name, by=by, reason=reason, cancelled=cancelled, via=via)

    # ---- events ---------------------------------------------------------------------

    @event(Paused)
    def _paused(
        self, *, queue: str, by: str, reason: str, at: datetime, via: str | None = None
    ) -> None:
        del queue, via
        self.paused = True
        self.paused_by = by
        self.pause_reason = reason
        self.paused_since = at

    @event(Resumed)
    def _resumed(self, *, queue: str, by: str, at: datetime, via: str | None = None) -> None:
        del queue, by, at, via
        self.paused = False
        self.paused_by = self.pause_reason = None
        self.paused_since = None

    @event(Drained)
    def _drained(
        self,
        *,
        queue: str,
        by: str,
        reason: str,
        cancelled: tuple[uuid.UUID, ...],
        via: str | None = None,
    ) -> None:
        del queue, by, reason, cancelled, via
