"""One frozen settings object, read from ``JOBLEDGER_*`` variables and CLI flags."""

from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec

from jobledger.runtime.errors import SettingsError

PREFIX = "JOBLEDGER_"
MAX_WRITER_BATCH = 10_000
MAX_WRITER_DELAY_MS = 10_000
_SECRET_FIELDS = frozenset({"database_url", "redis_url"})


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Every setting; each field ``x`` is read from ``JOBLEDGER_X``."""

    data_dir: str = ".jobledger"
    database_url: str = ""
    redis_url: str = ""
    database_pool_size: int = 5
    writer_max_batch: int = 100
    writer_max_delay_ms: float = 5.0
    max_payload_bytes: int = 64 * 1024
    min_interval_seconds: float = 60.0
    log_level: str = "info"
    log_format: str = "console"

    @property
    def uses_postgres(self) -> bool:
        return bool(self.database_url) and not self.database_url.startswith("sqlite:")

    @property
    def sqlite_path(self) -> Path:
        if self.database_url.startswith("sqlite:"):
            return Path(urlsplit(self.database_url).path)
        return Path(self.data_dir) / "events.sqlite3"

    def masked(self) -> dict[str, Any]:
        """The effective settings with secrets in URLs replaced by ``***``."""
        shown = msgspec.structs.asdict(self)
        for name in _SECRET_FIELDS:
            shown[name] = mask_url(shown[name])
        return shown


def mask_url(url: str) -> str:
    parts = urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return parts._replace(netloc=netloc).geturl()


def load_settings(environ: Mapping[str, str], **overrides: str | float | None) -> Settings:
    """Settings from the environment, then overrides (CLI flags) on top."""
    values: dict[str, Any] = {}
    for name in Settings.__struct_fields__:
        variable = PREFIX + name.upper()
        if variable in environ:
            values[name] = environ[variable]
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        settings = msgspec.convert(values, Settings, strict=False)
    except msgspec.ValidationError as error:
        raise SettingsError(_explain(error)) from None
    _check(settings)
    return settings


def _explain(error: msgspec.ValidationError) -> str:
    # msgspec names the path as `$.field`; turn it into the variable a user sets.
    text = str(error)
    if "$." in text:
        field = text.rsplit("$.", 1)[1].split("[", maxsplit=1)[0].strip("` ")
        problem = text.split(" - ", maxsplit=1)[0]
        return f"{PREFIX}{field.upper()}: {problem}; set it to a valid value"
    return text


def _check(settings: Settings) -> None:
    if settings.database_url:
        scheme = urlsplit(settings.database_url).scheme
        if scheme not in {"postgresql", "postgres", "sqlite"}:
            raise SettingsError(
                f"{PREFIX}DATABASE_URL: scheme {scheme!r} is not supported; use "
                "postgresql://user:password@host:5432/dbname or sqlite:///path/to/events.sqlite3"
            )
    if settings.redis_url and urlsplit(settings.redis_url).scheme not in {"redis", "rediss"}:
        raise SettingsError(f"{PREFIX}REDIS_URL: use redis://host:6379/0")
    if not 1 <= settings.writer_max_batch <= MAX_WRITER_BATCH:
        raise SettingsError(f"{PREFIX}WRITER_MAX_BATCH: use a number from 1 to {MAX_WRITER_BATCH}")
    if not 0 <= settings.writer_max_delay_ms <= MAX_WRITER_DELAY_MS:
        raise SettingsError(f"{PREFIX}WRITER_MAX_DELAY_MS: use 0 to {MAX_WRITER_DELAY_MS} ms")
    if settings.database_pool_size < 1:
        raise SettingsError(f"{PREFIX}DATABASE_POOL_SIZE: use 1 or more")
    if settings.log_format not in {"console", "json"}:
        raise SettingsError(f"{PREFIX}LOG_FORMAT: use console or json")
    if settings.log_level.lower() not in {"debug", "info", "warning", "error"}:
        raise SettingsError(f"{PREFIX}LOG_LEVEL: use debug, info, warning or error")
    if settings.min_interval_seconds < 60:  # noqa: PLR2004 (5-field cron granularity)
        raise SettingsError(f"{PREFIX}MIN_INTERVAL_SECONDS: use 60 or more")
