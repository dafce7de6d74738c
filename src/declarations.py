"""Handlers and schedules declared in application code: ``@jobledger.handler`` and
``@jobledger.periodic``.

A module declares its handlers and their schedules beside each other::

    import msgspec
    import jobledger

    class Invoices(msgspec.Struct):
        month: str
        dry_run: bool = False

    @jobledger.periodic("0 6 1 * *", tz="Europe/Berlin", key="billing.monthly",
                        payload=Invoices(month="previous"))
    @jobledger.handler("billing.send_invoices")
    def send_invoices(payload: Invoices) -> dict[str, int]:
        ...

Nothing here runs anything or talks to a server: a declaration is a value. Workers
and the API load a module's declarations from ``JOBLEDGER_HANDLERS`` (the module's
name); ``jobledger apply --module`` turns its schedules into job definitions. This
module imports msgspec and the shared bodies only, so importing a jobs module costs
what importing msgspec does.
"""

import functools
import importlib
import inspect
import re
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Generic, ParamSpec, TypeVar, get_type_hints

import msgspec

from jobledger.domain.json_values import UNREADABLE, error_line
from jobledger.domain.policies import DEFAULT_PRIORITY, MisfirePolicy, OverlapPolicy
from jobledger.schemas.fields import Strict
from jobledger.schemas.jobs import CronIn, ManagedJobIn, RetryIn
from jobledger.schemas.notifications import NamedRuleIn

P = ParamSpec("P")
R = TypeVar("R")

# A handler's parameter by this name gets the run's context (execution id, attempt,
# cancellation signal, logger).
CONTEXT_NAMES = frozenset({"ctx", "context"})


class DeclarationError(ValueError):
    """A handler or schedule declared in a way that cannot work; says how to fix it."""


@dataclass(frozen=True)
class HandlerDeclaration(Generic[P, R]):
    """A function registered as a handler under ``name``. Calling it calls the function.

    ``payload_type`` is the msgspec Struct its payload parameter is annotated with: the
    API checks payloads against it when a job or run is created, and the worker hands
    the function the decoded struct. ``schedules`` are its ``@periodic`` jobs.
    """

    name: str
    function: Callable[P, R]
    payload_type: type[msgspec.Struct] | None = None
    payload_parameter: str | None = None
    context_parameter: str | None = None
    schedules: tuple[ManagedJobIn, ...] = ()
    description: str = ""
    is_async: bool = field(default=False)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.function(*args, **kwargs)

    def arguments(self, payload: object, context: object) -> dict[str, object]:
        """The keyword arguments of one call: the payload (decoded) and the context, as
        the function's parameters ask for them."""
        given: dict[str, object] = {}
        if self.payload_parameter is not None:
            given[self.payload_parameter] = payload
        if self.context_parameter is not None:
            given[self.context_parameter] = context
        return given


def handler(name: str) -> Callable[[Callable[P, R]], HandlerDeclaration[P, R]]:
    """Register the decorated function (async or plain) as the handler ``name``.

    The function takes its payload as its first parameter (other than a context): a
    msgspec Struct subclass is checked and decoded, a ``dict`` (or no annotation) is
    passed as it is, and no parameter means the handler takes no payload. A parameter
    named ``ctx`` or ``context`` gets the run's context. A plain function runs in a
    thread of the worker, so it may block; an async one runs on the worker's loop.
    It returns a dict, a Struct, None, or any JSON value (stored as ``{"value": ...}``).
    """

    def register(function: Callable[P, R]) -> HandlerDeclaration[P, R]:
        if isinstance(function, HandlerDeclaration):
            raise DeclarationError(f"{function.name!r} is a handler already; declare it once")
        payload, payload_type, context = _parameters(name, function)
        doc = inspect.getdoc(function) or ""
        return HandlerDeclaration(
            name=name,
            function=function,
            payload_type=payload_type,
            payload_parameter=payload,
            context_parameter=context,
            description=doc.split("\n\n", 1)[0].replace("\n", " "),
            is_async=inspect.iscoroutinefunction(function),
        )

    return register


def _parameters(
    name: str, function: Callable[..., object]
) -> tuple[str | None, type[msgspec.Struct] | None, str | None]:
    """(the payload parameter, its Struct type, the context parameter) of ``function``."""
    try:
        hints = get_type_hints(function)
    except (NameError, TypeError) as error:
        raise DeclarationError(
            f"handler {name!r}: its annotations do not resolve ({error}); import the payload "
            "type in the handler's module (not only under TYPE_CHECKING)"
        ) from None
    payload: str | None = None
    context: str | None = None
    for parameter in inspect.signature(function).parameters.values():
        if parameter.name in CONTEXT_NAMES:
            context = parameter.name
        elif payload is None:
            payload = parameter.name
        elif parameter.default is inspect.Parameter.empty:
            raise DeclarationError(
                f"handler {name!r}: parameter {parameter.name!r} has no value to get; a "
                "handler takes its payload and, named ctx, the run's context"
            )
    wanted = hints.get(payload) if payload else None
    struct = wanted if isinstance(wanted, type) and issubclass(wanted, msgspec.Struct) else None
    return payload, struct, context


def periodic(
    cron: str,
    *,
    tz: str = "UTC",
    key: str | None = None,
    name: str | None = None,
    payload: msgspec.Struct | Mapping[str, Any] | None = None,
    overlap: OverlapPolicy | str = OverlapPolicy.ALLOW,
    misfire: MisfirePolicy | str = MisfirePolicy.FIRE_ONCE,
    queue: str = "default",
    priority: int = DEFAULT_PRIORITY,
    timeout_seconds: float = 300.0,
    max_retries: int = 3,
    description: str = "",
) -> Callable[[HandlerDeclaration[P, R]], HandlerDeclaration[P, R]]:
    """Run the decorated handler on a 5-field ``cron`` in the zone ``tz``, as the job
    with the stable ``key`` (default: the handler's name). Put it above
    ``@jobledger.handler``; stack several for several schedules (each its own key).
    ``jobledger apply`` creates, updates or (with ``--prune``) deletes the jobs."""
    overlap_policy = _choice(OverlapPolicy, overlap, "overlap")
    misfire_policy = _choice(MisfirePolicy, misfire, "misfire")
    body = msgspec.to_builtins(payload) if payload is not None else {}
    if not isinstance(body, dict):
        raise DeclarationError("periodic: payload is not an object; give a Struct or a dict")

    def schedule(declared: HandlerDeclaration[P, R]) -> HandlerDeclaration[P, R]:
        if not isinstance(declared, HandlerDeclaration):
            raise DeclarationError(
                "@jobledger.periodic goes above @jobledger.handler(...), on a handler"
            )
        job_key = key or declared.name
        job = ManagedJobIn(
            key=job_key,
            name=name or job_key,
            handler=declared.name,
            payload=body,
            queue=queue,
            priority=priority,
            timeout_seconds=timeout_seconds,
            retry=RetryIn(max_retries=max_retries),
            schedule=CronIn(cron=cron, timezone=tz),
            overlap=overlap_policy,
            misfire=misfire_policy,
            description=description or declared.description,
        )
        # Decorators apply bottom-up: keep the schedules in the order they are written.
        return replace(declared, schedules=(job, *declared.schedules))

    return schedule


def _choice(kind: type[OverlapPolicy] | type[MisfirePolicy], value: str, what: str) -> Any:  # noqa: ANN401 (the policy of that kind)
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(member.value for member in kind)
        raise DeclarationError(f"periodic: {what}={value!r}; use one of {allowed}") from None


@dataclass(frozen=True)
class Declared:
    """What one or more modules declare: handlers by name, and the jobs of their
    schedules by key."""

    handlers: dict[str, HandlerDeclaration[..., Any]] = field(default_factory=dict)
    jobs: dict[str, ManagedJobIn] = field(default_factory=dict)

    def add(self, declaration: HandlerDeclaration[..., Any], where: str) -> None:
        known = self.handlers.get(declaration.name)
        if known is not None and known.function is not declaration.function:
            raise DeclarationError(
                f"{where}: two handlers are named {declaration.name!r}; give each its own name"
            )
        self.handlers[declaration.name] = declaration
        for job in declaration.schedules:
            self.add_job(job, where)

    def add_job(self, job: ManagedJobIn, where: str) -> None:
        known = self.jobs.get(job.key)
        if known is not None and known != job:
            raise DeclarationError(
                f"{where}: two schedules have the key {job.key!r}; give each its own key="
            )
        self.jobs[job.key] = job


def declared_in(*modules: types.ModuleType) -> Declared:
    """Every handler (and its schedules) that these modules hold at their top level,
    their own and those they import."""
    found = Declared()
    for module in modules:
        for declaration in _handlers_of(module):
            found.add(declaration, module.__name__)
    return found


def _handlers_of(module: types.ModuleType) -> Iterator[HandlerDeclaration[..., Any]]:
    for value in vars(module).values():
        if isinstance(value, HandlerDeclaration):
            yield value


@functools.cache
def payload_schema(payload_type: type[msgspec.Struct]) -> dict[str, Any]:
    """The JSON schema of a payload struct (definitions inline under ``$defs``)."""
    return msgspec.json.schema(payload_type)


# ---- loading the jobs to apply ---------------------------------------------------------


class JobsFile(Strict):
    """A TOML file of jobs to apply: ``[[jobs]]`` tables, each a job definition as the
    API takes it, with its ``key``; and ``[[notifications]]`` tables, each a notification
    rule as the API takes it, with its ``name``."""

    jobs: list[ManagedJobIn] = msgspec.field(default_factory=list)
    notifications: list[NamedRuleIn] = msgspec.field(default_factory=list)


def jobs_of_module(name: str) -> list[ManagedJobIn]:
    """The jobs a module (and what it imports at its top level) declares with
    ``@jobledger.periodic``; the current folder is searched first, as ``python -m``
    does."""
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        module = importlib.import_module(name)
    except Exception as error:  # noqa: BLE001 (any failure to import is the module's)
        raise DeclarationError(
            f"cannot import module {name!r} ({type(error).__name__}: {error}); run from the "
            "folder that holds it, or install it"
        ) from None
    return list(declared_in(module).jobs.values())


_AT = re.compile(r" - at `\$\.jobs\[(?P<index>\d+)\](?P<path>[^`]*)`$")


def jobs_of_file(path: Path) -> list[ManagedJobIn]:
    """The jobs of a TOML jobs file (see ``read_jobs_file``)."""
    return read_jobs_file(path).jobs


def read_jobs_file(path: Path) -> JobsFile:
    """A TOML jobs file; a job that does not fit is named by its index and key, with
    the field."""
    try:
        text = path.read_bytes()
    except OSError as error:
        raise DeclarationError(f"cannot read {path}: {error.strerror}") from None
    try:
        declared = msgspec.toml.decode(text, type=JobsFile)
    except msgspec.ValidationError as error:
        raise DeclarationError(f"{path}: {_where(str(error), text)}") from None
    except UNREADABLE as error:
        # Malformed, a number past what Python converts, or nested past its depth.
        raise DeclarationError(
            f"{path} is not TOML jobledger can read ({error_line(error, max_chars=500)})"
        ) from None
    found = Declared()
    for job in declared.jobs:
        found.add_job(job, str(path))
    return declared


def _where(message: str, text: bytes) -> str:
    """msgspec's "... - at `$.jobs[1].schedule.cron`" as "jobs[1] (its key).schedule.cron: ..."."""
    at = _AT.search(message)
    if at is None:
        return message
    index = int(at["index"])
    raw = msgspec.toml.decode(text).get("jobs", [])
    key = raw[index].get("key") if index < len(raw) and isinstance(raw[index], dict) else None
    job = f"jobs[{index}]" + (f" ({key})" if key else "")
    return f"{job}{at['path']}: {message[: at.start()]}"
