"""Ids derived from names: the fast uuid5 is uuid5."""

import uuid

from hypothesis import given
from hypothesis import strategies as st

from jobledger.domain.ids import name_uuid


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
