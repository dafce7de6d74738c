"""Limits on the JSON values and texts the ledger stores.

A payload travels through the event codec (JSON in the log), the Redis queue (msgpack,
whose integers are 64-bit), the read models (PostgreSQL text, which holds no NUL) and
back to a handler. A value that any of them cannot carry would be accepted once and
then fail every reader of the log, so every way in checks values here first and
refuses what does not fit, naming the path of the first offending part
(``payload.items[2].name``) and the fix.

The walk is iterative: a value nested far deeper than the limit is refused, not a
recursion error.
"""

import json
import math
import re
from typing import Final, cast

import msgspec

from jobledger.domain.errors import InvalidDefinitionError

MAX_DEPTH: Final = 32
MAX_KEY_CHARS: Final = 256
MAX_REASON_CHARS: Final = 2000
MAX_BY_CHARS: Final = 200
MIN_INT: Final = -(2**63)
MAX_INT: Final = 2**63 - 1
_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_UNSTORABLE: Final = re.compile("[\x00\ud800-\udfff]")
_SHOWN_KEY_CHARS: Final = 40
# What a decoder raises for a document it cannot read: malformed, out of range (a
# number past what Python converts), or nested past the interpreter's depth (a
# RecursionError, which no decoder wraps). Every reader of outside input catches all
# three, so one such document is refused as itself, never as the reader's failure.
UNREADABLE: Final = (msgspec.MsgspecError, ValueError, RecursionError)
# Marks a value that sits in an array or at the top, under no key.
_NO_KEY: Final = object()


class JsonProblem(msgspec.Struct, frozen=True):
    """Why a value cannot be stored, where in it, and what to do instead."""

    path: str
    problem: str
    fix: str


def json_problem(
    value: object, path: str = "payload", *, max_depth: int = MAX_DEPTH
) -> JsonProblem | None:
    """The first part of ``value`` (in document order) that the stores cannot carry, or
    None when all of it fits. Does not check the encoded size (see ``check_json``)."""
    if _fits(value, max_depth):
        return None
    return _first_problem(value, path, max_depth)


def _first_problem(value: object, path: str, max_depth: int) -> JsonProblem | None:
    """The walk behind ``json_problem``, with the path of every part it looks at."""
    # Each entry: a value, its path, its depth, and the key it sits under (checked
    # first, so that a bad key is reported before anything inside its value).
    pending: list[tuple[object, str, int, object]] = [(value, path, 0, _NO_KEY)]
    while pending:
        item, where, depth, key = pending.pop()
        problem = _key_problem(key, where) or _scalar_problem(item, where)
        if problem is not None:
            return problem
        if isinstance(item, (dict, list)):
            if depth >= max_depth:
                return JsonProblem(
                    where,
                    f"nests deeper than {max_depth} levels",
                    f"flatten the value to at most {max_depth} nested objects or arrays",
                )
            pending.extend(reversed(_children(item, where, depth + 1)))
    return None


def check_json(value: object, field: str, *, max_bytes: int, max_depth: int = MAX_DEPTH) -> None:
    """Raise ``InvalidDefinitionError`` naming the path of the first part of ``value``
    the stores cannot carry, or ``field`` when its JSON is longer than ``max_bytes``."""
    problem = json_problem(value, field, max_depth=max_depth)
    if problem is not None:
        raise InvalidDefinitionError(problem.path, problem.problem, problem.fix)
    size = len(msgspec.json.encode(value))
    if size > max_bytes:
        raise InvalidDefinitionError(
            field,
            f"is {size} bytes as JSON, over the {max_bytes}-byte limit",
            "store large data elsewhere and pass a reference",
        )


def text_problem(value: object, field: str, *, max_chars: int) -> JsonProblem | None:
    """Why a name, reason or other text cannot be stored, or None when it can."""
    if not isinstance(value, str):
        return JsonProblem(field, f"is of type {type(value).__name__}, not text", "send a string")
    if len(value) > max_chars:
        return JsonProblem(
            field, f"is {len(value)} characters long, over {max_chars}", "shorten it"
        )
    return _string_problem(value, field)


def check_text(value: object, field: str, *, max_chars: int) -> None:
    """Raise ``InvalidDefinitionError`` if ``value`` is not text the stores can hold."""
    problem = text_problem(value, field, max_chars=max_chars)
    if problem is not None:
        raise InvalidDefinitionError(problem.path, problem.problem, problem.fix)


def check_actor(by: object) -> None:
    """Raise ``InvalidDefinitionError`` if who acts is not text the stores hold."""
    check_text(by, "by", max_chars=MAX_BY_CHARS)


def check_reason(by: object, reason: object) -> None:
    """Raise ``InvalidDefinitionError`` if who acts or why is not text the stores hold."""
    check_actor(by)
    check_text(reason, "reason", max_chars=MAX_REASON_CHARS)


def storable_text(text: str) -> str:
    """``text`` with what PostgreSQL cannot hold replaced: NUL and lone surrogates become
    U+FFFD. For texts a handler produces (an error, a deferral's reason), which are
    recorded as they come rather than refused."""
    if text.isascii():
        return text.replace("\x00", "\ufffd")
    return _UNSTORABLE.sub("\ufffd", text)


def error_line(error: BaseException, *, max_chars: int, mark: str = "") -> str:
    """``error`` as one line: its type and message, NUL replaced by U+FFFD, at most
    ``max_chars`` characters (the last of them ``mark`` when it had to be cut)."""
    text = " ".join(f"{type(error).__name__}: {error}".split()).replace("\x00", "\ufffd")
    if len(text) <= max_chars:
        return text
    return text[: max_chars - len(mark)] + mark


def _fits(value: object, max_depth: int) -> bool:
    """Whether ``value`` surely fits, by the rules ``json_problem`` walks, without the
    paths it builds for its messages (most values fit; a handler's result and every
    payload of a batch are checked). Exact types only: anything else (a subclass) is
    left to the walk, which then finds the problem or none."""
    pending: list[tuple[object, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        kind = type(item)
        if kind is dict or kind is list:
            if depth >= max_depth or not _children_fit(item, depth + 1, pending):
                return False
        elif not _scalar_fits(item, kind):
            return False
    return True


def _children_fit(item: object, depth: int, pending: list[tuple[object, int]]) -> bool:
    """Queue the children of a dict or list; False if a key of a dict does not fit."""
    if type(item) is list:
        pending.extend((child, depth) for child in cast("list[object]", item))
        return True
    for key, child in cast("dict[object, object]", item).items():
        if type(key) is not str or len(key) > MAX_KEY_CHARS or not _fine_text(key):
            return False
        pending.append((child, depth))
    return True


def _scalar_fits(item: object, kind: type) -> bool:
    if item is None or kind is bool:
        return True
    if kind is int:
        return MIN_INT <= cast("int", item) <= MAX_INT
    if kind is float:
        return math.isfinite(cast("float", item))
    return kind is str and _fine_text(cast("str", item))


def _fine_text(text: str) -> bool:
    return _string_problem(text, "") is None


def _scalar_problem(item: object, where: str) -> JsonProblem | None:
    # bool before int: True is an int to Python, and always fits.
    if item is None or isinstance(item, (bool, dict, list)):
        return None
    if isinstance(item, int):
        return _int_problem(item, where)
    if isinstance(item, float):
        return _float_problem(item, where)
    if isinstance(item, str):
        return _string_problem(item, where)
    return JsonProblem(
        where,
        f"a value of type {type(item).__name__} is not JSON",
        "use objects, arrays, strings, numbers, true, false or null",
    )


def _int_problem(number: int, where: str) -> JsonProblem | None:
    if MIN_INT <= number <= MAX_INT:
        return None
    return JsonProblem(
        where,
        f"the integer {_short(str(number))} does not fit in 64 bits ({MIN_INT} to {MAX_INT})",
        'send a larger number as a string, e.g. "1208925819614629174706176"',
    )


def _float_problem(number: float, where: str) -> JsonProblem | None:
    if math.isfinite(number):
        return None
    return JsonProblem(where, f"{number} is not a finite number", "send a finite number, or null")


def _string_problem(text: str, where: str) -> JsonProblem | None:
    if "\x00" in text:
        return JsonProblem(
            where,
            f"contains a NUL character at index {text.index(chr(0))}",
            "remove the NUL (\\u0000) characters; send binary data base64-encoded",
        )
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError as error:
            return JsonProblem(
                where,
                f"is not valid Unicode (a lone surrogate at index {error.start})",
                "send UTF-8 text",
            )
    return None


def _children(
    item: dict[object, object] | list[object], where: str, depth: int
) -> list[tuple[object, str, int, object]]:
    if isinstance(item, list):
        return [(child, f"{where}[{index}]", depth, _NO_KEY) for index, child in enumerate(item)]
    return [(child, _child_path(where, key), depth, key) for key, child in item.items()]


def _key_problem(key: object, where: str) -> JsonProblem | None:
    if key is _NO_KEY:
        return None
    if not isinstance(key, str):
        return JsonProblem(
            where, f"the key is of type {type(key).__name__}, not a string", "use string keys"
        )
    if len(key) > MAX_KEY_CHARS:
        return JsonProblem(
            f"{where} (key)",
            f"the key is {len(key)} characters long, over {MAX_KEY_CHARS}",
            f"use keys of at most {MAX_KEY_CHARS} characters",
        )
    return _string_problem(key, f"{where} (key)")


def _child_path(where: str, key: object) -> str:
    if isinstance(key, str) and _IDENTIFIER.fullmatch(key):
        return f"{where}.{key}"
    # ASCII escapes: the path goes into an error message, which must itself encode.
    shown = json.dumps(key) if isinstance(key, str) else repr(key)
    return f"{where}[{_short(shown)}]"


def _short(text: str) -> str:
    if len(text) <= _SHOWN_KEY_CHARS:
        return text
    return text[: _SHOWN_KEY_CHARS - 1] + "…"
