"""What the port suites share: the backends to run each suite on, and a Redis key
prefix of each test's own (the suites may run side by side on one server)."""

import uuid

import pytest
from tests.integration.queue_backends import REDIS_BACKENDS

from jobledger.adapters.redis.client import RedisClient
from jobledger.adapters.redis.keys import Keys

# The process's own memory, one Redis server, a Redis Cluster.
MEMORY_AND_REDIS = ["memory", *REDIS_BACKENDS]
POSTGRES = pytest.param("postgres", marks=pytest.mark.postgres, id="postgres")
# The event store's databases.
STORES = [POSTGRES, "sqlite"]


def redis_under_a_prefix(request: pytest.FixtureRequest) -> tuple[RedisClient, Keys]:
    """The emptied Redis (a server or a cluster) that ``request.param`` names, and keys
    under a prefix of this test's own."""
    client: RedisClient = request.getfixturevalue(request.param)
    return client, Keys(f"t{uuid.uuid4().hex[:10]}")
