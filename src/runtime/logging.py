"""Structured logs: a stable event name plus the ids it concerns, never secrets."""

import logging
import sys

import structlog

from jobledger.runtime.settings import Settings

_SECRET_KEYS = frozenset({"password", "token", "secret", "authorization", "cookie"})


def _redact(
    _logger: object, _method: str, event_dict: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    for key in event_dict:
        if any(secret in key.lower() for secret in _SECRET_KEYS):
            event_dict[key] = "***"
    return event_dict


def configure_logging(settings: Settings) -> None:
    """JSON lines in production (``log_format=json``), readable lines otherwise."""
    level = logging.getLevelNamesMapping().get(settings.log_level.upper(), logging.INFO)
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if settings.log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _redact,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
