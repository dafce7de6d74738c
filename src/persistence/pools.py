"""Connection pools that check a connection at checkout only after it idled.

psycopg_pool can run a check (an empty query) on every checkout, so that a connection
the server dropped (a restart) is replaced there instead of failing its caller. That
is a round trip per checkout, and a busy role takes a connection per save, per page
and per query. A connection that came back to the pool moments ago was working then:
it skips the check. One the server dropped within that moment fails its caller as a
restart in the middle of a transaction does, and every caller treats that as an
outage and tries again (ADR 49).
"""

import time
import weakref
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

# A connection back in the pool for less than this was working a moment ago.
FRESH_SECONDS = 1.0
_returned: "weakref.WeakKeyDictionary[psycopg.Connection[Any], float]" = weakref.WeakKeyDictionary()


def note_returned(conn: psycopg.Connection[Any]) -> None:
    """A pool's ``reset``: when the connection came back."""
    _returned[conn] = time.monotonic()


def check_if_idle(conn: psycopg.Connection[Any]) -> None:
    """A pool's ``check``: the empty query, for a connection that idled a while."""
    returned = _returned.get(conn)
    if returned is None or time.monotonic() - returned >= FRESH_SECONDS:
        ConnectionPool.check_connection(conn)


def check_only_when_idle(pool: ConnectionPool[Any]) -> None:
    """Make a pool built elsewhere (the event store's: eventsourcing builds it with a
    check on every checkout) check as this module's do. psycopg_pool takes the check
    and the reset only in its constructor, so they are replaced on the pool; a pool
    that checks nothing, or a release of psycopg_pool without them, is left as it is
    (tests/integration/test_follower_round_trips.py would then fail)."""
    if getattr(pool, "_check", None) is None or not hasattr(pool, "_reset"):
        return
    reset = pool._reset  # noqa: SLF001 (see the docstring)

    def noted(conn: psycopg.Connection[Any]) -> None:
        if reset is not None:
            reset(conn)
        note_returned(conn)

    pool._check = check_if_idle  # noqa: SLF001 (see the docstring)
    pool._reset = noted  # noqa: SLF001 (see the docstring)
