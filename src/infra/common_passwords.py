"""Passwords everyone tries first (``common_passwords.txt``, shipped with the package).

A guesser starts with these, with digits, a year or a ``!`` added and letters swapped
for look-alike digits (``P@ssw0rd2024!``), so a password is refused when it is one of
them, or when what is left of it, once those are taken off, is one of them or one of
them twice, or when it is only digits.
"""

import functools
import re
from importlib import resources
from typing import Final

# How leet-speak writes letters.
_LOOK_ALIKES: Final = str.maketrans("013457@$!|+", "oieastasilt")
_ENDS: Final = re.compile(r"^[\W\d_]+|[\W\d_]+$")


@functools.cache
def common_passwords() -> frozenset[str]:
    """The list, read once (only processes that check passwords read it)."""
    text = (resources.files("jobledger.infra") / "common_passwords.txt").read_text("utf-8")
    return frozenset(
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )


def common_password_base(password: str) -> str | None:
    """The common password, word or count of digits ``password`` is made of, or None."""
    common = common_passwords()
    lowered = password.lower()
    if lowered in common or lowered.isdigit():
        return lowered
    core = _ENDS.sub("", lowered).translate(_LOOK_ALIKES)
    if core in common:  # before halving: some listed words are doubled ones (passpass)
        return core
    half, odd = divmod(len(core), 2)
    if not odd and core[:half] == core[half:]:
        core = core[:half]
    return core if core in common else None
