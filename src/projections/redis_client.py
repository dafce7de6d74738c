"""The Redis client every Redis user here takes: one server, or a Redis Cluster.

A URL names a cluster by its scheme (ADR 41): ``redis+cluster://host:port`` (or
``rediss+cluster://`` for TLS) names any one node of it, from which redis-py's
cluster client learns the others; ``redis://`` and ``rediss://`` name one server.
"""

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.cluster import RedisCluster

RedisClient = redis.Redis | RedisCluster

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

# What a cluster answers, or its client finds, while a slot has no reachable master:
# an outage, as a refused connection is, not an error of the command.
CLUSTER_OUTAGE_ERRORS: tuple[type[Exception], ...] = (
    redis.exceptions.ClusterError,  # CLUSTERDOWN, MASTERDOWN, a redirection loop
    redis.exceptions.TryAgainError,  # a slot in migration
    redis.exceptions.SlotNotCoveredError,
)


def connect(url: str, **options: Any) -> RedisClient:  # noqa: ANN401 (redis-py's options)
    """A client for ``url``; ``options`` go to redis-py (the URL's own query wins)."""
    parts = urlsplit(url)
    scheme = CLUSTER_SCHEMES.get(parts.scheme)
    if scheme is None:
        return redis.Redis.from_url(url, **options)
    return RedisCluster.from_url(urlunsplit(parts._replace(scheme=scheme)), **options)
