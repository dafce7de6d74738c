"""A private Redis Cluster: three redis-server masters in cluster mode on free loopback
ports, without replicas or persistence. A test may kill one master and start it
again: it keeps its node id and slots (the cluster config file) but comes back empty,
as a master without persistence does."""

import contextlib
import random
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot
from tests.conftest import missing_service
from tests.roles import wait_for

MASTERS = 3
# Short, so that a test sees the cluster mark a killed master as failed in seconds.
NODE_TIMEOUT_MS = 2000
BUS_OFFSET = 10_000
# Below the usual ephemeral ports (from 32768), bus ports included.
_PORTS = (15_000, 22_000)


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_cluster_port() -> int:
    """A free loopback port whose cluster bus port (10000 higher) is free too; Redis
    refuses a port whose bus port would pass 65535."""
    for _ in range(1000):
        port = random.randint(*_PORTS)
        if _free(port) and _free(port + BUS_OFFSET):
            return port
    raise RuntimeError("no free pair of loopback ports for a Redis Cluster node")


class PrivateRedisCluster:
    """Three masters; ``url`` names the cluster by its first node."""

    def __init__(self, workdir: Path) -> None:
        server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
        if server is None or cli is None:
            missing_service("redis-server and redis-cli are needed for a Redis Cluster")
        self._server, self._cli = server or "", cli or ""
        self._workdir = workdir
        self.ports = [free_cluster_port() for _ in range(MASTERS)]
        self.url = f"redis+cluster://127.0.0.1:{self.ports[0]}/0"
        self._processes: dict[int, subprocess.Popen[bytes]] = {}

    def create(self) -> None:
        for port in self.ports:
            self.start_node(port)
        addresses = [f"127.0.0.1:{port}" for port in self.ports]
        command = [self._cli, "--cluster", "create", *addresses]
        command += ["--cluster-replicas", "0", "--cluster-yes"]
        result = subprocess.run(  # noqa: S603 (a fixed argument list, no shell)
            command, capture_output=True, text=True, check=False, timeout=60
        )
        if result.returncode != 0:
            missing_service(f"redis-cli could not create a cluster: {result.stdout[-500:]}")
        self.wait_until_ok()

    def start_node(self, port: int) -> None:
        """Start (or start again, empty) the master on ``port``."""
        folder = self._workdir / str(port)
        folder.mkdir(exist_ok=True)
        args = [self._server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder)]
        args += ["--cluster-enabled", "yes", "--cluster-config-file", str(folder / "nodes.conf")]
        args += ["--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--save", "", "--appendonly"]
        args += ["no", "--logfile", str(folder / "redis.log")]
        process = subprocess.Popen(  # noqa: S603 (a fixed argument list, no shell)
            args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        self._processes[port] = process
        wait_for(lambda: self._answers(port, process), f"redis-server on {port} answers")

    def _answers(self, port: int, process: subprocess.Popen[bytes]) -> bool:
        if process.poll() is not None:
            log = self._workdir / str(port) / "redis.log"
            tail = log.read_text()[-500:] if log.exists() else "(no log)"
            missing_service(f"redis-server cannot run in cluster mode: {tail}")
        client = redis.Redis(port=port, socket_connect_timeout=0.5)
        with contextlib.closing(client), contextlib.suppress(redis.ConnectionError):
            return bool(client.ping())
        return False

    def wait_until_ok(self) -> None:
        """Until every master says the cluster is ok (all slots served)."""
        wait_for(lambda: all(self._ok(port) for port in self.ports), "the cluster is ok", 30)

    def _ok(self, port: int) -> bool:
        client = redis.Redis(port=port, socket_connect_timeout=0.5, decode_responses=True)
        with contextlib.closing(client), contextlib.suppress(redis.ConnectionError):
            return bool(client.cluster("info").get("cluster_state") == "ok")
        return False

    def owner_of(self, key: str) -> int:
        """The port of the master that serves ``key``'s slot."""
        with self.client() as client:
            node = client.nodes_manager.get_node_from_slot(key_slot(key.encode()))
            return int(node.port)

    @contextlib.contextmanager
    def client(self) -> Iterator[RedisCluster]:
        client = RedisCluster(host="127.0.0.1", port=self.ports[0])
        try:
            yield client
        finally:
            client.close()

    def kill(self, port: int) -> None:
        """kill -9 of one master: its data is gone, its slots are down until it is back."""
        process = self._processes.pop(port)
        process.kill()
        process.wait()

    def stop(self) -> None:
        for process in self._processes.values():
            process.terminate()
        for process in self._processes.values():
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._processes.clear()
