"""Queue bodies: each queue's depths and pause, and what pause, resume and drain take
and answer."""

from datetime import datetime
from uuid import UUID

import msgspec

from jobledger.schemas.fields import Strict, Text


class QueueOut(msgspec.Struct, kw_only=True):
    """A queue: its entries by state, whether an operator paused it (who, since when,
    why) and how many live workers serve it (with none, since when). A paused queue
    leases nothing; its running work finishes; a queue no worker serves waits."""

    name: str
    ready: int
    delayed: int
    leased: int
    dead: int
    paused: bool
    paused_by: str | None = None
    paused_since: datetime | None = None
    pause_reason: str | None = None
    # Live workers that lease from the queue; with none, the time one last did (None:
    # no worker served it as far as the workers' reports go back).
    workers: int = 0
    unserved_since: datetime | None = None


class QueueList(msgspec.Struct):
    queues: list[QueueOut]
    # The cursor of the page after this one (None: the last page).
    next_cursor: str | None = None


class PauseIn(Strict):
    """Why the queue is paused (required: it is recorded and shown)."""

    reason: Text


class DrainIn(Strict):
    """Why the queue's pending runs are cancelled; ``dry_run`` only lists them."""

    reason: Text
    dry_run: bool = False


class QueueStateOut(msgspec.Struct, kw_only=True):
    """The queue after a pause or resume; ``changed`` is False when it already was."""

    name: str
    paused: bool
    changed: bool


class DrainReport(msgspec.Struct, kw_only=True):
    """The runs a drain cancelled (or, in a dry run, would cancel), by id."""

    queue: str
    dry_run: bool
    cancelled: list[UUID]
