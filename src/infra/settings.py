"""One frozen settings object, read from ``JOBLEDGER_*`` variables and CLI flags.

What a setting may hold is declared on its field (``msgspec.Meta`` bounds and
patterns, ``Literal`` choices), so msgspec refuses a bad value as it reads it; the
field's ``extra={"use": ...}`` says how to fix one, ``{range}`` standing for what the
bounds allow. Only rules that relate two settings or parse a value are written out.
"""

import ipaddress
import json
import os
import re
import reprlib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal, get_args, get_type_hints
from urllib.parse import urlsplit

import msgspec
import msgspec.inspect
import psycopg
from msgspec import Meta
from psycopg.conninfo import conninfo_to_dict

from jobledger.domain.notifications import SECRET_PREFIX
from jobledger.infra.credentials import MAX_PASSWORD_LENGTH, USERNAME_PATTERN, USERNAME_RULE
from jobledger.infra.errors import SettingsError

PREFIX = "JOBLEDGER_"
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_WRITER_BATCH = 10_000
MAX_WRITER_DELAY_MS = 10_000
_SECRET_FIELDS = frozenset({"database_url", "redis_url", "smtp_url"})
_SECRET_VALUES = frozenset({"admin_password"})
# DESIGN names the first admin's variables without the prefix; the prefixed ones win.
_FALLBACKS = {"admin_username": "ADMIN_USERNAME", "admin_password": "ADMIN_PASSWORD"}
MAX_SESSION_HOURS = 30 * 24
MINUTES_PER_DAY = 24 * 60
MAX_PORT = 65_535
MAX_RETENTION_DAYS = 36_500
MAX_REBUILD_PROCESSES = 32
MAX_ARCHIVE_BATCH = 100_000
MAX_PASSWORD_MEMORY_KIB = 4 * 1024 * 1024
MAX_CAP = 100_000  # queues or named limits
ARGON2_KIB_PER_LANE = 8

# Shared by several fields.
_Seconds = Annotated[float, Meta(gt=0, extra={"use": "{range} seconds"})]
_Minutes = Annotated[float, Meta(gt=0, le=MINUTES_PER_DAY, extra={"use": "{range} minutes"})]
_Port = Annotated[int, Meta(ge=1, le=MAX_PORT, extra={"use": "a TCP port, {range}"})]
_Budget = Annotated[int, Meta(ge=1, le=1_000_000, extra={"use": "{range}"})]
# A comma-separated list in the environment and in a flag, split once as it is read.
_List = tuple[str, ...]

# Redis URL schemes that name a cluster (ADR 41), and the scheme of each node.
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
SMTP_SCHEMES = frozenset({"smtp", "smtps"})
# An address, bare or with a display name: "ops@example.com", "Jobs <ops@example.com>".
_SENDER = r"\A(?:[^@\s<>,;]+@[^@\s<>,;]+|[^@<>,;\r\n]*<[^@\s<>,;]+@[^@\s<>,;]+>)?\Z"


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Every setting; each field ``x`` is read from ``JOBLEDGER_X``."""

    data_dir: str = ".jobledger"
    database_url: str = ""
    redis_url: str = ""
    redis_prefix: Annotated[
        str, Meta(pattern=r"\A[^{]+\Z", extra={"use": "a short name without braces"})
    ] = "jl"
    database_pool_size: Annotated[int, Meta(ge=1)] = 5
    # How long a role waits at start for a store that is not up yet (0: it does not).
    start_timeout: Annotated[
        float, Meta(ge=0, le=3600, extra={"use": "{range} seconds, 0 to not wait"})
    ] = 60.0
    # How long one call may wait on a store before the store counts as unreachable
    # (ADR 79): a frozen server is an outage within a second or two, not a hang.
    database_timeout_ms: Annotated[int, Meta(ge=100, le=60_000, extra={"use": "{range} ms"})] = 1000
    redis_timeout_ms: Annotated[int, Meta(ge=100, le=60_000, extra={"use": "{range} ms"})] = 1000
    aggregate_cache_size: Annotated[
        int, Meta(ge=0, extra={"use": "{range} aggregates, 0 for no cache"})
    ] = 10_000
    writer_max_batch: Annotated[
        int, Meta(ge=1, le=MAX_WRITER_BATCH, extra={"use": "{range} items"})
    ] = 100
    writer_max_delay_ms: Annotated[
        float, Meta(ge=0, le=MAX_WRITER_DELAY_MS, extra={"use": "{range} ms"})
    ] = 5.0
    projection_page_size: Annotated[
        int, Meta(ge=1, le=MAX_WRITER_BATCH, extra={"use": "{range} events"})
    ] = 2000
    projection_poll_ms: Annotated[float, Meta(gt=0, extra={"use": "{range} milliseconds"})] = 500.0
    projection_batch_ms: Annotated[
        float, Meta(ge=0, le=1000, extra={"use": "{range} milliseconds"})
    ] = 20.0
    leader_ttl_ms: Annotated[int, Meta(ge=100, extra={"use": "{range} ms"})] = 3000
    # Below the ttl too: checked in _check, as it relates two settings.
    leader_renew_ms: Annotated[int, Meta(ge=1, extra={"use": "{range} ms"})] = 1000
    leader_poll_ms: Annotated[int, Meta(ge=10, extra={"use": "{range} ms"})] = 500
    scheduler_tick_ms: Annotated[int, Meta(ge=1, extra={"use": "{range} ms"})] = 50
    misfire_grace_seconds: Annotated[float, Meta(ge=0, extra={"use": "{range} seconds"})] = 60.0
    max_payload_bytes: Annotated[int, Meta(ge=1, extra={"use": "{range} bytes"})] = 64 * 1024
    # Two fires of a 5-field cron are at least a minute apart anyway.
    min_interval_seconds: Annotated[float, Meta(ge=60, extra={"use": "{range} seconds"})] = 60.0
    worker_queues: Annotated[
        _List, Meta(min_length=1, extra={"use": "one or more queue names, comma-separated"})
    ] = ("default",)
    worker_slots: Annotated[
        int, Meta(ge=1, le=1000, extra={"use": "{range} concurrent executions"})
    ] = 4
    worker_lease_ttl_seconds: Annotated[float, Meta(ge=1, extra={"use": "{range} seconds"})] = 30.0
    worker_grace_seconds: Annotated[float, Meta(ge=0, extra={"use": "{range} seconds"})] = 10.0
    progress_log_seconds: Annotated[
        float, Meta(ge=1, le=3600, extra={"use": "{range} seconds"})
    ] = 10.0
    handlers: _List = ()
    webhook_allow: _List = ()
    webhook_timeout_seconds: _Seconds = 30.0
    shell_commands: str = ""
    shell_timeout_seconds: _Seconds = 60.0
    # The mail server of email notifications (empty: email channels fail permanently).
    smtp_url: str = ""
    # Empty: jobledger@ the worker's host name.
    smtp_from: Annotated[
        str, Meta(pattern=_SENDER, extra={"use": "an address, e.g. jobledger@example.com"})
    ] = ""
    # The dashboard's address, that notifications link to (empty: links as paths).
    public_url: str = ""
    breaker_fail_max: Annotated[int, Meta(ge=1, extra={"use": "{range} consecutive failures"})] = 3
    breaker_reset_seconds: _Seconds = 30.0
    metrics_port: Annotated[
        int, Meta(ge=0, le=MAX_PORT, extra={"use": "a TCP port, {range}, 0 for none"})
    ] = 0
    metrics_host: Annotated[
        str, Meta(pattern=r"\S", extra={"use": "an address, e.g. 127.0.0.1 or 0.0.0.0"})
    ] = "127.0.0.1"
    # Read in any case (logging's own names are upper case); stored lower case.
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["auto", "console", "json"] = "auto"
    mode: Literal["dev", "production"] = "production"
    admin_username: Annotated[str, Meta(pattern=USERNAME_PATTERN, extra={"use": USERNAME_RULE})] = (
        "admin"
    )
    # A secret read from a file often keeps its line break; that would be part of it.
    admin_password: Annotated[
        str,
        Meta(
            max_length=MAX_PASSWORD_LENGTH,
            pattern=r"(?s)\A(?!\s)(.*\S)?\Z",
            extra={"use": "{range} characters, without spaces or line breaks around it"},
        ),
    ] = ""
    session_idle_minutes: _Minutes = 30.0
    session_absolute_hours: Annotated[
        float, Meta(gt=0, le=MAX_SESSION_HOURS, extra={"use": "{range} hours"})
    ] = 12.0
    # argon2id's cost for new hashes; a user's stored hash is redone with a changed cost
    # at their next login. At least 8 KiB of memory per lane: checked in _check.
    password_time_cost: Annotated[int, Meta(ge=1, le=100, extra={"use": "{range} passes"})] = 3
    password_memory_kib: Annotated[
        int, Meta(ge=8, le=MAX_PASSWORD_MEMORY_KIB, extra={"use": "{range} KiB"})
    ] = 65_536
    password_parallelism: Annotated[int, Meta(ge=1, le=64, extra={"use": "{range} lanes"})] = 4
    login_max_failures: Annotated[int, Meta(ge=1, le=1000, extra={"use": "{range} failures"})] = 5
    login_window_minutes: _Minutes = 15.0
    # Sign-ins that may wait for one of the two password checks at a time in an API
    # process; more are refused with 429 at once, so a burst holds no request threads.
    login_queue: Annotated[int, Meta(ge=1, le=10_000, extra={"use": "{range} sign-ins"})] = 16
    api_host: Annotated[str, Meta(pattern=r"\A\S+\Z", extra={"use": "a host or address"})] = (
        "127.0.0.1"
    )
    api_port: _Port = 8000
    api_max_body_bytes: Annotated[
        int, Meta(ge=1024, le=100 * 1024 * 1024, extra={"use": "{range} bytes"})
    ] = 1_048_576
    # The callers' budgets (ADR 77), shared by every API process through Redis.
    api_requests_per_credential: _Budget = 3000
    api_requests_per_address: _Budget = 10_000
    api_budget_window_seconds: Annotated[
        float, Meta(ge=1, le=3600, extra={"use": "{range} seconds"})
    ] = 10.0
    api_long_polls: Annotated[
        int, Meta(ge=1, le=100_000, extra={"use": "{range} open long-polls"})
    ] = 20
    api_runs_per_minute: _Budget = 10_000
    secure_cookies: Literal["auto", "always", "never"] = "auto"
    ready_max_lag: Annotated[int, Meta(ge=0, extra={"use": "{range} events"})] = 10_000
    trusted_proxies: _List = ()
    # None: on in dev mode, off in production; an explicit true or false wins.
    test_handlers: bool | None = None
    retention_days: Annotated[
        float, Meta(gt=0, le=MAX_RETENTION_DAYS, extra={"use": "{range} days"})
    ] = 30.0
    # queue=days pairs, comma-separated: checked in _check_entries, as they parse.
    retention_queues: _List = ()
    # Empty: the folder "archives" in data_dir.
    archive_dir: str = ""
    archive_batch: Annotated[
        int, Meta(ge=1, le=MAX_ARCHIVE_BATCH, extra={"use": "{range} executions"})
    ] = 10_000
    # 0: one per core. A read-model rebuild of a long log on PostgreSQL folds the
    # executions in this many processes (1: in the calling process only).
    rebuild_processes: Annotated[
        int, Meta(ge=0, le=MAX_REBUILD_PROCESSES, extra={"use": "{range} processes"})
    ] = 0
    # How many queues and named limits there may be: each one is read by every lease
    # round (limits) or listing (queues), so their number is bounded.
    max_queues: Annotated[int, Meta(ge=1, le=MAX_CAP, extra={"use": "{range} queues"})] = 1000
    max_named_limits: Annotated[
        int, Meta(ge=1, le=MAX_CAP, extra={"use": "{range} named limits"})
    ] = 1000

    @property
    def rebuild_process_count(self) -> int:
        """``rebuild_processes``, with 0 read as the cores this process may use."""
        return self.rebuild_processes or min(MAX_REBUILD_PROCESSES, _cores())

    @property
    def uses_postgres(self) -> bool:
        return bool(self.database_url) and not self.database_url.startswith("sqlite:")

    @property
    def test_handlers_enabled(self) -> bool:
        """Whether the ``test.*`` handlers (``test.crash`` ends a worker) are loaded."""
        return self.mode == "dev" if self.test_handlers is None else self.test_handlers

    @property
    def proxy_networks(self) -> tuple[IPNetwork, ...]:
        """``trusted_proxies`` as networks (an address is a network of one)."""
        return tuple(_as_network(entry) for entry in self.trusted_proxies)

    @property
    def sqlite_path(self) -> Path:
        if self.database_url.startswith("sqlite:"):
            return Path(urlsplit(self.database_url).path)
        return Path(self.data_dir) / "events.sqlite3"

    @property
    def archive_path(self) -> Path:
        return Path(self.archive_dir) if self.archive_dir else Path(self.data_dir) / "archives"

    @property
    def queue_retention_days(self) -> dict[str, float]:
        """``retention_queues`` as queue -> days (checked as it was read)."""
        return dict(_retention_entry(entry) for entry in self.retention_queues)

    def masked(self) -> dict[str, Any]:
        """The effective settings as plain JSON values (lists as lists), with secrets
        (in URLs, or whole values) as ``***``."""
        shown: dict[str, Any] = {
            name: list(value) if isinstance(value, tuple) else value
            for name, value in msgspec.structs.asdict(self).items()
        }
        for name in _SECRET_FIELDS:
            shown[name] = mask_url(shown[name])
        for name in _SECRET_VALUES:
            shown[name] = "***" if shown[name] else ""
        shown["shell_commands"] = mask_command_templates(self.shell_commands)
        return shown


# scheme://user:password@ ; the password runs to the last @ before the host, so one
# with an unencoded # ? or / is masked whole too.
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^\s]*@", re.IGNORECASE)
# ?password=... or &sslpassword=... in a URL's query (libpq and redis read both).
_QUERY_PASSWORD = re.compile(r"(?P<head>[?&](?:ssl)?password=)[^&#\s]*", re.IGNORECASE)
# password=... in a libpq key=value conninfo, bare or single-quoted (with \' inside).
_CONNINFO_PASSWORD = re.compile(
    r"(?P<head>(?<![\w?&])(?:ssl)?password\s*=\s*)(?:'(?:[^'\\]|\\.)*'?|[^\s]*)",
    re.IGNORECASE,
)


# A credential after an auth scheme, case-sensitive as HTTP writes the schemes, so prose
# like "a basic check" stays. Passwords in URLs are masked by mask_url.
AUTH_VALUE: Final = re.compile(r"\b(?P<head>(?:Bearer|Basic)\s+)[A-Za-z0-9._~+/=-]{8,}")
# In an argv template: a header (`Authorization: token abc`, `X-Api-Key: abc`,
# `Cookie: sid=abc`), an option with its value (`--password=abc`), or an option whose
# value is the next argument (`--token abc`; curl's `-u user:password`).
_SECRET_HEADER: Final = re.compile(
    r"(?i)^(?P<head>(?:proxy-)?authorization|cookie|[a-z-]*(?:api-?key|token|secret|auth)"
    r"[a-z-]*)\s*:\s*\S.*$"
)
_SECRET_OPTION: Final = r"--?[a-z-]*(?:password|passwd|token|secret|api-?key)[a-z-]*"  # noqa: S105 (a pattern of option names, not a password)
_SECRET_ASSIGNED: Final = re.compile(rf"(?i)^(?P<head>{_SECRET_OPTION}=).+$")
_SECRET_BEFORE: Final = re.compile(rf"(?i)-u|--user|{_SECRET_OPTION}")


def mask_command_templates(text: str) -> str:
    """``JOBLEDGER_SHELL_COMMANDS`` as printed: credentials written into an argv
    template (an Authorization-like header, a password or token option and its value,
    a Bearer or Basic value, a password in a URL) as ``***``, the rest as it is."""
    try:
        templates = json.loads(text)
    except ValueError:
        return _masked_argument(text)  # refused at start anyway; still never shown
    if not isinstance(templates, dict):
        return _masked_argument(text)
    shown = {name: _masked_argv(argv) for name, argv in templates.items()}
    return json.dumps(shown, ensure_ascii=False)


def _masked_argv(argv: object) -> object:
    if not isinstance(argv, list):
        return _masked_argument(argv) if isinstance(argv, str) else argv
    shown: list[object] = []
    hide_next = False
    for arg in argv:
        if isinstance(arg, str):
            shown.append("***" if hide_next else _masked_argument(arg))
            hide_next = _SECRET_BEFORE.fullmatch(arg) is not None
        else:
            shown.append(arg)
            hide_next = False
    return shown


def _masked_argument(arg: str) -> str:
    arg = _SECRET_HEADER.sub(r"\g<head>: ***", arg)
    arg = _SECRET_ASSIGNED.sub(r"\g<head>***", arg)
    return mask_url(AUTH_VALUE.sub(r"\g<head>***", arg))


def mask_url(text: str) -> str:
    """``text`` with every password in it as ``***``: a URL's ``user:password@``, a
    ``?password=`` in its query, and ``password=`` of a libpq key=value conninfo. The
    one masking that every printed or logged setting and error goes through."""
    if "password" in text.lower():
        text = _CONNINFO_PASSWORD.sub(r"\g<head>***", _QUERY_PASSWORD.sub(r"\g<head>***", text))
    if "://" not in text:
        return text
    return _URL_PASSWORD.sub(r"\g<head>***@", text)


def load_settings(environ: Mapping[str, str], **overrides: str | float | None) -> Settings:
    """Settings from the environment, then overrides (CLI flags) on top."""
    given = _given(environ, overrides)
    values = {field: _parsed(field, raw) for field, (_, raw) in given.items()}
    if values.get("test_handlers") == "":
        del values["test_handlers"]  # set but empty: the mode decides
    try:
        settings = msgspec.convert(values, Settings, strict=False)
    except msgspec.ValidationError as error:
        raise SettingsError(_explain(error, given)) from None
    names = {field: PREFIX + field.upper() for field in Settings.__struct_fields__}
    names |= {field: name for field, (name, _) in given.items()}
    _check(settings, names)
    return settings


# (the variable or flag a setting came from, its value as given)
Given = tuple[str, object]


def _cores() -> int:
    """The cores this process may run on (its CPU affinity, where the system says)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def _given(environ: Mapping[str, str], overrides: Mapping[str, object]) -> dict[str, Given]:
    """The settings that were set, each with where it came from: the flag, the
    variable, or the variable's unprefixed fallback."""
    given: dict[str, Given] = {}
    for field in Settings.__struct_fields__:
        variable = PREFIX + field.upper()
        fallback = _FALLBACKS.get(field, "")
        if overrides.get(field) is not None:
            given[field] = ("--" + field.replace("_", "-"), overrides[field])
        elif variable in environ:
            given[field] = (variable, environ[variable])
        elif fallback in environ:
            given[field] = (fallback, environ[fallback])
    return given


def _parsed(field: str, raw: object) -> object:
    if not isinstance(raw, str):
        return raw
    if field in _LISTS:
        return tuple(entry for entry in (part.strip() for part in raw.split(",")) if entry)
    if field == "log_level":
        return raw.lower()
    return raw


_AT_FIELD = re.compile(r"`\$\.(?P<field>\w+)")


def _explain(error: msgspec.ValidationError, given: Mapping[str, Given]) -> str:
    """msgspec's message (`Expected `int` >= 1 - at `$.worker_slots``) as the line a
    user can act on: the variable or flag, what it takes, and what it was given."""
    text = str(error)
    found = _AT_FIELD.search(text)
    if found is None:
        return text
    field = found["field"]
    name, raw = given.get(field, (PREFIX + field.upper(), None))
    fix = _FIXES.get(field)
    if not fix:
        problem = text.split(" - ", maxsplit=1)[0]
        return f"{name}: {problem}; set it to a valid value"
    if field in _SECRET_FIELDS | _SECRET_VALUES:
        return f"{name}: use {fix}"
    return f"{name}: use {fix}; got {reprlib.repr(raw)}"


def _declared() -> list[tuple[str, msgspec.inspect.Type, dict[str, Any], object]]:
    """(name, type, the ``Meta`` extra, default) of each field, as msgspec reads them."""
    info = msgspec.inspect.type_info(Settings)
    if not isinstance(info, msgspec.inspect.StructType):  # pragma: no cover (a Struct)
        raise TypeError(info)
    declared = []
    for field in info.fields:
        kind, extra = field.type, {}
        if isinstance(field.type, msgspec.inspect.Metadata):
            kind, extra = field.type.type, field.type.extra or {}
        declared.append((field.name, kind, extra, field.default))
    return declared


def _fixes() -> dict[str, str]:
    """For each field, what it takes as a user reads it: from its declared bounds or
    choices, its ``use`` text, and for a number its default."""
    fixes: dict[str, str] = {}
    hints = get_type_hints(Settings)
    for name, kind, extra, default in _declared():
        # msgspec sorts a Literal's values; the declared order reads better.
        allowed = _allowed(kind)
        if isinstance(kind, msgspec.inspect.LiteralType):
            allowed = _either(get_args(hints[name]))
        fix = str(extra.get("use", "{range}")).format(range=allowed)
        if isinstance(kind, msgspec.inspect.IntType | msgspec.inspect.FloatType):
            fix += f" (default {_number(default)})"
        fixes[name] = fix
    return fixes


def _allowed(kind: msgspec.inspect.Type) -> str:
    """The values a type's bounds allow, in words: "1 to 1000", "more than 0 and at most
    1440", "at most 1024" (characters or entries), "true or false"."""
    if isinstance(kind, msgspec.inspect.UnionType) and any(
        isinstance(each, msgspec.inspect.BoolType) for each in kind.types
    ):
        return "true or false"
    if isinstance(kind, msgspec.inspect.IntType | msgspec.inspect.FloatType):
        return _between(kind.gt, kind.ge, kind.lt, kind.le)
    if isinstance(kind, msgspec.inspect.StrType | msgspec.inspect.VarTupleType):
        return _between(None, kind.min_length, None, kind.max_length)
    return ""


def _between(gt: float | None, ge: float | None, lt: float | None, le: float | None) -> str:
    if ge is not None and le is not None:
        return f"{_number(ge)} to {_number(le)}"
    low = f"more than {_number(gt)}" if gt is not None else ""
    low = f"at least {_number(ge)}" if ge is not None else low
    high = f"less than {_number(lt)}" if lt is not None else ""
    high = f"at most {_number(le)}" if le is not None else high
    if low and high:
        return f"{low} and {high}"
    if ge is not None:
        return f"{_number(ge)} or more"
    return low or high


def _either(choices: tuple[object, ...]) -> str:
    words = [str(choice) for choice in choices]
    return " or ".join([", ".join(words[:-1]), words[-1]] if len(words) > 1 else words)


def _number(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


_FIXES = _fixes()
_LISTS = frozenset(
    name for name, kind, _, _ in _declared() if isinstance(kind, msgspec.inspect.VarTupleType)
)


def _check(settings: Settings, names: Mapping[str, str]) -> None:
    """The rules msgspec cannot check from a field's declaration: those that relate two
    settings, and those that parse a value (URLs, addresses and networks)."""
    _check_urls(settings, names)
    _check_entries(settings, names)
    if settings.leader_renew_ms >= settings.leader_ttl_ms:
        raise SettingsError(
            f"{names['leader_renew_ms']}: renew more often than the ttl "
            f"({names['leader_ttl_ms']}: {settings.leader_ttl_ms} ms), e.g. every third of it"
        )
    lanes = settings.password_parallelism
    if settings.password_memory_kib < ARGON2_KIB_PER_LANE * lanes:
        raise SettingsError(
            f"{names['password_memory_kib']}: argon2 needs {ARGON2_KIB_PER_LANE} KiB per lane; "
            f"use at least {ARGON2_KIB_PER_LANE * lanes} for "
            f"{names['password_parallelism']}={lanes}"
        )
    if settings.api_max_body_bytes < settings.max_payload_bytes:
        raise SettingsError(
            f"{names['api_max_body_bytes']}: a job's payload travels in the request body; use "
            f"at least {names['max_payload_bytes']} ({settings.max_payload_bytes})"
        )


def _check_urls(settings: Settings, names: Mapping[str, str]) -> None:
    # No message quotes a URL's text: a password with an unencoded special character
    # can land in any part of it.
    if settings.database_url:
        scheme = urlsplit(settings.database_url).scheme
        if scheme not in {"postgresql", "postgres", "sqlite"}:
            raise SettingsError(
                f"{names['database_url']}: scheme {scheme!r} is not supported; use "
                "postgresql://user:password@host:5432/dbname or sqlite:///path/to/events.sqlite3"
            )
        if scheme != "sqlite":
            _check_postgres_url(settings.database_url, names["database_url"])
    if settings.redis_url:
        _check_redis_url(settings.redis_url, names["redis_url"])
    if settings.smtp_url:
        _check_smtp_url(settings.smtp_url, names["smtp_url"])
    if settings.public_url:
        _check_public_url(settings.public_url, names["public_url"])


def _check_entries(settings: Settings, names: Mapping[str, str]) -> None:
    for entry in settings.trusted_proxies:
        if not _network(entry):
            raise SettingsError(
                f"{names['trusted_proxies']}: {entry!r} is not an address or a network; list "
                "the proxies in front of the API, e.g. 10.0.0.5,192.168.0.0/24,::1"
            )
    for entry in settings.retention_queues:
        try:
            _retention_entry(entry)
        except ValueError:
            raise SettingsError(
                f"{names['retention_queues']}: {entry!r} is not queue=days; use e.g. "
                f"reports=365,noise=2 (days from more than 0 to {MAX_RETENTION_DAYS})"
            ) from None
    for entry in settings.webhook_allow:
        if not _allowable(entry):
            raise SettingsError(
                f"{names['webhook_allow']}: {entry!r} is neither a host name nor an address "
                "or network; use e.g. 10.0.0.0/8,192.168.1.20,hooks.internal"
            )


_ENCODE_FIX = "percent-encode special characters in the password (# as %23, / as %2F)"


def _check_postgres_url(url: str, name: str) -> None:
    """As libpq reads it (several hosts and ports for fail-over included)."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        raise SettingsError(
            f"{name} cannot be read as a PostgreSQL URL; use "
            f"postgresql://user:password@host:5432/dbname and {_ENCODE_FIX}"
        ) from None
    if not all(_valid_port(port) for port in str(params.get("port") or "").split(",")):
        raise SettingsError(
            f"{name}: a port is not a number from 1 to 65535; use "
            f"postgresql://user:password@host:5432/dbname and {_ENCODE_FIX}"
        )


def _check_redis_url(url: str, name: str) -> None:
    fix = f"use redis://:password@host:6379/0 and {_ENCODE_FIX}"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (reading the port is the check)
    except ValueError:
        raise SettingsError(f"{name}: the host or port cannot be read; {fix}") from None
    if parts.scheme not in {"redis", "rediss", *CLUSTER_SCHEMES}:
        raise SettingsError(
            f"{name}: the scheme must be redis or rediss (redis+cluster or rediss+cluster "
            f"for a Redis Cluster); {fix}"
        )
    database = parts.path.strip("/")
    if database and not database.isdigit():
        raise SettingsError(f"{name}: the database (after the /) is not a number; {fix}")
    if parts.scheme in CLUSTER_SCHEMES and database not in {"", "0"}:
        raise SettingsError(f"{name}: a Redis Cluster has only database 0; {fix}")


def _check_smtp_url(url: str, name: str) -> None:
    fix = (
        "use smtp://user:password@host:587 (STARTTLS when the server offers it) or "
        f"smtps://user:password@host:465, and {_ENCODE_FIX}"
    )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (reading the port is the check)
    except ValueError:
        raise SettingsError(f"{name}: the host or port cannot be read; {fix}") from None
    if parts.scheme not in SMTP_SCHEMES or not parts.hostname:
        raise SettingsError(f"{name}: the scheme must be smtp or smtps, with a host; {fix}")
    if parts.path.strip("/") or parts.query:
        raise SettingsError(f"{name}: a mail server takes no path or query; {fix}")


def _check_public_url(url: str, name: str) -> None:
    fix = "use the dashboard's address as its users reach it, e.g. https://jobs.example.com"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (reading the port is the check)
    except ValueError:
        raise SettingsError(f"{name}: the host or port cannot be read; {fix}") from None
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise SettingsError(f"{name}: not an http(s) URL with a host; {fix}")
    if parts.query or parts.fragment or parts.username:
        raise SettingsError(f"{name}: a base URL has no query, fragment or user; {fix}")


def notify_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    """The notification webhooks' signing secrets, by name: every set
    ``JOBLEDGER_NOTIFY_SECRET_<NAME>`` variable (read apart from the settings, as their
    names are the operator's)."""
    return {
        variable.removeprefix(SECRET_PREFIX): value
        for variable, value in environ.items()
        if variable.startswith(SECRET_PREFIX) and len(variable) > len(SECRET_PREFIX) and value
    }


def _retention_entry(entry: str) -> tuple[str, float]:
    """``queue=days`` as (queue, days); ValueError if it is not one."""
    queue, equals, text = entry.partition("=")
    days = float(text)
    if not (equals and queue.strip() and 0 < days <= MAX_RETENTION_DAYS):
        raise ValueError(entry)
    return queue.strip(), days


def _valid_port(port: str) -> bool:
    return not port or (port.isdigit() and 1 <= int(port) <= MAX_PORT)


_HOST_NAME = re.compile(
    r"^(?=.{1,253}$)[a-z0-9_]([a-z0-9_-]{0,62})(\.[a-z0-9_-]{1,63})*\.?$", re.IGNORECASE
)


def _as_network(entry: str) -> IPNetwork:
    """An address or a network as ``ip_network`` reads it, an IPv6 one in brackets too."""
    return ipaddress.ip_network(entry.strip("[]"), strict=False)


def _network(entry: str) -> bool:
    try:
        _as_network(entry)
    except ValueError:
        return False
    return True


def _allowable(entry: str) -> bool:
    """A host name, an address or a network, as the webhook handler's allow list takes."""
    return _network(entry) or ("/" not in entry and _HOST_NAME.match(entry) is not None)
