"""Finding handlers by name: built in, entry points, dotted paths and modules of
declared handlers from the settings."""

import importlib
import inspect
import json
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from jobledger.declarations import HandlerDeclaration, declared_in
from jobledger.infra.errors import SettingsError
from jobledger.projections.queue.backend import QueueBackend
from jobledger.projections.read_models.tables import ReadModelTables
from jobledger.runtime.handlers.archive import NAME as ARCHIVE
from jobledger.runtime.handlers.archive import ArchiveRun, make_archive_handler
from jobledger.runtime.handlers.base import Handler
from jobledger.runtime.handlers.builtin import BUILTIN
from jobledger.runtime.handlers.cleanup import NAME as CLEANUP
from jobledger.runtime.handlers.cleanup import make_cleanup_handler
from jobledger.runtime.handlers.code import code_handler
from jobledger.runtime.handlers.notify import NAME as NOTIFY
from jobledger.runtime.handlers.notify import NotifySettings, make_notify_handler
from jobledger.runtime.handlers.shell import NAME as SHELL
from jobledger.runtime.handlers.shell import ShellSettings, make_shell_handler
from jobledger.runtime.handlers.webhook import NAME as WEBHOOK
from jobledger.runtime.handlers.webhook import WebhookSettings, make_webhook_handler
from jobledger.services.jobs import HandlerInfo

ENTRY_POINT_GROUP = "jobledger.handlers"
TEST_HANDLERS_SETTING = "JOBLEDGER_TEST_HANDLERS"


class HandlerRegistry:
    def __init__(
        self, handlers: Mapping[str, Handler], info: Mapping[str, HandlerInfo] | None = None
    ) -> None:
        self._handlers = dict(handlers)
        self._info = dict(info or {})

    def get(self, name: str) -> Handler | None:
        return self._handlers.get(name)

    def names(self) -> list[str]:
        return sorted(self._handlers)

    def info(self, name: str) -> HandlerInfo:
        """What ``name`` declares; for a handler that declares nothing, its doc's first line."""
        known = self._info.get(name)
        if known is not None:
            return known
        doc = inspect.getdoc(self._handlers[name]) or ""
        return HandlerInfo(description=doc.split("\n\n", 1)[0].replace("\n", " "))


def unknown_handler_fix(name: str, known: Iterable[str]) -> str:
    """How to fix a job that names a handler this deployment does not have: a built-in
    test handler while they are off, or a name that is none of the known ones."""
    if name in BUILTIN:
        return (
            f"{name!r} is a test handler, off in production mode; set "
            f"{TEST_HANDLERS_SETTING}=true on the API and the workers to turn the test "
            "handlers on (test.crash ends the worker that runs it)"
        )
    return f"use one of: {', '.join(sorted(known))}"


def missing_handler_error(name: str) -> str:
    """A run's error when its worker has no handler ``name``. A run enqueued while the
    test handlers were on can reach a worker started with them off."""
    error = f"no handler named {name!r}"
    if name in BUILTIN:
        return (
            f"{error}: the test handlers are off on this worker; set "
            f"{TEST_HANDLERS_SETTING}=true on the workers to run it, or cancel the run"
        )
    return error


def load_registry(
    dotted: tuple[str, ...] = (),
    *,
    webhook: WebhookSettings = WebhookSettings(),  # noqa: B008 (frozen)
    shell: ShellSettings | None = None,
    notify: NotifySettings | None = None,
    queue: QueueBackend | None = None,
    read_models: ReadModelTables | None = None,
    test_handlers: bool = False,
    archive: Callable[[], ArchiveRun | None] | None = None,
) -> HandlerRegistry:
    """Built-ins, then entry points, then ``name=module:attr`` pairs (``JOBLEDGER_HANDLERS``).
    The ``test.*`` built-ins only with ``test_handlers``: ``test.crash`` lets whoever
    may start a run end a worker."""
    handlers: dict[str, Handler] = dict(BUILTIN) if test_handlers else {}
    handlers[WEBHOOK] = make_webhook_handler(webhook)
    # Without a mail server or secrets it still exists: those channels fail, saying why.
    handlers[NOTIFY] = make_notify_handler(notify or NotifySettings(), webhook)
    # Without an allowlist the shell handler still exists, and refuses with a clear error.
    handlers[SHELL] = make_shell_handler(shell or ShellSettings(commands={}))
    if queue is not None:
        handlers[CLEANUP] = make_cleanup_handler(queue, read_models)
    if archive is not None:
        handlers[ARCHIVE] = make_archive_handler(archive)
    for point in entry_points(group=ENTRY_POINT_GROUP):
        handlers[point.name] = _load_entry_point(point)
    info: dict[str, HandlerInfo] = {}
    for entry in dotted:
        if "=" not in entry:
            for declaration in _declared(entry.strip()):
                handlers[declaration.name] = code_handler(declaration)
                info[declaration.name] = _info_of(declaration)
            continue
        name, _, path = entry.partition("=")
        handler = _import(name.strip(), path.strip())
        if isinstance(handler, HandlerDeclaration):
            info[name.strip()] = _info_of(handler)
            handler = code_handler(handler)
        handlers[name.strip()] = handler
    return HandlerRegistry(handlers, info)


def _info_of(declaration: HandlerDeclaration[..., Any]) -> HandlerInfo:
    return HandlerInfo(declaration.description, declaration.payload_type)


def _declared(module_name: str) -> list[HandlerDeclaration[..., Any]]:
    """Every handler a module declares with ``@jobledger.handler``."""
    module = _import_module(module_name)
    try:
        found = list(declared_in(module).handlers.values())
    except ValueError as error:
        raise SettingsError(f"JOBLEDGER_HANDLERS: module {module_name!r}: {error}") from None
    if not found:
        raise SettingsError(
            f"JOBLEDGER_HANDLERS: module {module_name!r} declares no handler; decorate its "
            'functions with @jobledger.handler("name"), or give name=module:function'
        )
    return found


def _importable(module_name: str) -> types.ModuleType:
    """The module, found in the current folder first, as uvicorn and celery look for an
    app's module and ``python -m`` does: handlers are the project's own code, run from
    its folder."""
    if "" not in sys.path:
        sys.path.insert(0, "")
    return importlib.import_module(module_name)


def _import_module(module_name: str) -> types.ModuleType:
    try:
        return _importable(module_name)
    except Exception as error:  # noqa: BLE001 (any failure to import is the setting's fault)
        raise SettingsError(
            f"JOBLEDGER_HANDLERS: cannot import module {module_name!r} "
            f"({type(error).__name__}: {error}); check that it is installed (or on "
            "PYTHONPATH) and imports without error"
        ) from None


def _load_entry_point(point: EntryPoint) -> Handler:
    try:
        handler: Handler = point.load()
    except Exception as error:  # noqa: BLE001 (any failure to import is the setting's fault)
        package = point.dist.name if point.dist is not None else "its package"
        raise SettingsError(
            f"handler {point.name!r} of the {ENTRY_POINT_GROUP!r} entry points "
            f"({point.value}) does not load ({type(error).__name__}: {error}); reinstall or fix "
            f"{package}, "
            "or uninstall it"
        ) from None
    return handler


def _import(name: str, path: str) -> Handler:
    module_name, _, attribute = path.partition(":")
    if not (name and module_name and attribute):
        raise SettingsError(
            f"JOBLEDGER_HANDLERS: {f'{name}={path}'.strip('=')!r} is not "
            "name=package.module:function; separate several with commas"
        )
    try:
        handler: Handler = getattr(_importable(module_name), attribute)
    except Exception as error:  # noqa: BLE001 (any failure to import is the setting's fault)
        raise SettingsError(
            f"JOBLEDGER_HANDLERS: cannot load handler {name!r} from {path!r} "
            f"({type(error).__name__}: {error}); "
            "check that the module is installed and defines that function"
        ) from None
    if not callable(handler):
        raise SettingsError(
            f"JOBLEDGER_HANDLERS: {path!r} is not a function; name an async function "
            "that takes a HandlerContext"
        )
    return handler


def shell_commands(text: str) -> dict[str, tuple[str, ...]]:
    """``JOBLEDGER_SHELL_COMMANDS``: a JSON object of named argv templates."""
    if not text.strip():
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise SettingsError(
            f"JOBLEDGER_SHELL_COMMANDS is not JSON ({error}); "
            'use e.g. {"greet": ["echo", "hello", "{name}"]}'
        ) from None
    if not isinstance(raw, dict):
        raise SettingsError('JOBLEDGER_SHELL_COMMANDS: use a JSON object, e.g. {"greet": ["echo"]}')
    return {
        str(name): tuple(argv) if isinstance(argv, list) else argv for name, argv in raw.items()
    }
