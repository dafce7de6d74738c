"""The instants jobledger takes and shows: one range, for every way a time comes in.

A job's schedule, an ad-hoc run's ``run_at``, a batch's runs, an outbox row, a
backfill's window, a CLI flag and the client's own check all refuse an instant outside
``EARLIEST`` to ``LATEST`` through ``check_instant``; the readers of the read models ask
``holds_ms`` before they turn a stored time into a datetime. Both ends keep a margin
inside what a datetime can hold, so that no conversion to a local zone (offsets up to
14 hours), no look-back and no timeout or back-off added to a time can step outside
the calendar.

This module imports only the standard library and the domain's errors, so the shared
bodies and the client may use it.
"""

from datetime import UTC, datetime, timedelta
from typing import Final

from jobledger.domain.errors import InvalidDefinitionError

EARLIEST: Final = datetime(1, 1, 2, tzinfo=UTC)
LATEST: Final = datetime(9999, 12, 1, tzinfo=UTC)
RANGE_TEXT: Final = "0001-01-02T00:00:00Z to 9999-12-01T00:00:00Z"
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND: Final = timedelta(milliseconds=1)
# The range in integer milliseconds since the Unix epoch, as the read models store times.
EARLIEST_MS: Final = (EARLIEST - _EPOCH) // _MILLISECOND
LATEST_MS: Final = (LATEST - _EPOCH) // _MILLISECOND


def check_instant(field: str, value: datetime) -> datetime:
    """``value`` in UTC; raises ``InvalidDefinitionError`` naming ``field`` if it has no
    zone or lies outside the range (``EARLIEST`` to ``LATEST``)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidDefinitionError(
            field,
            f"{value.isoformat()} has no time zone",
            "give an offset, e.g. 2026-03-08T09:00:00+01:00 or 2026-03-08T08:00:00Z",
        )
    try:
        instant = value.astimezone(UTC)
    except OverflowError:
        instant = None
    if instant is None or not EARLIEST <= instant <= LATEST:
        raise InvalidDefinitionError(
            field,
            f"{value.isoformat()} is outside the supported range {RANGE_TEXT}",
            "give a time within that range, e.g. 2026-03-08T09:00:00Z",
        )
    return instant


def holds_ms(ms: int) -> bool:
    """Whether a stored time (milliseconds since the Unix epoch) lies in the range."""
    return EARLIEST_MS <= ms <= LATEST_MS
