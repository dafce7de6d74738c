"""One listening connection per process, for every channel its followers follow, on a
real PostgreSQL: each notification wakes only its channel's followers, a lost
connection comes back for all of them, and the last one stopped closes it."""

import time

import psycopg
from tests.integration.conftest import Harness

from jobledger.adapters.postgres.listener import PostgresChannels
from jobledger.projections.log.reader import Wakeup


def _listening(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query LIKE 'LISTEN %%' AND pid <> pg_backend_pid()"
        ).fetchone()
    return int(row[0]) if row else 0


def _notify(url: str, channel: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("NOTIFY {}").format(psycopg.sql.Identifier(channel)))


def test_two_channels_share_one_connection_and_wake_only_their_own(postgres_url: str) -> None:
    """If two followers listen on two channels, then one connection listens for both, a
    notification on one wakes only its follower, a terminated connection is replaced
    (waking both, since what was missed meanwhile must be read), and stopping both
    closes it."""
    channels = PostgresChannels(postgres_url)
    log_wakeup, outbox_wakeup = Wakeup(), Wakeup()
    log = channels.listen("jobledger_events", [log_wakeup])
    outbox = channels.listen("jobledger_outbox", [outbox_wakeup])
    log.start()
    outbox.start()
    try:
        assert log.listening.is_set()
        assert outbox.listening.is_set()
        Harness.wait_for(lambda: _listening(postgres_url) == 1, timeout=10)
        log_wakeup.take()
        outbox_wakeup.take()
        _notify(postgres_url, "jobledger_outbox")
        Harness.wait_for(outbox_wakeup.take, timeout=10)
        time.sleep(0.2)
        assert not log_wakeup.take()
        first = log.backend_pid
        assert first is not None
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (first,))
        Harness.wait_for(lambda: log.connections >= 2 and log.backend_pid != first, timeout=10)
        assert log_wakeup.take()  # woken as it connected again: a page reads what was missed
        assert outbox_wakeup.take()
        assert not log.wait(0)  # still running
    finally:
        log.stop()
        assert _listening(postgres_url) == 1  # the outbox's follower still listens
        outbox.stop()
    assert outbox.wait(5)
    Harness.wait_for(lambda: _listening(postgres_url) == 0, timeout=10)
