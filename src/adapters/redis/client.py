"""The Redis client every Redis user here takes: one server, or a Redis Cluster.

A URL names a cluster by its scheme (ADR 41): ``redis+cluster://host:port`` (or
``rediss+cluster://`` for TLS) names any one node of it, from which redis-py's
cluster client learns the others; ``redis://`` and ``rediss://`` name one server.
"""

from importlib import resources
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import hiredis
import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.connection import PythonRespSerializer
from redis.retry import Retry

from jobledger.infra.settings import CLUSTER_SCHEMES

RedisClient = redis.Redis | RedisCluster


def connect(url: str, **options: Any) -> RedisClient:  # noqa: ANN401 (redis-py's options)
    """A client for ``url``; ``options`` go to redis-py (the URL's own query wins)."""
    parts = urlsplit(url)
    scheme = CLUSTER_SCHEMES.get(parts.scheme)
    if scheme is None:
        client = redis.Redis.from_url(url, **options)
        _pack_in_hiredis(client)
        return client
    # A cluster keeps its own retry policy: it follows a fail-over by trying again.
    options.pop("retry", None)
    return RedisCluster.from_url(urlunsplit(parts._replace(scheme=scheme)), **options)


def bounded(timeout: float) -> dict[str, Any]:
    """redis-py's options for calls that give up within about ``timeout`` seconds on a
    server that stopped answering (ADR 79): the connect and every reply wait at most
    that, and a call is tried again once only after a lost connection (a server that
    restarted), never after a timeout. redis-py's own default, ten tries each with its
    full timeout, would keep a frozen server a hang for many times the timeout."""
    return {
        "socket_connect_timeout": timeout,
        "socket_timeout": timeout,
        "retry": Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
    }


# What redis-py's encoder does by default, and hiredis does too.
_HIREDIS_ENCODING = ("utf-8", "strict")
# redis-py's own size above which its Python packer sends an argument as a chunk.
_BUFFER_CUTOFF = 6000


class _HiredisPacker:
    """redis-py's hiredis packer less its pass over every argument in Python (a check
    for a memoryview, then the encoder's checks of each type): hiredis packs bytes, str
    (as UTF-8), int and float itself, as the encoder writes them. An argument hiredis
    refuses (a memoryview, a bool, None) goes through redis-py's Python packer, which
    packs it or raises its DataError as before (ADR 71)."""

    def __init__(self, encoder: Any) -> None:  # noqa: ANN401 (redis-py's Encoder)
        # Typed as Any: redis-py leaves its packers unannotated.
        self._fallback: Any = PythonRespSerializer(_BUFFER_CUTOFF, encoder.encode)

    def pack(self, *args: Any) -> list[bytes]:  # noqa: ANN401 (a command's arguments)
        name = args[0]
        # A command name of several words ("SCRIPT LOAD") goes as several, as redis-py
        # sends it.
        if isinstance(name, str):
            args = (*name.encode().split(), *args[1:])
        elif isinstance(name, bytes) and b" " in name:
            args = (*name.split(), *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError:
            return cast("list[bytes]", self._fallback.pack(*args))


def _pack_in_hiredis(client: redis.Redis) -> None:
    """New connections of ``client`` pack commands with ``_HiredisPacker``, unless its
    encoder is not the UTF-8 one that hiredis's packing matches."""
    encoder = client.get_encoder()
    if (encoder.encoding, encoder.encoding_errors) != _HIREDIS_ENCODING:
        return
    client.connection_pool.connection_kwargs["command_packer"] = _HiredisPacker(encoder)


def script(client: RedisClient, name: str) -> Script:
    """The Lua script ``lua/<name>.lua`` of this package, registered on ``client``."""
    source = resources.files("jobledger.adapters.redis").joinpath(f"lua/{name}.lua")
    return client.register_script(source.read_text(encoding="utf-8"))
