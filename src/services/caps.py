"""The caps on how many queues and named limits there may be (the settings
``max_queues`` and ``max_named_limits``): a new one past its cap is refused, naming the
cap and its setting, before anything is written.

Both count what the queue projection holds (the queues it has entries or pauses of,
the named limits in force), so two creations within its lag (about a second) may both
take the last free place: a cap bounds growth, it is not a quota to the unit.
"""

from collections.abc import Callable, Collection

import structlog

from jobledger.domain.errors import InvalidDefinitionError
from jobledger.infra.outages import OUTAGE_ERRORS
from jobledger.infra.settings import PREFIX

log = structlog.get_logger(__name__)

NO_LIMIT = 2**63  # a use case built without the settings (tests, tools) counts nothing
MAX_QUEUES_SETTING = f"{PREFIX}MAX_QUEUES"
MAX_NAMED_LIMITS_SETTING = f"{PREFIX}MAX_NAMED_LIMITS"


def check_room(
    name: str, known: Collection[str], *, most: int, what: str, field: str, setting: str
) -> None:
    """Refuse ``name`` if it is none of ``known`` and those fill the cap ``most``."""
    if name in known or len(known) < most:
        return
    raise InvalidDefinitionError(
        field,
        f"{name!r} would be a new {what}, and the {len(known)} {what}s that exist reach "
        f"the cap of {most} ({setting})",
        f"use one of the {what}s that exist, delete one, or raise {setting}",
    )


class QueueRoom:
    """The queue cap as every way in that names a queue checks it."""

    def __init__(self, known: Callable[[], Collection[str]], most: int) -> None:
        self._known = known
        self.most = most
        # Queues once seen stay (until the queue is reset): a run naming one of them
        # reads nothing.
        self._seen: frozenset[str] = frozenset()

    def check(self, queue: str, field: str = "queue") -> None:
        if queue in self._seen:
            return
        try:
            self._seen = frozenset(self._known())
        except OUTAGE_ERRORS as error:
            # The projection is out of reach (Redis down): a run still goes into the
            # log, as every run does then; a cap bounds growth, it is no reason to refuse.
            log.info("queue.cap_unchecked", queue=queue, error=type(error).__name__)
            return
        check_room(
            queue,
            self._seen,
            most=self.most,
            what="queue",
            field=field,
            setting=MAX_QUEUES_SETTING,
        )


NO_CAP = QueueRoom(frozenset, most=NO_LIMIT)
