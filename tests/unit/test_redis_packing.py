"""The command packer of the Redis clients: hiredis packs the arguments by itself."""

from typing import Any

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from jobledger.adapters.redis.client import _HiredisPacker

# A client's encoder and redis-py's own packer, as a connection builds it (neither
# connects to a server).
ENCODER = redis.Redis().get_encoder()
PACKER = _HiredisPacker(ENCODER)
_CONNECTION: Any = redis.ConnectionPool().make_connection()
REDIS_PY: Any = _CONNECTION._command_packer

ARGUMENT = st.one_of(
    st.binary(max_size=64),
    st.text(max_size=32),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
)


@given(st.lists(ARGUMENT, max_size=30))
def test_arguments_are_packed_as_redis_py_packs_them(arguments: list[object]) -> None:
    """If a command's arguments are bytes, text, integers or floats, then the packer
    makes the bytes redis-py's own packer makes."""
    command = ("EVALSHA", *arguments)
    assert b"".join(PACKER.pack(*command)) == b"".join(REDIS_PY.pack(*command))


@pytest.mark.parametrize("name", ["SCRIPT LOAD", b"SCRIPT LOAD", "CLIENT SETNAME"])
def test_a_command_name_of_two_words_goes_as_two(name: str | bytes) -> None:
    """If a command's name has two words, then they go as two arguments, as redis-py
    sends them."""
    assert b"".join(PACKER.pack(name, "x")) == b"".join(REDIS_PY.pack(name, "x"))


def test_an_argument_hiredis_refuses_goes_redis_pys_way() -> None:
    """If an argument is a memoryview, then redis-py's packer packs it; if it is a bool
    or None, then the command is refused with redis-py's DataError, as before."""
    view = memoryview(b"payload")
    assert b"".join(PACKER.pack("SET", "k", view)) == b"".join(
        REDIS_PY.pack("SET", "k", b"payload")
    )
    for refused in (True, None):
        with pytest.raises(redis.DataError):
            PACKER.pack("SET", "k", refused)
