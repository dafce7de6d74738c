"""The retention's cut-offs, per queue and for an explicit time."""

from datetime import UTC, datetime, timedelta

import pytest

from jobledger.domain.archive import ArchiveRecord, History, Retention
from jobledger.domain.errors import InvalidDefinitionError
from jobledger.runtime.errors import SettingsError
from jobledger.runtime.settings import load_settings

AT = datetime(2026, 12, 1, tzinfo=UTC)


def test_a_queue_override_sets_that_queues_cutoff() -> None:
    """If a queue has its own retention, then its cut-off follows it, the others the
    default, and the latest cut-off is the shortest retention's."""
    retention = Retention(30, {"reports": 365, "noise": 2})
    assert retention.cutoff("default", at=AT) == AT - timedelta(days=30)
    assert retention.cutoff("reports", at=AT) == AT - timedelta(days=365)
    assert retention.latest_cutoff(at=AT) == AT - timedelta(days=2)


def test_before_is_one_cutoff_for_every_queue() -> None:
    """If a time is given, then it is every queue's cut-off."""
    before = AT - timedelta(hours=1)
    retention = Retention(30, {"reports": 365}, before=before)
    assert retention.cutoff("reports", at=AT) == before == retention.latest_cutoff(at=AT)


def test_retention_settings_are_read_and_checked() -> None:
    """If per-queue retentions are given as queue=days, then they are read; anything
    else is refused in one line naming the variable and the fix."""
    settings = load_settings({"JOBLEDGER_RETENTION_QUEUES": "reports=365, noise=0.5"})
    assert settings.queue_retention_days == {"reports": 365, "noise": 0.5}
    for bad in ("reports", "reports=x", "=3", "noise=0", "a=99999"):
        with pytest.raises(SettingsError, match=r"^JOBLEDGER_RETENTION_QUEUES: .* use e\.g\."):
            load_settings({"JOBLEDGER_RETENTION_QUEUES": bad})
    with pytest.raises(SettingsError, match=r"^JOBLEDGER_RETENTION_DAYS: use"):
        load_settings({"JOBLEDGER_RETENTION_DAYS": "0"})


def record(**changes: object) -> ArchiveRecord:
    fields: dict[str, object] = {
        "name": "history-1",
        "location": "/archives",
        "positions": (1, 9),
        "counts": (2, 6),
        "cutoff": AT,
        "sums": ("a" * 64, "b" * 64),
        "by": "admin",
    }
    return ArchiveRecord(**(fields | changes))  # type: ignore[arg-type]


def test_history_archived_records_a_checked_archive() -> None:
    """If an archive is recorded, then its event carries the range, counts and sums,
    under an id derived from its name; a record that is no archive is refused."""
    (archived,) = History.archived(record()).collect_events()
    assert type(archived).__qualname__ == "History.Archived"
    assert (archived.first_position, archived.last_position, archived.events) == (1, 9, 6)  # type: ignore[attr-defined]
    assert History.archived(record()).id == archived.originator_id
    for bad in ({"positions": (0, 3)}, {"positions": (5, 4)}, {"counts": (3, 2)}):
        with pytest.raises(InvalidDefinitionError):
            History.archived(record(**bad))
    with pytest.raises(InvalidDefinitionError, match="sha256"):
        History.archived(record(sums=("A" * 64, "b" * 64)))
