"""One frozen settings object, read from ``JOBLEDGER_*`` variables and CLI flags."""

import ipaddress
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec
import psycopg
from psycopg.conninfo import conninfo_to_dict

from jobledger.runtime.credentials import MAX_PASSWORD_LENGTH, USERNAME_RULE, username_problem
from jobledger.runtime.errors import SettingsError

PREFIX = "JOBLEDGER_"
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_WRITER_BATCH = 10_000
MAX_WRITER_DELAY_MS = 10_000
_SECRET_FIELDS = frozenset({"database_url", "redis_url"})
_SECRET_VALUES = frozenset({"admin_password"})
# DESIGN names the first admin's variables without the prefix; the prefixed ones win.
_FALLBACKS = {"admin_username": "ADMIN_USERNAME", "admin_password": "ADMIN_PASSWORD"}
MAX_SESSION_HOURS = 30 * 24
MINUTES_PER_DAY = 24 * 60


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Every setting; each field ``x`` is read from ``JOBLEDGER_X``."""

    data_dir: str = ".jobledger"
    database_url: str = ""
    redis_url: str = ""
    redis_prefix: str = "jl"
    database_pool_size: int = 5
    aggregate_cache_size: int = 10_000
    writer_max_batch: int = 100
    writer_max_delay_ms: float = 5.0
    projection_page_size: int = 2000
    projection_poll_ms: float = 500.0
    projection_batch_ms: float = 20.0
    leader_ttl_ms: int = 3000
    leader_renew_ms: int = 1000
    leader_poll_ms: int = 500
    scheduler_tick_ms: int = 50
    misfire_grace_seconds: float = 60.0
    max_payload_bytes: int = 64 * 1024
    min_interval_seconds: float = 60.0
    worker_queues: str = "default"
    worker_slots: int = 4
    worker_lease_ttl_seconds: float = 30.0
    worker_grace_seconds: float = 10.0
    handlers: str = ""
    webhook_allow: str = ""
    webhook_timeout_seconds: float = 30.0
    shell_commands: str = ""
    shell_timeout_seconds: float = 60.0
    breaker_fail_max: int = 3
    breaker_reset_seconds: float = 30.0
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"
    log_level: str = "info"
    log_format: str = "auto"
    mode: str = "production"
    admin_username: str = "admin"
    admin_password: str = ""
    session_idle_minutes: float = 30.0
    session_absolute_hours: float = 12.0
    login_max_failures: int = 5
    login_window_minutes: float = 15.0
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    api_max_body_bytes: int = 1_048_576
    secure_cookies: str = "auto"
    ready_max_lag: int = 10_000
    trusted_proxies: str = ""
    # None: on in dev mode, off in production; an explicit true or false wins.
    test_handlers: bool | None = None

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
        return tuple(
            ipaddress.ip_network(entry.strip("[]"), strict=False)
            for entry in (e.strip() for e in self.trusted_proxies.split(","))
            if entry
        )

    @property
    def sqlite_path(self) -> Path:
        if self.database_url.startswith("sqlite:"):
            return Path(urlsplit(self.database_url).path)
        return Path(self.data_dir) / "events.sqlite3"

    def masked(self) -> dict[str, Any]:
        """The effective settings with secrets (in URLs, or whole values) as ``***``."""
        shown = msgspec.structs.asdict(self)
        for name in _SECRET_FIELDS:
            shown[name] = mask_url(shown[name])
        for name in _SECRET_VALUES:
            shown[name] = "***" if shown[name] else ""
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
    values = _from_environ(environ)
    values.update({k: v for k, v in overrides.items() if v is not None})
    if values.get("test_handlers") == "":
        del values["test_handlers"]  # set but empty: the mode decides
    try:
        settings = msgspec.convert(values, Settings, strict=False)
    except msgspec.ValidationError as error:
        raise SettingsError(_explain(error)) from None
    _check(settings)
    return settings


def _from_environ(environ: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name in Settings.__struct_fields__:
        variable = PREFIX + name.upper()
        fallback = _FALLBACKS.get(name)
        if variable in environ:
            values[name] = environ[variable]
        elif fallback is not None and fallback in environ:
            values[name] = environ[fallback]
    return values


def _explain(error: msgspec.ValidationError) -> str:
    # msgspec names the path as `$.field`; turn it into the variable a user sets.
    text = str(error)
    if "$." in text:
        field = text.rsplit("$.", 1)[1].split("[", maxsplit=1)[0].strip("` ")
        problem = text.split(" - ", maxsplit=1)[0]
        if "`bool" in problem:
            return f"{PREFIX}{field.upper()}: use true or false"
        return f"{PREFIX}{field.upper()}: {problem}; set it to a valid value"
    return text


def _check(settings: Settings) -> None:
    _check_urls(settings)
    if not 0 < settings.leader_renew_ms < settings.leader_ttl_ms:
        raise SettingsError(
            f"{PREFIX}LEADER_RENEW_MS: renew more often than the ttl "
            f"({settings.leader_ttl_ms} ms), e.g. every third of it"
        )
    for field, valid, fix in _RULES:
        if not valid(getattr(settings, field)):
            raise SettingsError(f"{PREFIX}{field.upper()}: {fix}")
    if settings.api_max_body_bytes < settings.max_payload_bytes:
        raise SettingsError(
            f"{PREFIX}API_MAX_BODY_BYTES: a job's payload travels in the request body; use "
            f"at least {PREFIX}MAX_PAYLOAD_BYTES ({settings.max_payload_bytes})"
        )


# (field, test, how to fix) for every setting with a bounded range.
_RULES: list[tuple[str, Callable[[Any], bool], str]] = [
    ("writer_max_batch", lambda v: 1 <= v <= MAX_WRITER_BATCH, "use 1 to 10000 items"),
    ("writer_max_delay_ms", lambda v: 0 <= v <= MAX_WRITER_DELAY_MS, "use 0 to 10000 ms"),
    ("projection_page_size", lambda v: 1 <= v <= MAX_WRITER_BATCH, "use 1 to 10000 events"),
    ("projection_poll_ms", lambda v: v > 0, "use a positive number of milliseconds"),
    ("projection_batch_ms", lambda v: 0 <= v <= 1000, "use 0 to 1000 milliseconds"),  # noqa: PLR2004
    ("database_pool_size", lambda v: v >= 1, "use 1 or more"),
    ("leader_ttl_ms", lambda v: v >= 100, "use 100 ms or more (default 3000)"),  # noqa: PLR2004
    ("leader_poll_ms", lambda v: v >= 10, "use 10 ms or more (default 500)"),  # noqa: PLR2004
    ("scheduler_tick_ms", lambda v: v >= 1, "use 1 ms or more (default 50)"),
    ("misfire_grace_seconds", lambda v: v >= 0, "use 0 or more seconds"),
    ("worker_slots", lambda v: 1 <= v <= 1000, "use 1 to 1000 concurrent executions"),  # noqa: PLR2004
    ("worker_lease_ttl_seconds", lambda v: v >= 1, "use 1 second or more (default 30)"),
    ("worker_grace_seconds", lambda v: v >= 0, "use 0 or more seconds"),
    ("breaker_fail_max", lambda v: v >= 1, "use 1 or more consecutive failures"),
    ("webhook_timeout_seconds", lambda v: v > 0, "use a positive number of seconds"),
    ("shell_timeout_seconds", lambda v: v > 0, "use a positive number of seconds"),
    ("breaker_reset_seconds", lambda v: v > 0, "use a positive number of seconds"),
    ("worker_queues", lambda v: bool(v.strip(", ")), "name one or more queues, comma-separated"),
    ("metrics_port", lambda v: 0 <= v <= 65535, "use a TCP port, or 0 for none"),  # noqa: PLR2004
    ("metrics_host", lambda v: bool(v.strip()), "name an address, e.g. 127.0.0.1 or 0.0.0.0"),
    ("aggregate_cache_size", lambda v: v >= 0, "use 0 (no cache) or more"),
    ("log_format", lambda v: v in {"auto", "console", "json"}, "use auto, console or json"),
    (
        "log_level",
        lambda v: v.lower() in {"debug", "info", "warning", "error"},
        "use debug, info, warning or error",
    ),
    # Two fires of a 5-field cron are at least a minute apart anyway.
    ("min_interval_seconds", lambda v: v >= 60, "use 60 or more"),  # noqa: PLR2004
    ("redis_prefix", lambda v: bool(v) and "{" not in v, "use a short name without braces"),
    ("mode", lambda v: v in {"dev", "production"}, "use dev or production"),
    ("admin_username", lambda v: username_problem(v) is None, f"use {USERNAME_RULE}"),
    (
        "admin_password",
        # A secret read from a file often keeps its line break; that would be part of it.
        lambda v: len(v) <= MAX_PASSWORD_LENGTH and v == v.strip(),
        f"use at most {MAX_PASSWORD_LENGTH} characters, without spaces or line breaks around it",
    ),
    (
        "session_idle_minutes",
        lambda v: 0 < v <= MINUTES_PER_DAY,
        "use more than 0 and at most 1440 minutes (default 30)",
    ),
    (
        "session_absolute_hours",
        lambda v: 0 < v <= MAX_SESSION_HOURS,
        "use more than 0 and at most 720 hours (default 12)",
    ),
    ("login_max_failures", lambda v: 1 <= v <= 1000, "use 1 to 1000 failures (default 5)"),  # noqa: PLR2004
    (
        "login_window_minutes",
        lambda v: 0 < v <= MINUTES_PER_DAY,
        "use more than 0 and at most 1440 minutes (default 15)",
    ),
    ("api_host", lambda v: bool(v) and not any(c.isspace() for c in v), "use a host or address"),
    ("api_port", lambda v: 1 <= v <= 65535, "use a TCP port, 1 to 65535"),  # noqa: PLR2004
    (
        "api_max_body_bytes",
        lambda v: 1024 <= v <= 100 * 1024 * 1024,  # noqa: PLR2004
        "use 1024 to 104857600 bytes (default 1048576)",
    ),
    ("secure_cookies", lambda v: v in {"auto", "always", "never"}, "use auto, always or never"),
    ("ready_max_lag", lambda v: v >= 0, "use 0 or more events"),
]


def _check_urls(settings: Settings) -> None:
    # No message quotes a URL's text: a password with an unencoded special character
    # can land in any part of it.
    if settings.database_url:
        scheme = urlsplit(settings.database_url).scheme
        if scheme not in {"postgresql", "postgres", "sqlite"}:
            raise SettingsError(
                f"{PREFIX}DATABASE_URL: scheme {scheme!r} is not supported; use "
                "postgresql://user:password@host:5432/dbname or sqlite:///path/to/events.sqlite3"
            )
        if scheme != "sqlite":
            _check_postgres_url(settings.database_url)
    if settings.redis_url:
        _check_redis_url(settings.redis_url)
    for entry in (e.strip() for e in settings.trusted_proxies.split(",")):
        if entry and not _network(entry):
            raise SettingsError(
                f"{PREFIX}TRUSTED_PROXIES: {entry!r} is not an address or a network; list "
                "the proxies in front of the API, e.g. 10.0.0.5,192.168.0.0/24,::1"
            )
    for entry in (e.strip() for e in settings.webhook_allow.split(",")):
        if entry and not _allowable(entry):
            raise SettingsError(
                f"{PREFIX}WEBHOOK_ALLOW: {entry!r} is neither a host name nor an address or "
                "network; use e.g. 10.0.0.0/8,192.168.1.20,hooks.internal"
            )


_ENCODE_FIX = "percent-encode special characters in the password (# as %23, / as %2F)"


def _check_postgres_url(url: str) -> None:
    """As libpq reads it (several hosts and ports for fail-over included)."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        raise SettingsError(
            f"{PREFIX}DATABASE_URL cannot be read as a PostgreSQL URL; use "
            f"postgresql://user:password@host:5432/dbname and {_ENCODE_FIX}"
        ) from None
    if not all(_valid_port(port) for port in str(params.get("port") or "").split(",")):
        raise SettingsError(
            f"{PREFIX}DATABASE_URL: a port is not a number from 1 to 65535; use "
            f"postgresql://user:password@host:5432/dbname and {_ENCODE_FIX}"
        )


def _check_redis_url(url: str) -> None:
    fix = f"use redis://:password@host:6379/0 and {_ENCODE_FIX}"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (reading the port is the check)
    except ValueError:
        raise SettingsError(f"{PREFIX}REDIS_URL: the host or port cannot be read; {fix}") from None
    if parts.scheme not in {"redis", "rediss"}:
        raise SettingsError(f"{PREFIX}REDIS_URL: the scheme must be redis or rediss; {fix}")
    database = parts.path.strip("/")
    if database and not database.isdigit():
        raise SettingsError(f"{PREFIX}REDIS_URL: the database (after the /) is not a number; {fix}")


def _valid_port(port: str) -> bool:
    return not port or (port.isdigit() and 1 <= int(port) <= 65535)  # noqa: PLR2004


_HOST_NAME = re.compile(
    r"^(?=.{1,253}$)[a-z0-9_]([a-z0-9_-]{0,62})(\.[a-z0-9_-]{1,63})*\.?$", re.IGNORECASE
)


def _network(entry: str) -> bool:
    try:
        ipaddress.ip_network(entry.strip("[]"), strict=False)
    except ValueError:
        return False
    return True


def _allowable(entry: str) -> bool:
    """A host name, an address or a network, as the webhook handler's allow list takes."""
    return _network(entry) or ("/" not in entry and _HOST_NAME.match(entry) is not None)
