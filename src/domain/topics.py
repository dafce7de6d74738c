"""The stored topics of an aggregate's events, read off its event classes, so a list of
topics (what a follower reads) can never miss an event type that is added later."""

from eventsourcing.domain import Aggregate
from eventsourcing.utils import get_topic


def event_topics(aggregate: type[Aggregate], *, followed_only: bool = True) -> tuple[str, ...]:
    """The topics of the events ``aggregate`` records, sorted: those of its nested event
    classes, but its ``Event`` base and the ``Created`` placeholder eventsourcing wants
    and that is never recorded (both aggregates begin with an event of their own).
    ``followed_only``: without the events no projection reads (``FOLLOWED = False``, a
    run's log lines), which followers leave out of their reads."""
    return tuple(
        sorted(
            get_topic(cls)
            for cls in vars(aggregate).values()
            if isinstance(cls, type)
            and issubclass(cls, Aggregate.Event)
            and cls not in {aggregate.Created, aggregate.Event}
            and (getattr(cls, "FOLLOWED", True) or not followed_only)
        )
    )
