"""Structured logs: a stable event name plus the ids it concerns, never secrets."""

import logging
import sys
from collections.abc import Mapping
from typing import Any, TextIO

import structlog

from jobledger.infra.progress import end_progress_line
from jobledger.infra.settings import AUTH_VALUE, Settings, mask_url

_SECRET_KEYS = frozenset({"password", "token", "secret", "authorization", "cookie"})
_MAX_DEPTH = 6


def redact_text(text: str) -> str:
    """``text`` with passwords in URLs and Bearer or Basic credentials as ``***``."""
    return AUTH_VALUE.sub(r"\g<head>***", mask_url(text))


def redact(value: object, depth: int = 0) -> object:
    """``value`` with its secrets masked: strings by their text, mappings by their keys
    too, sequences item by item, exceptions by their message; anything else as is."""
    if isinstance(value, str):
        return redact_text(value)
    if depth >= _MAX_DEPTH:
        return value
    if isinstance(value, Mapping):
        return {
            key: "***" if _secret_key(key) else redact(item, depth + 1)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        return [redact(item, depth + 1) for item in value]
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {redact_text(str(value))}"
    return value


def _secret_key(key: object) -> bool:
    return isinstance(key, str) and any(secret in key.lower() for secret in _SECRET_KEYS)


def _redact(
    _logger: object, _method: str, event_dict: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    for key, value in event_dict.items():
        if key == "exc_info":
            continue  # rendered (and then redacted) by the processors after this one
        event_dict[key] = "***" if _secret_key(key) else redact(value)
    return event_dict


def _redact_rendered(_logger: object, _method: str, line: Any) -> str:  # noqa: ANN401 (after the renderer the event is its text)
    # The readable renderer writes tracebacks itself, after the fields were redacted.
    return redact_text(line)


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
        end_progress_line,  # an entry never continues a progress bar's open line
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    rendering: list[structlog.typing.Processor]
    if uses_json(settings):
        # A traceback becomes one "exception" field, so an entry stays one line.
        rendering = [structlog.processors.format_exc_info, _redact]
        rendering.append(structlog.processors.JSONRenderer())
    else:
        # Plain tracebacks: no local variables (they may hold secrets), and one URL per
        # line, so the rendered text can be redacted.
        console = structlog.dev.ConsoleRenderer(
            colors=False, exception_formatter=structlog.dev.plain_traceback
        )
        rendering = [_redact, console, _redact_rendered]
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
