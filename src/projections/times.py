"""Times as the projections store them: integer milliseconds in SQL tables, and the
queue's scores (integer milliseconds since the Unix epoch: a time that makes an entry
due is rounded up, ``now`` is rounded down, so an entry is never leased or expired
before its time, only up to a millisecond late). Both queue backends use these, so
they order and time entries identically."""

from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def to_ms(moment: datetime) -> int:
    """A time as a table stores it."""
    return round(moment.timestamp() * 1000)


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _micros(at: datetime) -> int:
    if at.utcoffset() is None:
        raise ValueError(f"queue times must be zone-aware, got {at!r}")
    return (at - _EPOCH) // _MICROSECOND


def due_score(at: datetime) -> int:
    """The score of a time that makes an entry due: rounded up to the millisecond."""
    return -(-_micros(at) // 1000)


def now_score(now: datetime) -> int:
    """The score of the current time: rounded down to the millisecond."""
    return _micros(now) // 1000


def encode_time(at: datetime) -> str:
    """An exact time as stored in the ``state`` hash (microseconds)."""
    return str(_micros(at))


def decode_time(text: str) -> datetime:
    return _EPOCH + int(text) * _MICROSECOND
