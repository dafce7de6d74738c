"""Structured logs: a stable event name plus the ids it concerns, never secrets."""

import logging
import re
import sys
from typing import TextIO

import structlog

from jobledger.runtime.settings import Settings

_SECRET_KEYS = frozenset({"password", "token", "secret", "authorization", "cookie"})
# A password inside a URL (postgresql://user:pw@host) or a credential after an auth
# scheme: an error text from a driver may quote either.
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@\s]+@", re.IGNORECASE)
# Case-sensitive, as HTTP writes the schemes, so prose like "a basic check" stays.
_AUTH_VALUE = re.compile(r"\b(?P<head>(?:Bearer|Basic)\s+)[A-Za-z0-9._~+/=-]{8,}")


def redact_text(text: str) -> str:
    """``text`` with passwords in URLs and Bearer or Basic credentials as ``***``."""
    if "://" in text:
        text = _URL_PASSWORD.sub(r"\g<head>***@", text)
    return _AUTH_VALUE.sub(r"\g<head>***", text)


def _redact(
    _logger: object, _method: str, event_dict: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    for key, value in event_dict.items():
        if any(secret in key.lower() for secret in _SECRET_KEYS):
            event_dict[key] = "***"
        elif isinstance(value, str):
            event_dict[key] = redact_text(value)
    return event_dict


def uses_json(settings: Settings) -> bool:
    """JSON lines unless asked otherwise: ``auto`` means readable lines only in dev."""
    if settings.log_format == "auto":
        return settings.mode != "dev"
    return settings.log_format == "json"


def configure_logging(settings: Settings) -> None:
    """JSON lines in production, readable lines in dev (``JOBLEDGER_LOG_FORMAT``); the
    standard library's records (uvicorn, drivers) go out in the same format."""
    level = logging.getLevelNamesMapping().get(settings.log_level.upper(), logging.INFO)
    stamps: list[structlog.typing.Processor] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    rendering: list[structlog.typing.Processor]
    if uses_json(settings):
        # A traceback becomes one "exception" field, so an entry stays one line.
        rendering = [structlog.processors.format_exc_info, _redact]
        rendering.append(structlog.processors.JSONRenderer())
    else:
        rendering = [_redact, structlog.dev.ConsoleRenderer(colors=False)]
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, *stamps, *rendering],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    _route_standard_logging(level, [structlog.stdlib.add_logger_name, *stamps], rendering)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time of the record."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        return


def _route_standard_logging(
    level: int,
    pre_chain: list[structlog.typing.Processor],
    rendering: list[structlog.typing.Processor],
) -> None:
    handler = _StderrHandler()
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=pre_chain,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *rendering],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    # Libraries report each request at info (httpx); their warnings are what matters.
    root.setLevel(max(level, logging.WARNING))
