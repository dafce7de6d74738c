"""Ids made without ``UUID.__init__``: the fast uuid5 is uuid5, the fast uuid4 is a
uuid4."""

import uuid

from hypothesis import given
from hypothesis import strategies as st

from jobledger.domain.ids import name_uuid, random_uuid


@given(namespace=st.uuids(), name=st.text())
def test_a_name_uuid_is_the_uuid5_of_the_same_name(namespace: uuid.UUID, name: str) -> None:
    """If any namespace and any name are given, then ``name_uuid`` equals
    ``uuid.uuid5``: the same value, version 5, the RFC 4122 variant, and it hashes,
    compares and prints as that UUID does."""
    expected = uuid.uuid5(namespace, name)
    made = name_uuid(namespace, name)
    assert made == expected
    assert hash(made) == hash(expected)
    assert str(made) == str(expected)
    assert (made.version, made.variant) == (5, uuid.RFC_4122)
    assert made.is_safe is uuid.SafeUUID.unknown
    assert {made: 1}[expected] == 1


def test_a_random_uuid_is_a_version_4_uuid() -> None:
    """If ids are drawn, then each is a version 4 UUID of the RFC 4122 variant that
    prints, parses back and hashes as a constructed one, and none repeats."""
    drawn = [random_uuid() for _ in range(1000)]
    assert len(set(drawn)) == len(drawn)
    for made in drawn[:50]:
        assert (made.version, made.variant) == (4, uuid.RFC_4122)
        again = uuid.UUID(str(made))
        assert (again, hash(again), str(again)) == (made, hash(made), str(made))
