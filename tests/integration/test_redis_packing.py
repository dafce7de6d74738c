"""Clients from ``connect`` pack commands with hiredis alone, against a real server."""

import pytest
import redis

from jobledger.adapters.redis.client import RedisClient, _HiredisPacker, connect


def packer_of(client: RedisClient) -> object:
    """The command packer of a connection of ``client``'s pool."""
    assert isinstance(client, redis.Redis)  # one server's URL
    pool = client.connection_pool
    connection = pool.get_connection()
    try:
        return connection._command_packer
    finally:
        pool.release(connection)


@pytest.mark.redis
def test_a_client_packs_with_hiredis_and_round_trips_values(redis_server: str) -> None:
    """If a client from connect() sends commands with text, bytes, integers and floats,
    then its connections pack them with the hiredis packer, and the server stores and
    scripts see them as sent."""
    client = connect(redis_server)
    try:
        key = "jl-packing-test"
        client.set(key, "héllo wörld ✓")
        assert client.get(key) == "héllo wörld ✓".encode()
        script = "return {ARGV[1], ARGV[2], ARGV[3], ARGV[4]}"
        answer = client.eval(script, 1, key, b"\x00\xff", 2**62, 0.25, "日本")
        assert answer == [b"\x00\xff", str(2**62).encode(), b"0.25", "日本".encode()]
        assert isinstance(packer_of(client), _HiredisPacker)
        client.delete(key)
    finally:
        client.close()


@pytest.mark.redis
def test_a_client_with_another_encoding_keeps_redis_pys_packer(redis_server: str) -> None:
    """If a client's URL names an encoding other than UTF-8, then its connections keep
    redis-py's packer, which encodes text as asked."""
    client = connect(f"{redis_server}?encoding=latin-1")
    try:
        client.set("jl-packing-latin", "é")
        assert client.get("jl-packing-latin") == "é".encode("latin-1")
        assert not isinstance(packer_of(client), _HiredisPacker)
        client.delete("jl-packing-latin")
    finally:
        client.close()
