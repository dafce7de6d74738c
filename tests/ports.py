"""Loopback ports for the servers the tests start, from outside the ephemeral range.

A port the kernel picks for ``bind(0)`` comes from the ephemeral range, which every
outgoing connection draws from as well: between the pick and the server's own bind, one
of the many connections the roles open to PostgreSQL and Redis can take it (the server
then fails with ``Address already in use``). These come from below that range instead,
a block of their own for each xdist worker, and none twice in one process.
"""

import itertools
import os
import re
import socket
from pathlib import Path

_BLOCK = 1_500  # ports per xdist worker
# Below the Redis Cluster nodes' ports and their buses (tests/redis_cluster.py).
_LOWEST, _HIGHEST = 5_000, 15_000


def _ceiling() -> int:
    """The first ephemeral port (Linux says where; 32768 elsewhere)."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        return int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _worker() -> int:
    found = re.fullmatch(r"gw(\d+)", os.environ.get("PYTEST_XDIST_WORKER", ""))
    return int(found[1]) if found else 0


def _candidates() -> "itertools.cycle[int]":
    blocks = max(1, (min(_HIGHEST, _ceiling()) - _LOWEST) // _BLOCK)
    start = _LOWEST + (_worker() % blocks) * _BLOCK
    return itertools.cycle(range(start, start + _BLOCK))


_NEXT = _candidates()


def free_port() -> int:
    """A loopback port nothing listens on now, not handed out before in this process
    (until the worker's block wraps around)."""
    for _ in range(_BLOCK):
        port = next(_NEXT)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    msg = f"no free loopback port in this worker's block of {_BLOCK}"
    raise RuntimeError(msg)
