"""Structured logs: a stable event name plus the ids it concerns, never secrets."""

import logging
import sys
import traceback
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any, TextIO

import structlog

from jobledger.infra.progress import end_progress_line
from jobledger.infra.settings import AUTH_VALUE, Settings, mask_url

_SECRET_KEYS = frozenset({"password", "token", "secret", "authorization", "cookie"})
_MAX_DEPTH = 6

AttemptSink = Callable[[str, str, dict[str, Any]], None]  # (level, message, fields)
# Where the lines of the handler running in this context also go (ADR 104): set by the
# worker around a handler's call, so a line is the attempt's whatever logger wrote it.
ATTEMPT_SINK: ContextVar[AttemptSink | None] = ContextVar("attempt_sink", default=None)
# What every structlog entry carries besides the fields its caller gave.
_ENTRY_KEYS = frozenset({"event", "level", "timestamp", "exc_info", "logger"})


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
    # exc_info is rendered (and then redacted) by the processors after this one.
    event_dict.update(_redacted_fields({k: v for k, v in event_dict.items() if k != "exc_info"}))
    return event_dict


def _to_attempt(
    _logger: object, _method: str, event_dict: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    """A handler's line, redacted, to its attempt's sink too (when one is set)."""
    sink = ATTEMPT_SINK.get()
    if sink is None:
        return event_dict
    fields = {k: v for k, v in event_dict.items() if k not in _ENTRY_KEYS}
    shown = exception_text(event_dict.get("exc_info"))
    if shown is not None:
        fields["exception"] = shown
    level = str(event_dict.get("level", _method))
    sink(level, redact_text(str(event_dict.get("event", ""))), _redacted_fields(fields))
    return event_dict


def _redacted_fields(fields: dict[str, Any]) -> dict[str, Any]:
    return {key: "***" if _secret_key(key) else redact(value) for key, value in fields.items()}


def exception_text(exc_info: object) -> str | None:
    """A traceback as text (plain, no local variables), redacted; None without one."""
    if not exc_info:
        return None
    if exc_info is True:
        exc_info = sys.exc_info()
    if isinstance(exc_info, BaseException):
        exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
    if not isinstance(exc_info, tuple) or exc_info[0] is None:
        return None
    return redact_text("".join(traceback.format_exception(*exc_info)))


class _AttemptHandler(logging.Handler):
    """Standard logging records, at info or above, to the running attempt's sink."""

    def emit(self, record: logging.LogRecord) -> None:
        sink = ATTEMPT_SINK.get()
        if sink is None:
            return
        fields: dict[str, Any] = {"logger": record.name}
        shown = exception_text(record.exc_info)
        if shown is not None:
            fields["exception"] = shown
        sink(record.levelname.lower(), redact_text(record.getMessage()), fields)


def capture_attempt_lines() -> None:
    """Let a worker's handlers' standard logging records reach their attempts (info and
    above; stderr still shows foreign records from warning on). structlog lines reach
    them through the processor ``configure_logging`` installs."""
    processors = list(structlog.get_config()["processors"])
    if _to_attempt not in processors:
        # structlog as someone else configured it (a program that runs a worker in its
        # own process): the step goes just before the renderer, which comes last.
        processors.insert(max(len(processors) - 1, 0), _to_attempt)
        structlog.configure(processors=processors)
    root = logging.getLogger()
    if not any(isinstance(h, _AttemptHandler) for h in root.handlers):
        handler = _AttemptHandler(logging.INFO)
        root.addHandler(handler)
    for stderr in (h for h in root.handlers if isinstance(h, _StderrHandler)):
        stderr.setLevel(max(root.level, stderr.level))
    root.setLevel(min(root.level, logging.INFO))


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
        processors=[structlog.contextvars.merge_contextvars, *stamps, _to_attempt, *rendering],
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
