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
from typing import Any, ClassVar

import psycopg

# Private, but what psycopg's own waits raise when their timeout passes.
from psycopg.errors import _WaitTimeout

# An SSLRequest (length 8, code 80877103): answered 'S' or 'N' by any PostgreSQL that
# runs, before it asks who is there.
_SSL_REQUEST = struct.pack("!II", 8, 80877103)
# A server that answered this recently is taken as alive without asking again: many
# calls waiting at once on one slow statement's locks ask once between them.
_REMEMBER_SECONDS = 0.5


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
        while True:
            try:
                return super().wait(gen, interval, self.check_after)
            except _WaitTimeout:
                # Resuming the generator is how psycopg itself goes on after an
                # interrupted wait; the server decides whether there is anything to wait for.
                if not _ANSWERS.alive(self.info.host, self.info.port, self.check_after):
                    self.pgconn.finish()
                    raise psycopg.OperationalError(
                        f"PostgreSQL at {self.info.host}:{self.info.port} stopped answering:"
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
