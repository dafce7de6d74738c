"""jobledger on a Redis Cluster: three masters on loopback, no replicas.

The queue contract suite runs on the cluster too (``test_queue_contract``), and so do
the suites of the other ports Redis serves (``ports/``: presence, budgets, breakers,
leadership); this module checks what only a cluster shows: queues spread over the
masters, the leader elected through the cluster client from the settings, and the
production roles riding out the loss of a master (its slots come back empty).
"""

import uuid
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import redis
from redis.cluster import RedisCluster
from tests.integration.test_outages import (
    OUTAGE_SECONDS,
    check_nothing_lost,
    check_outage_said_once,
    check_queue_verifies,
    check_ran_through,
    during,
    shared_settings,
    start_long_runs,
    under_load,
)
from tests.redis_cluster import PrivateRedisCluster
from tests.roles import wait_for

from jobledger.adapters.redis.client import connect
from jobledger.adapters.redis.keys import Keys
from jobledger.adapters.redis.leadership import RedisLeadership, current_leader
from jobledger.adapters.redis.queue import RedisQueue
from jobledger.adapters.store import open_ledger
from jobledger.bootstrap import bootstrap
from jobledger.infra.leadership import Leadership
from jobledger.infra.settings import load_settings
from jobledger.projections.queue.backend import QueueChange, QueueItem, QueueMeta, QueueState

if TYPE_CHECKING:
    from tests.conftest import JobledgerCli

pytestmark = [pytest.mark.redis]

META = QueueMeta(store_id="s", epoch="e1", position=0)
AT = datetime(2026, 12, 2, tzinfo=UTC)
QUEUES = [f"q{n}" for n in range(12)]


def item(queue: str) -> QueueItem:
    return QueueItem(
        execution_id=uuid.uuid4(),
        queue=queue,
        priority=5,
        version=1,
        state=QueueState.PENDING,
        at=AT,
        attempt=1,
        lease_id=None,
        spec=b"spec",
    )


def masters_holding(client: RedisCluster, pattern: str) -> Counter[int]:
    """How many keys matching ``pattern`` each master holds, by port."""
    found: Counter[int] = Counter()
    for node in client.nodes_manager.get_nodes_by_server_type("primary"):
        found[int(node.port)] = sum(1 for _ in client.scan_iter(match=pattern, target_nodes=node))
    return found


def test_a_cluster_url_connects_the_cluster_client(
    redis_cluster: PrivateRedisCluster, redis_server: str
) -> None:
    """If the Redis URL has the redis+cluster scheme, then the client is redis-py's
    cluster client, and it reaches the cluster through the one node named; a redis://
    URL gives the client of one server."""
    cluster, server = connect(redis_cluster.url), connect(redis_server)
    try:
        assert isinstance(cluster, RedisCluster)
        assert cluster.ping()
        assert isinstance(server, redis.Redis)
        assert server.ping()
    finally:
        cluster.close()
        server.close()


def test_queues_spread_over_the_masters(cluster_client: RedisCluster) -> None:
    """If entries of many queues are bulk-loaded and applied on a cluster, then the
    queues lie on every master, each queue's keys on one, every entry is there, and a
    reset leaves no queue key on any master, not even of queues the set never named."""
    queue = RedisQueue(cluster_client, "jlspread")
    queue.reset(META)
    queue.load([item(name) for name in QUEUES for _ in range(3)], epoch=META.epoch)
    queue.apply([QueueChange.put(item(name)) for name in QUEUES], epoch=META.epoch)
    assert queue.read_meta() == META
    assert queue.queues() == set(QUEUES)
    assert all(len(queue.items(name)) == 4 for name in QUEUES)
    spread = masters_holding(cluster_client, "jlspread:{q:*")
    assert len([port for port, count in spread.items() if count]) == len(spread) == 3, spread
    for name in QUEUES:
        held = masters_holding(cluster_client, f"jlspread:{{q:{name}}}:*")
        assert len([port for port, count in held.items() if count]) == 1, (name, held)
    for name in QUEUES:  # a queue whose SADD never ran, on every master
        cluster_client.set(f"jlspread:{{q:stray-{name}}}:meta", META.epoch)
    strays = masters_holding(cluster_client, "jlspread:{q:stray-*")
    assert len([port for port, count in strays.items() if count]) == 3, strays
    queue.reset(QueueMeta(store_id="s", epoch="e2", position=0))
    assert sum(masters_holding(cluster_client, "jlspread:{q:*").values()) == 0


def leads(leadership: Leadership) -> bool:
    leadership.tick()
    return leadership.is_leader()


@pytest.mark.postgres
def test_one_scheduler_leads_through_the_cluster(
    postgres_url: str, redis_cluster: PrivateRedisCluster, cluster_client: RedisCluster
) -> None:
    """If two schedulers are built from a redis+cluster URL, then one leads, the other
    waits, and after the cluster loses everything the other leads under a higher epoch."""
    settings = load_settings(
        {}, database_url=postgres_url, redis_url=redis_cluster.url, redis_prefix="lead"
    )
    with bootstrap(settings) as first, bootstrap(settings) as second:
        a, b = first.leadership(), second.leadership()
        a.tick()
        b.tick()
        assert (a.is_leader(), b.is_leader()) == (True, False)
        assert isinstance(a, RedisLeadership)
        assert current_leader(cluster_client, Keys("lead")) == (a.token, a.epoch)
        cluster_client.flushall()
        wait_for(lambda: leads(b), "the other scheduler leads", timeout=5)
        assert b.epoch > a.epoch
        a.tick()
        assert not a.is_leader()


def apart_from_the_store_keys(cluster: PrivateRedisCluster, queue: str) -> str:
    """A key prefix under which ``queue`` lives on another master than the store's meta
    and queue set: losing that master loses the queue alone."""
    for _ in range(100):
        prefix = f"o{uuid.uuid4().hex[:8]}"
        keys = Keys(prefix)
        store = {cluster.owner_of(keys.meta), cluster.owner_of(keys.queues)}
        if cluster.owner_of(keys.queue(queue).meta) not in store:
            return prefix
    raise AssertionError("no prefix puts the queue apart from the store's keys")


def check_completed_once(database_url: str, execution_ids: Iterable[str]) -> None:
    """Each execution has exactly one ExecutionCompleted in the log."""
    ledger = open_ledger(load_settings({}, database_url=database_url))
    try:
        for execution_id in execution_ids:
            names = Counter(type(e).__name__ for e in ledger.history(uuid.UUID(execution_id)))
            assert names["Completed"] == 1, (execution_id, names)
    finally:
        ledger.close()


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.xdist_group("roles")
def test_the_roles_ride_out_the_loss_of_a_cluster_master(
    tmp_path: Path, postgres_url: str, jobledger_cli: "JobledgerCli"
) -> None:
    """If the roles run on a three-master cluster under load and the master serving the
    default queue (not the store's meta) is killed with -9 and started again empty, so
    that the queue alone loses its data, then no role exits, the projector finds the
    queue lost and rebuilds it from the log, every accepted execution completes exactly
    once (the ones running through the loss in their first lease), the outage is said
    once, and `queue verify` is clean."""
    (tmp_path / "cluster").mkdir()
    cluster = PrivateRedisCluster(tmp_path / "cluster")
    try:
        cluster.create()
        shared = shared_settings(tmp_path, postgres_url, cluster.url)
        shared["redis_prefix"] = apart_from_the_store_keys(cluster, "default")
        with under_load(tmp_path, jobledger_cli, shared) as (deployment, load):
            long_runs = start_long_runs(deployment.api_url, postgres_url, OUTAGE_SECONDS - 2)
            victim = cluster.owner_of(Keys(shared["redis_prefix"]).queue("default").meta)
            cluster.kill(victim)
            during(OUTAGE_SECONDS, deployment, lambda: None)
            cluster.start_node(victim)
            cluster.wait_until_ok()
            projector = deployment.roles["projector"]
            wait_for(lambda: "queue.lost" in projector.output(), "the projector finds the loss")
            during(1.0, deployment, lambda: None)
            load.stop()
            accepted = [*load.accepted.values(), *long_runs]
            check_nothing_lost(postgres_url, accepted)
            check_completed_once(postgres_url, accepted)
            check_ran_through(postgres_url, long_runs)
            check_queue_verifies(jobledger_cli, shared)
            deployment.check_alive()
        assert load.failures == [], load.failures
        check_outage_said_once(deployment, "redis")
    finally:
        cluster.stop()
