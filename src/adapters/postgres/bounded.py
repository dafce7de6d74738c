"""PostgreSQL connections whose calls cannot hang on a frozen server (ADR 79).

A server that stops without closing its connections (SIGSTOP, a hung host whose kernel
still runs) leaves every call waiting for ever: its kernel acknowledges each packet, so
TCP keepalives and ``tcp_user_timeout`` see nothing, and a ``statement_timeout`` is
enforced by the very server that stopped. So the client bounds the wait itself. A call
still waiting after ``check_after`` seconds asks the server, on a new socket, whether it
answers at all (an SSLRequest, which the server answers before any sign-in). If it does,
the call is slow, not lost (a rebuild's COPY, a big archive), and goes on, asking again
every ``check_after`` seconds; if it does not within ``check_after`` seconds, the
connection is closed and the call fails as a lost connection does: an outage, seen
within about twice ``check_after``.
"""

import socket
import struct
import threading
import time
import weakref
from typing import Any, ClassVar

import psycopg
import psycopg_pool
from eventsourcing import postgres
from eventsourcing.utils import Environment, EnvType
from psycopg.conninfo import conninfo_to_dict

# Private, but what psycopg's own waits raise when their timeout passes.
from psycopg.errors import _WaitTimeout

# An SSLRequest (length 8, code 80877103): answered 'S' or 'N' by any PostgreSQL that
# runs, before it asks who is there.
_SSL_REQUEST = struct.pack("!II", 8, 80877103)
# A server that answered this recently is taken as alive without asking again: many
# calls waiting at once on one slow statement's locks ask once between them.
_REMEMBER_SECONDS = 0.5
# A server found silent this recently is taken as down by a caller that wants one of
# the pool's connections: it fails at once instead of after the pool's wait, each of
# eventsourcing's ten tries of a call included.
_DOWN_SECONDS = 2.0
# A connection back in its pool for less than this was working a moment ago: taken
# again, it is not checked (``check_if_idle``).
FRESH_SECONDS = 1.0
# When each pooled connection last went back.
_returned: "weakref.WeakKeyDictionary[psycopg.Connection[Any], float]" = weakref.WeakKeyDictionary()
# How long a call waits on a server found silent within that moment before asking.
_SOON = 0.1


class _Answers:
    """The last answer of each server, shared by every connection of the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, int], tuple[float, bool]] = {}

    def alive(self, host: str, port: int, timeout: float) -> bool:
        now = time.monotonic()
        with self._lock:
            seen = self._seen.get((host, port))
        if seen is not None and now - seen[0] < _REMEMBER_SECONDS:
            return seen[1]
        answered = _answers(host, port, timeout)
        with self._lock:
            self._seen[(host, port)] = (time.monotonic(), answered)
        return answered

    def silent(self, host: str, port: int) -> bool:
        """Whether the server was found not answering within the last moment."""
        with self._lock:
            seen = self._seen.get((host, port))
        return seen is not None and not seen[1] and time.monotonic() - seen[0] < _DOWN_SECONDS

    def still_silent(self, host: str, port: int, timeout: float) -> bool:
        """Whether the server, last found not answering, still does not: said from that
        finding for a moment, asked again after it. False for a server last found
        answering (or never asked): its callers go on as usual."""
        seen = self._seen.get((host, port))  # one read of a dict: no lock on this path
        if seen is None or seen[1]:
            return False
        return self.silent(host, port) or not self.alive(host, port, timeout)


def _answers(host: str, port: int, timeout: float) -> bool:
    """Whether the server at ``host`` (a name, an address or a socket folder) answers
    an SSLRequest within ``timeout`` seconds."""
    try:
        if host.startswith("/"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(f"{host}/.s.PGSQL.{port}")
        else:
            sock = socket.create_connection((host, port), timeout)
        with sock:
            sock.sendall(_SSL_REQUEST)
            return sock.recv(1) in {b"S", b"N"}
    except OSError:
        return False


_ANSWERS = _Answers()


class BoundedConnection(psycopg.Connection[Any]):
    """A connection whose calls fail within about ``2 * check_after`` seconds once its
    server no longer answers; see the module docstring. A pool sets ``check_after``
    through a subclass (``bounded_connection``)."""

    check_after: ClassVar[float] = 1.0

    def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:  # noqa: ANN401 (psycopg's generator and its result)
        if timeout is not None:  # psycopg's own bounded waits (a cancel) stay as they are
            return super().wait(gen, interval, timeout)
        host, port = self.info.host, self.info.port
        # A server found silent a moment ago is asked again sooner: the pool's check of
        # each idle connection would otherwise cost a whole period apiece.
        period = _SOON if _ANSWERS.silent(host, port) else self.check_after
        while True:
            try:
                return super().wait(gen, interval, period)
            except _WaitTimeout:
                # The server decides whether there is anything to wait for; if so, the
                # generator is resumed, as psycopg itself goes on after an interrupted wait.
                period = self.check_after
                if not _ANSWERS.alive(host, port, self.check_after):
                    self.pgconn.finish()
                    raise psycopg.OperationalError(
                        f"PostgreSQL at {host}:{port} stopped answering:"
                        f" no reply within {self.check_after:g} s, and no answer to a new"
                        " connection either"
                    ) from None


def bounded_connection(check_after: float) -> type[BoundedConnection]:
    """A ``BoundedConnection`` class that checks its server after ``check_after`` s."""
    return type("BoundedConnection", (BoundedConnection,), {"check_after": check_after})


def connect_timeout(check_after: float) -> int:
    """libpq's ``connect_timeout`` for that bound: whole seconds, and libpq waits at
    least 2 whatever it is told."""
    return max(2, round(check_after * 2))


def refuse_if_silent(pool: psycopg_pool.ConnectionPool[Any]) -> None:
    """Raise ``PoolTimeout`` for a caller asking ``pool`` for a connection while its
    server is known to be silent (a ``BoundedConnection`` found it so, and it has not
    answered since): at once, not after the pool's wait, which a frozen server would
    use in full, once for each of eventsourcing's ten tries of a call."""
    server: tuple[str, int] | None = getattr(pool, "_jobledger_server", None)
    if server is None:  # read once: a pool's calls are the hot paths
        conninfo = pool.conninfo() if callable(pool.conninfo) else pool.conninfo
        server = _server_of(conninfo, pool.kwargs)
        pool._jobledger_server = server  # type: ignore[attr-defined]  # noqa: SLF001 (the pool's own note)
    host, port = server
    check_after = getattr(pool.connection_class, "check_after", BoundedConnection.check_after)
    if _ANSWERS.still_silent(host, port, check_after):
        raise psycopg_pool.PoolTimeout(
            f"PostgreSQL at {host}:{port} does not answer; not waiting for a connection"
        )


def _server_of(conninfo: str, kwargs: object) -> tuple[str, int]:
    """The host and port a pool connects to, as ``ConnectionInfo`` names them."""
    params = conninfo_to_dict(conninfo, **(kwargs if isinstance(kwargs, dict) else {}))
    host = str(params.get("host") or "/var/run/postgresql").split(",")[0]
    port = str(params.get("port") or "5432").split(",")[0]
    return host, int(port)


def check_if_idle(conn: psycopg.Connection[Any]) -> None:
    """A pool's check at checkout: one empty query for a connection that has been idle
    a while, so one the server dropped (a restart) is replaced there instead of failing
    its caller. A connection used a moment ago skips it: a follower takes one per
    transaction, several a page, an API process one a request, and the check is a round
    trip each time. A server that went away within that moment fails the caller as a
    restart in the middle of a transaction does, and the caller retries."""
    returned = _returned.get(conn)
    if returned is None or time.monotonic() - returned >= FRESH_SECONDS:
        psycopg_pool.ConnectionPool.check_connection(conn)


class _NotesReturns(psycopg_pool.ConnectionPool[Any]):
    """A pool whose callers hear at once that its server is silent (``refuse_if_silent``)
    and that notes when each connection came back, for ``check_if_idle``: here, not in
    the pool's ``reset``, which would hand every return to a pool thread."""

    def getconn(self, timeout: float | None = None) -> Any:  # noqa: ANN401 (the pool's connection class)
        refuse_if_silent(self)
        return super().getconn(timeout)

    def putconn(self, conn: Any) -> None:  # noqa: ANN401 (the pool's connection class)
        _returned[conn] = time.monotonic()
        super().putconn(conn)


class BoundedPool(_NotesReturns):
    """A pool of ``BoundedConnection`` s (give ``connection_class``); see ``_NotesReturns``."""


class _BoundedEventStorePool(_NotesReturns, postgres.ConnectionPool[Any]):
    """eventsourcing's pool; see ``_NotesReturns``."""


class BoundedPostgresFactory(postgres.PostgresFactory):
    """eventsourcing's PostgreSQL infrastructure, whose pool makes ``BoundedConnection``
    s that check their server after ``POSTGRES_CHECK_AFTER`` seconds, and connect with
    a timeout to match. eventsourcing takes neither a connection class nor a connect
    timeout; its pool is made here, before anything opens it, so every connection of it
    is made this way (``PERSISTENCE_MODULE`` names this class)."""

    POSTGRES_CHECK_AFTER = "POSTGRES_CHECK_AFTER"

    def __init__(self, env: Environment | EnvType | None) -> None:
        super().__init__(env)
        check_after = float(self.env.get(self.POSTGRES_CHECK_AFTER) or 1.0)
        pool = self.datastore.pool
        pool.connection_class = bounded_connection(check_after)
        if isinstance(pool.kwargs, dict):  # how eventsourcing gives its keywords
            pool.kwargs["connect_timeout"] = connect_timeout(check_after)
        # The same pool, with ``getconn`` and ``putconn`` of its own (the datastore
        # makes it itself), and the check of an idle connection only, in place of
        # the check at every checkout that ``POSTGRES_PRE_PING`` asked for.
        pool.__class__ = _BoundedEventStorePool
        pool._check = check_if_idle  # noqa: SLF001 (the pool keeps its check here)
