"""Inputs at the edges of what the codec, the stores and the calendar take: job
definitions, ad-hoc runs, job changes and schedule previews, drawn by hypothesis and
written as raw JSON text, so that what JSON cannot carry (NaN, 1e400, an integer of
5,000 digits, a lone surrogate escape, 100,000 nested arrays) can be sent too."""

import json
import math
import urllib.parse
from datetime import date, datetime, timedelta, timezone
from typing import Any, Final, NamedTuple

from hypothesis import strategies as st

from jobledger.domain.instants import EARLIEST, LATEST
from jobledger.domain.json_values import MAX_INT, MIN_INT
from jobledger.domain.policies import MisfirePolicy, OverlapPolicy
from jobledger.domain.schedules import region_zones


class Raw(NamedTuple):
    """A JSON token written as it is."""

    text: str


def deep(levels: int, *, arrays: bool) -> Raw:
    if arrays:
        return Raw("[" * levels + "]" * levels)
    return Raw('{"a":' * levels + "1" + "}" * levels)


RAW_NUMBERS: Final = (
    Raw("NaN"),
    Raw("Infinity"),
    Raw("-Infinity"),
    Raw("1e400"),
    Raw("-1e400"),
    Raw("1e-400"),
    Raw("-0"),
    Raw("1E+2"),
    Raw("9" * 5000),
    Raw("-" + "9" * 4301),
    Raw(str(2**64)),
    Raw("0." + "0" * 400 + "1"),
)
EDGE_INTS: Final = (0, -1, MAX_INT, MIN_INT, MAX_INT + 1, MIN_INT - 1, 2**64, -(2**64), 10**40)
EDGE_TEXTS: Final = (
    "",
    " ",
    "\x00",
    "a\x00b",
    "\ud800",
    "\udfff",
    "x\udbff",
    "\U0001f600",
    "\u2028\u2029",
    "\ufeff",
    "\\u0000",
    "k" * 256,
    "k" * 257,
)
DEPTHS: Final = (31, 32, 33, 100, 100_000)
ODD_ZONES: Final = (
    "EST5EDT",
    "Etc/GMT+14",
    "Etc/GMT-14",
    "Etc/GMT+12",
    "posixrules",
    "",
    "../etc",
    "/etc/localtime",
    "localtime",
    "Factory",
    "right/UTC",
    "posix/Europe/Berlin",
    "UTC ",
    "utc",
    "Europe/Berlin\x00",
    "Pacific/Kiritimati",
    "Pacific/Apia",
    "America/St_Johns",
    "Asia/Kathmandu",
    "Australia/Lord_Howe",
    "Antarctica/Troll",
    "Europe/Dublin",
)
USUAL_CRONS: Final = (
    "*/5 * * * *",
    "0 * * * *",
    "30 2 * * *",
    "30 1 * * 0",
    "15 */6 * * 1-5",
    "0 9 * * MON",
    "0 0 29 2 *",
    "0 0 29 2 1",
    "59 23 31 12 *",
    "0 0 L * *",
    "0 0 * * 5#3",
    "@yearly",
)
CRONS: Final = (
    "* * * * *",
    "0 0 29 2 *",
    "0 0 31 2 *",
    "0 0 30 2 *",
    "0 0 29 2 1",
    "59 23 31 12 *",
    "0 0 1 1 *",
    "30 2 * * *",
    "30 1 * * 0",
    "0 0 L * *",
    "0 0 1W * *",
    "0 0 * * 5#3",
    "0 0 * * 7",
    "0 0 * * 0-7",
    "@yearly",
    "@reboot",
    "0 0 ? * *",
    "H * * * *",
    "R * * * *",
    "*/0 * * * *",
    "0 */24 * * *",
    "*/1000000 * * * *",
    "0-59/61 * * * *",
    "1,2,3 * * * * *",
    "0 * * *",
    " 0 * * * * ",
    "0\t*\t*\t*\t*",
    "0 0 1 JAN MON",
    "0 0 1 13 *",
    "60 * * * *",
    "-1 * * * *",
    "",
)
USUAL_OFFSETS: Final = ("Z", "+00:00", "+14:00", "-12:00", "+05:45", "-03:30")
OFFSETS: Final = ("Z", "+00:00", "-00:00", "+14:00", "-14:00", "+23:59", "-23:59", "+05:45", "")
BAD_INSTANTS: Final = (
    "2026-13-01T00:00:00Z",
    "2026-12-01T24:00:00Z",
    "2026-12-01T23:59:60Z",
    "+002026-12-01T00:00:00Z",
    "20261201T000000Z",
    "2026-12-01T00:00:00.0000001Z",
    "2026-12-01T00:00:00+24:00",
    "0000-12-31T00:00:00Z",
    "10000-01-01T00:00:00Z",
    "",
)
QUEUES: Final = ("default", "reports", "emails")
CALENDARS: Final = ("US", "DE-BY", "GB-SCT")
ODD_CALENDARS: Final = ("XX", "us", "DE-ZZ", "", "US-", "Mars", "DE BY")
# Interval lengths and offsets: usual ones, and past the bounds (a minute, a leap year).
INTERVALS: Final = (60, 300, 2700, 3600, 86_400, 604_800)
ODD_INTERVALS: Final = (0, -1, 1, 59, 31_622_400, 31_622_401, 2**63, 1.5, "60")
UNKNOWN_JOB: Final = "00000000-0000-4000-8000-000000000000"
# What names and queues look like (the definitions refuse others: an edge of their own).
NAME: Final = r"[A-Za-z0-9][A-Za-z0-9 ._:/-]{0,30}"
QUEUE: Final = r"[a-z0-9][a-z0-9_-]{0,20}"
HANDLERS: Final = ("test.echo", "test.log", "test.fail", "shell.command", "nope", "", "Test.Echo")
ENDS: Final = (
    (datetime(1, 1, 1), datetime(1, 1, 3)),  # noqa: DTZ001 (zones are added as text)
    (datetime(9999, 11, 29), datetime(9999, 12, 31, 23, 59, 59, 999999)),  # noqa: DTZ001
    (datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59)),  # noqa: DTZ001
)


RAW_BODIES: Final = (
    b"",
    b"NaN",
    b"null",
    b"[]",
    b"0",
    b'"x"',
    b"\xff\xfe{}",
    b"\xef\xbb\xbf{}",
    b"[" * 100_000 + b"]" * 100_000,
    b'{"name": "a", "name": "b", "handler": "test.echo"}',
    b'{"handler": "test.echo", "payload": {"a": 1, "a": 2}}',
    b'{"handler": "test.echo"} trailing',
    b'{"handler": "test.echo",}',
    b"{'handler': 'test.echo'}",
    b'{"handler": "test.echo", "payload": {"a": "\\ud83d\\ude00"}}',
    b'{"handler": "test.echo", "payload": {"a": "\\ud83d"}}',
    b'{"handler": "test.echo", "payload": {"a": "\\u0000"}}',
    b'{"handler": "test.echo", "payload": {"\\u0000": 1}}',
    b'{"handler": "test.echo", "payload": {"a": 1e999}}',
    b'{"handler": "test.echo", "payload": {"a": ' + b"9" * 5000 + b"}}",
)


class Field(NamedTuple):
    """The values a field usually takes, and the ones at or past its edges."""

    usual: st.SearchStrategy[Any]
    edge: st.SearchStrategy[Any]


def body(required: dict[str, Field], optional: dict[str, Field]) -> Field:
    """An object of usual values; at the edge, one field (perhaps one the body does not
    take) at its edge, so that a refusal is about a single field."""
    usual = st.fixed_dictionaries(
        {name: f.usual for name, f in required.items()},
        optional={name: f.usual for name, f in optional.items()},
    )
    fields = required | optional | {"unknown_field": Field(st.nothing(), st.just(1))}
    one = st.sampled_from(sorted(fields)).flatmap(
        lambda name: fields[name].edge.map(lambda value: (name, value))
    )
    return Field(usual, st.builds(lambda values, pair: {**values, pair[0]: pair[1]}, usual, one))


def either(field: Field) -> st.SearchStrategy[Any]:
    """Usual and edge values, half and half."""
    return st.one_of(field.usual, field.edge)


def text(min_size: int, max_size: int) -> st.SearchStrategy[str]:
    """Text without NUL, which no name, reason or filter takes."""
    return st.text(st.characters(exclude_characters="\x00"), min_size=min_size, max_size=max_size)


def texts(usual: st.SearchStrategy[str], longest: int) -> Field:
    edges = (*EDGE_TEXTS, "x" * longest, "x" * (longest + 1))
    return Field(usual, st.sampled_from(edges) | st.integers(0, 9) | st.none())


def integers(low: int, high: int) -> Field:
    limits = (low - 1, low, high, high + 1)
    edges = st.sampled_from((*EDGE_INTS, *limits, *RAW_NUMBERS))
    return Field(st.integers(low, high), edges | st.floats() | st.text(max_size=3))


def seconds(high: float) -> Field:
    limits = (0, 0.5, 1, high, high + 1, 1e7, 1e7 + 1, -1, True, "1")
    usual = st.floats(1, high) | st.integers(1, int(high))
    return Field(usual, st.sampled_from(limits + RAW_NUMBERS) | st.floats())


def choices(usual: Any) -> Field:
    return Field(st.sampled_from([str(value) for value in usual]), st.text(max_size=8) | st.none())


def instants(
    moments: st.SearchStrategy[datetime], offsets: tuple[str, ...]
) -> st.SearchStrategy[str]:
    return st.builds(lambda at, offset: at.isoformat() + offset, moments, st.sampled_from(offsets))


def when() -> Field:
    """Times in this century; at the edge, near either end of the calendar, or not
    times at all."""
    near_ends = instants(st.sampled_from(ENDS).flatmap(lambda ends: st.datetimes(*ends)), OFFSETS)
    usual = st.datetimes(datetime(2000, 1, 1), datetime(2100, 1, 1))  # noqa: DTZ001 (offset added)
    edges = st.one_of(near_ends, near_ends, st.sampled_from(BAD_INSTANTS), st.integers(0, 2**40))
    return Field(instants(usual, USUAL_OFFSETS), edges)


def cron_field(low: int, high: int) -> st.SearchStrategy[str]:
    values = st.integers(low - 1, high + 1).map(str)
    steps = st.sampled_from((0, 1, 2, high, high + 1, 1_000_000)).map(str)
    return st.one_of(
        st.just("*"),
        values,
        st.builds("*/{}".format, steps),
        st.builds("{}-{}".format, values, values),
        st.builds("{}-{}/{}".format, values, values, steps),
        st.builds("{},{}".format, values, values),
    )


def dates() -> st.SearchStrategy[str]:
    return st.dates().map(date.isoformat)


def rules() -> dict[str, Field]:
    """What a recurring schedule may add: jitter, a window, exclusions."""
    odd_dates = st.sampled_from(["2026-02-30", "2026-13-01", "20261201", "", "2026-12-01T00:00Z"])
    return {
        "jitter_seconds": integers(0, 86_400),
        "start_at": when(),
        "end_at": when(),
        "exclude_dates": Field(
            st.lists(dates(), max_size=3), st.lists(odd_dates, min_size=1, max_size=2) | st.just(1)
        ),
        "calendars": Field(
            st.lists(st.sampled_from(CALENDARS), max_size=2, unique=True),
            st.lists(st.sampled_from(ODD_CALENDARS), min_size=1, max_size=2) | st.just("US"),
        ),
    }


def intervals(zones: Field, kinds: st.SearchStrategy[Any]) -> Field:
    every = Field(st.sampled_from(INTERVALS), st.sampled_from(ODD_INTERVALS))
    offsets = Field(st.integers(0, 59), st.sampled_from((-1, 60, 2700, 10**9, "5")))
    required = {"kind": Field(st.just("interval"), kinds), "every_seconds": every}
    return body(required, {"offset_seconds": offsets, "timezone": zones} | rules())


def schedules() -> Field:
    fields = st.tuples(
        cron_field(0, 59), cron_field(0, 23), cron_field(1, 31), cron_field(1, 12), cron_field(0, 7)
    )
    crons = Field(st.sampled_from(USUAL_CRONS), st.sampled_from(CRONS) | fields.map(" ".join))
    zones = Field(
        st.sampled_from(sorted(region_zones())), st.sampled_from(ODD_ZONES) | st.text(max_size=12)
    )
    kinds = st.sampled_from(["", "Cron", "weekly"]) | st.none()
    cron = body(
        {"kind": Field(st.just("cron"), kinds), "cron": crons}, {"timezone": zones} | rules()
    )
    interval = intervals(zones, kinds)
    once = body({"kind": Field(st.just("once"), kinds), "run_at": when()}, {})
    manual = st.just({"kind": "manual"})
    odd: st.SearchStrategy[Any] = st.sampled_from([None, [], "cron", {}])
    # The cron, its zone and the one-shot time are what the edges are about: each is at
    # its edge more often than the kind or an unknown field.
    edges = st.one_of(
        st.fixed_dictionaries({"kind": st.just("cron"), "cron": crons.edge}),
        st.fixed_dictionaries(
            {"kind": st.just("cron"), "cron": crons.usual, "timezone": zones.edge}
        ),
        st.fixed_dictionaries({"kind": st.just("once"), "run_at": when().edge}),
        cron.edge,
        interval.edge,
        once.edge,
        odd,
    )
    return Field(st.one_of(cron.usual, interval.usual, once.usual, manual), edges)


def scheduled() -> st.SearchStrategy[dict[str, Any]]:
    """A job of usual values with a schedule at its edge."""
    job = {"name": st.just("at the edge"), "handler": st.just("test.echo")}
    return st.fixed_dictionaries(job | {"schedule": schedules().edge})


def payloads(base: st.SearchStrategy[dict[str, Any]]) -> Field:
    """``base`` payloads; at the edge, with one value or key there, or not an object."""
    nests = st.builds(deep, st.sampled_from(DEPTHS), arrays=st.booleans())
    edge = st.one_of(
        st.sampled_from(RAW_NUMBERS), st.sampled_from(EDGE_INTS), st.sampled_from(EDGE_TEXTS), nests
    )
    keys = st.text(max_size=6) | st.sampled_from(EDGE_TEXTS)
    usual = base.map(storable)
    edged = st.builds(lambda value, key, extra: {**value, key: extra}, usual, keys, edge)
    return Field(usual, edged | st.sampled_from([[], "x", 1, None]))


def storable(value: Any) -> Any:
    """``value`` with NUL characters (which no store takes) replaced."""
    if isinstance(value, str):
        return value.replace("\x00", "0")
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [storable(item) for item in value]
    return value


def executions(payload: Field) -> st.SearchStrategy[dict[str, Any]]:
    return either(body({"handler": handlers()}, _spec_fields(payload)))


def definitions(payload: Field) -> st.SearchStrategy[dict[str, Any]]:
    return either(body({"name": _name(), "handler": handlers()}, _job_fields(payload)))


def changes(payload: Field) -> st.SearchStrategy[dict[str, Any]]:
    return either(body({}, {"name": _name(), "handler": handlers()} | _job_fields(payload)))


def previews() -> st.SearchStrategy[dict[str, Any]]:
    return either(body({"schedule": schedules()}, {"count": integers(1, 100), "after": when()}))


def reads() -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    """(list or read, query parameters): times and versions at the edges, filters with
    NUL or a lone surrogate, pages past the end."""
    moment = either(when())
    words = either(texts(text(0, 10), 200))
    pages = {"limit": either(integers(1, 500)), "offset": either(integers(0, 10_000_000))}
    times = {"since": moment, "until": moment}
    versions = st.integers(0, 5).map(str) | st.sampled_from(["9" * 40, "-1", "1e3", " 1", "\u0661"])
    filters = dict.fromkeys(("status", "queue", "handler"), words)
    return st.one_of(
        st.tuples(st.just("job as of"), st.fixed_dictionaries({"as_of": moment | versions})),
        st.tuples(
            st.just("executions"), st.fixed_dictionaries({}, optional=times | filters | pages)
        ),
        st.tuples(
            st.just("audit"),
            st.fixed_dictionaries(
                {}, optional=times | {"after": either(integers(0, 10**6)), "types": words}
            ),
        ),
        st.tuples(
            st.just("dead letters"),
            st.fixed_dictionaries({}, optional={"error_contains": words} | filters | pages),
        ),
        st.tuples(st.just("jobs"), st.fixed_dictionaries({}, optional={"search": words} | pages)),
    )


def query(params: dict[str, Any]) -> str:
    """``params`` as a query string; a lone surrogate as its (invalid) UTF-8 bytes."""
    return "&".join(f"{_quoted(name)}={_quoted(value)}" for name, value in params.items())


def _quoted(value: Any) -> str:
    text = value.text if isinstance(value, Raw) else str(value)
    return urllib.parse.quote(text.encode("utf-8", "surrogatepass"), safe="")


def handlers() -> Field:
    return Field(st.just("test.echo"), st.sampled_from(HANDLERS) | st.integers(0, 1))


def _name() -> Field:
    return texts(st.from_regex(NAME, fullmatch=True), 200)


def _spec_fields(payload: Field) -> dict[str, Field]:
    retry = {
        "max_retries": integers(0, 100),
        "initial_backoff_seconds": seconds(3600),
        "max_backoff_seconds": seconds(86400),
        "jitter": Field(st.booleans(), st.sampled_from(["yes", 1, None])),
    }
    retries = body({}, retry)
    return {
        "payload": payload,
        "queue": texts(st.sampled_from(QUEUES) | st.from_regex(QUEUE, fullmatch=True), 64),
        "priority": integers(0, 9),
        "timeout_seconds": seconds(86400),
        "retry": Field(retries.usual, retries.edge | st.sampled_from([None, [], 3])),
    }


def _job_fields(payload: Field) -> dict[str, Field]:
    return _spec_fields(payload) | {
        "schedule": schedules(),
        "misfire": choices(MisfirePolicy),
        "catch_up_cap": integers(1, 1000),
        "overlap": choices(OverlapPolicy),
        "description": texts(text(0, 30), 2000),
        "pause_on_failure": Field(st.booleans(), st.sampled_from(["true", 0, None])),
        "depends_on": Field(st.just([]), depends_on_edges()),
    }


def depends_on_edges() -> st.SearchStrategy[Any]:
    """Upstreams that are no job, or not a list of them: each is refused."""
    entries = st.sampled_from(
        [
            {"job": "no such key"},
            {"job": UNKNOWN_JOB},
            {"job": UNKNOWN_JOB, "on": "sometimes"},
            {"job": ""},
            {"on": "completed"},
            {"job": 1},
        ]
    )
    return st.lists(entries, min_size=1, max_size=3) | st.sampled_from(["x", [1], {}, None])


# ---- writing values as JSON text ----------------------------------------------------


def encode(value: Any, *, ascii_only: bool) -> bytes:
    """``value`` as JSON text; ``Raw`` tokens as they are, non-finite floats as NaN or
    Infinity. Without ``ascii_only``, a lone surrogate is written as its (invalid)
    UTF-8 bytes instead of an escape."""
    return _text(value, ascii_only=ascii_only).encode("utf-8", "surrogatepass")


def _text(value: Any, *, ascii_only: bool) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        items = (
            f"{_text(str(key), ascii_only=ascii_only)}:{_text(item, ascii_only=ascii_only)}"
            for key, item in value.items()
        )
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_text(item, ascii_only=ascii_only) for item in value) + "]"
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return json.dumps(value, ensure_ascii=ascii_only)


UNREADABLE: Final = object()


def read(sent: bytes) -> Any:
    """``sent`` as strict JSON reads it (no NaN or Infinity), or ``UNREADABLE``."""
    try:
        return json.loads(sent, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return UNREADABLE


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


# ---- ad-hoc runs: one, a batch, an outbox row --------------------------------------

RANGE_OFFSETS: Final = ("-14:00", "+14:00", "Z")
# Local times near and past both ends of the range of instants (``domain.instants``):
# written with an offset of 14 hours either way, each may fall on either side of it.
RANGE_ENDS: Final = (
    (datetime(1, 1, 1), datetime(1, 1, 3, 14)),  # noqa: DTZ001 (zones are added as text)
    (datetime(9999, 11, 30, 10), datetime(9999, 12, 31, 23, 59, 59, 999999)),  # noqa: DTZ001
)
# A step either side of each end, and each end itself.
RANGE_STEPS: Final = (
    timedelta(0),
    timedelta(microseconds=1),
    -timedelta(microseconds=1),
    timedelta(hours=14),
    -timedelta(hours=14),
)
UNKNOWN_HANDLERS: Final = ("no.such.handler", "test.echo ", "test.echo\x00", "x" * 201)
UNKNOWN_QUEUES: Final = ("no-such-queue", "Default", "q" * 65, "", "a b", "q\x00")


def range_edges() -> st.SearchStrategy[str]:
    """Instants at, near and past both ends of the range, at -14:00, +14:00 or Z."""
    local = st.sampled_from(RANGE_ENDS).flatmap(lambda ends: st.datetimes(*ends))
    exact = st.builds(
        _at_offset,
        st.sampled_from((EARLIEST, LATEST)),
        st.sampled_from(RANGE_STEPS),
        st.sampled_from((-14, 14, 0)),
    )
    return st.one_of(instants(local, RANGE_OFFSETS), exact)


def _at_offset(end: datetime, step: timedelta, hours: int) -> str:
    """``end + step`` written as the local time of an offset of ``hours``."""
    zone = timezone(timedelta(hours=hours))
    try:
        return (end + step).astimezone(zone).isoformat()
    except OverflowError:  # the local time is past the calendar: write it from UTC
        return (end + step).isoformat()


def run_times(now: datetime) -> Field:
    """``run_at`` within the coming year; at the edge, near the range's ends or no time."""
    usual = st.datetimes(now.replace(tzinfo=None), (now + timedelta(days=365)).replace(tzinfo=None))
    edges = st.one_of(range_edges(), range_edges(), st.sampled_from(BAD_INSTANTS), st.just(0))
    return Field(instants(usual, USUAL_OFFSETS), edges)


def expiries(now: datetime) -> st.SearchStrategy[dict[str, Any]]:
    """``run_at`` with an ``expires_at`` before or after it (a day either way), or an
    ``expires_at`` alone, near now or at the range's edges."""
    run_at = st.datetimes(now.replace(tzinfo=None), (now + timedelta(days=30)).replace(tzinfo=None))
    shift = st.timedeltas(-timedelta(days=1), timedelta(days=1))
    pairs = st.builds(
        lambda at, by, offset: {
            "run_at": at.isoformat() + offset,
            "expires_at": (at + by).isoformat() + offset,
        },
        run_at,
        shift,
        st.sampled_from(USUAL_OFFSETS),
    )
    alone = st.fixed_dictionaries({"expires_at": range_edges() | instants(run_at, OFFSETS)})
    return pairs | alone


def big_payloads(limit: int) -> st.SearchStrategy[Any]:
    """Payloads just under, at and past ``limit`` bytes as JSON, and past the body limit."""
    sizes = (limit - 64, limit - 13, limit - 12, limit + 1, 2 * limit, 1_100_000)
    return st.sampled_from(sizes).map(lambda size: {"blob": "x" * max(size - 12, 0)})


def runs(payload: Field, now: datetime, payload_limit: int) -> Field:
    """An ad-hoc run: usual values, or one field (its time, delay, priority, timeout,
    payload, handler, queue, expiry) at its edge."""
    payloads_field = Field(payload.usual, payload.edge | big_payloads(payload_limit))
    fields = _spec_fields(payloads_field) | {
        "run_at": run_times(now),
        "delay_seconds": seconds(86_400),
    }
    fields["queue"] = Field(fields["queue"].usual, st.sampled_from(UNKNOWN_QUEUES))
    handler = Field(st.just("test.echo"), st.sampled_from(HANDLERS + UNKNOWN_HANDLERS))
    one = body({"handler": handler}, fields)
    timed = st.builds(_timed, one.usual, expiries(now))
    return Field(one.usual, st.one_of(one.edge, timed))


def _timed(values: dict[str, Any], times: dict[str, Any]) -> dict[str, Any]:
    """``values`` started and expiring at ``times`` (without a delay, which ``run_at``
    would contradict)."""
    return {name: value for name, value in values.items() if name != "delay_seconds"} | times


def uniques() -> st.SearchStrategy[dict[str, Any]]:
    """A run's ``unique`` option: usual keys, or one field at its edge."""
    keys = texts(st.sampled_from(("k1", "k2", "{payload.n}", "order-{payload.id}")), 200)
    states = Field(
        st.lists(st.sampled_from(["pending", "running", "completed"]), min_size=1, unique=True),
        st.sampled_from([[], ["done"], "pending", None]),
    )
    return either(
        body(
            {"key": keys},
            {
                "period_seconds": seconds(86_400),
                "states": states,
                "on_conflict": choices(("return_existing", "replace", "debounce")),
            },
        )
    )
