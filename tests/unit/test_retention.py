"""The retention's cut-offs, per queue and for an explicit time."""

from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from eventsourcing.persistence import StoredEvent
from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.domain.archive import ArchiveRecord, History, Retention
from jobledger.domain.errors import InvalidDefinitionError
from jobledger.infra.errors import SettingsError
from jobledger.infra.settings import load_settings
from jobledger.persistence.codec import MsgspecMapper

AT = datetime(2026, 12, 1, tzinfo=UTC)


def test_a_queue_override_sets_that_queues_cutoff() -> None:
    """If a queue has its own retention, then its cut-off follows it, the others the
    default, and the latest cut-off is the shortest retention's."""
    retention = Retention(30, {"reports": 365, "noise": 2})
    assert retention.cutoff("default", at=AT) == AT - timedelta(days=30)
    assert retention.cutoff("reports", at=AT) == AT - timedelta(days=365)
    assert retention.latest_cutoff(at=AT) == AT - timedelta(days=2)


def test_an_earlier_before_is_one_cutoff_for_every_queue() -> None:
    """If a time earlier than every queue's retention is given, then it is every
    queue's cut-off."""
    before = AT - timedelta(days=400)
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


FLOORS = {"reports": 365.0, "noise": 2.0}


@settings(max_examples=200)
@given(
    before=st.datetimes(
        min_value=datetime(1, 1, 2),  # noqa: DTZ001 (naive bounds; the values are UTC)
        max_value=datetime(9999, 12, 30),  # noqa: DTZ001 (naive bounds; the values are UTC)
        timezones=st.just(UTC),
    ),
    queue=st.sampled_from(["default", "reports", "noise"]),
)
def test_a_before_never_goes_past_the_retention(before: datetime, queue: str) -> None:
    """If ``before`` is given without a forced request, then no queue's cut-off is later
    than its retention, an earlier ``before`` is every queue's cut-off where it is
    earlier, and ``held`` says whether it asked for more than the retention lets go."""
    retention = Retention(30, FLOORS, before=before)
    floor = Retention(30, FLOORS).cutoff(queue, at=AT)
    assert retention.cutoff(queue, at=AT) == min(before, floor)
    assert retention.latest_cutoff(at=AT) <= Retention(30, FLOORS).latest_cutoff(at=AT)
    assert retention.held(at=AT) == (before > AT - timedelta(days=2))


def test_the_year_2999_is_held_to_the_retention_unless_forced() -> None:
    """If ``before`` is in the year 2999, then every queue keeps its retention; only a
    forced request (with its reason) moves the cut-off there."""
    far = datetime(2999, 1, 1, tzinfo=UTC)
    held = Retention(30, {"reports": 365}, before=far)
    assert held.cutoff("default", at=AT) == AT - timedelta(days=30)
    assert held.cutoff("reports", at=AT) == AT - timedelta(days=365)
    assert held.latest_cutoff(at=AT) == AT - timedelta(days=30)
    assert held.held(at=AT)
    forced = Retention(30, {"reports": 365}, before=far, forced_because="legal hold ended")
    assert forced.cutoff("reports", at=AT) == far == forced.latest_cutoff(at=AT)


@pytest.mark.parametrize(
    ("before", "reason", "field", "fix"),
    [
        (None, "tidy", "before", "--before TIME"),
        (AT, "", "reason", "--reason TEXT"),
        (AT, "  ", "reason", "--reason TEXT"),
        (AT, "x" * 2001, "reason", "shorten it"),
    ],
)
def test_a_forced_archive_says_up_to_when_and_why(
    before: datetime | None, reason: str, field: str, fix: str
) -> None:
    """If a forced archive gives no ``before`` or no reason, then it is refused naming
    the field and the fix."""
    with pytest.raises(InvalidDefinitionError) as refused:
        Retention(30, before=before, forced_because=reason)
    assert refused.value.field == field
    assert fix in str(refused.value.fix)


def test_a_forced_archive_records_who_and_why() -> None:
    """If an archive was forced, then its ``HistoryArchived`` carries the reason and
    says so; one recorded before these fields existed reads as not forced."""
    (archived,) = History.archived(record(forced_because="GDPR request 12")).collect_events()
    assert (archived.by, archived.reason, archived.forced) == ("admin", "GDPR request 12", True)  # type: ignore[attr-defined]
    state = msgspec.json.decode(MsgspecMapper().to_stored_event(archived).state)
    old = {k: v for k, v in state.items() if k not in {"reason", "forced"}}
    stored = StoredEvent(
        originator_id=archived.originator_id,
        originator_version=1,
        topic="jobledger:HistoryArchived",
        state=msgspec.json.encode(old),
    )
    restored = vars(MsgspecMapper().to_domain_event(stored))
    assert (restored["by"], restored["reason"], restored["forced"]) == ("admin", "", False)
