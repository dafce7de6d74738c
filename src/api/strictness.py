"""Requests are read as strictly as they are documented.

Litestar converts query values and bodies with msgspec's lenient mode, which serves
query strings (all text) but also takes ``"priority": "5"`` as 5, ``1`` as a flag and
``?since=1700000000`` as seconds since 1970; and it ignores query parameters a route
does not take, so ``?stauts=failed`` lists everything. This guard, run on every API
route after the role guard, refuses each of those with a 400 naming the field:

- a body that only decodes leniently (a number or a flag sent as another type); other
  body errors are left to Litestar's own messages, which already name the field;
- a query parameter the route does not take, or one given twice that takes one value;
- a time given as a bare number.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any, get_args

import msgspec
from litestar import Request
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from litestar.status_codes import HTTP_400_BAD_REQUEST
from litestar.types import Empty
from litestar.utils.scope.state import ScopeState

from jobledger.api.errors import SCHEMA_FIX, ApiError, problem_and_place

_TIME_FIX = "use an ISO 8601 time with an offset, e.g. 2026-11-29T10:00:00Z"


@dataclass(frozen=True)
class _Shape:
    """What a route reads from a request: its query parameters (by the name a client
    sends: whether each takes many values, whether it is a time) and its body type."""

    query: dict[str, tuple[bool, bool]]
    body: Any  # the body's type, or None


# By route handler; the handler is kept with its shape so that its id is not reused.
_SHAPES: dict[int, tuple[BaseRouteHandler, _Shape]] = {}


async def strict_request(
    connection: ASGIConnection[Any, Any, Any, Any], route_handler: BaseRouteHandler
) -> None:
    """An app-wide guard: refuse what the route's documented types do not admit."""
    if not connection.scope.get("path", "").startswith("/api/"):
        return  # pages ignore what they do not use, as browsers expect; /schema, /health
    shape = _shape_of(connection, route_handler)
    _check_query(connection, shape)
    if shape.body is not None and isinstance(connection, Request):
        decoded = _check_body(await connection.body(), shape.body)
        if decoded is not Empty:
            # Litestar reads a body as JSON once a request and then converts it to the
            # route's type: handed the value the strict read made, it decodes nothing
            # again and its conversion returns the value as it is (a batch of 1,000
            # runs was decoded three times).
            ScopeState.from_scope(connection.scope).json = decoded


def _shape_of(
    connection: ASGIConnection[Any, Any, Any, Any], route_handler: BaseRouteHandler
) -> _Shape:
    known = _SHAPES.get(id(route_handler))
    if known is None or known[0] is not route_handler:
        known = _SHAPES[id(route_handler)] = (route_handler, _read_shape(connection, route_handler))
    return known[1]


def _read_shape(
    connection: ASGIConnection[Any, Any, Any, Any], route_handler: BaseRouteHandler
) -> _Shape:
    # Only the names of the path parameters count here: they are not query parameters.
    path: dict[str, Any] = connection.scope["path_params"]
    model = route_handler.create_kwargs_model(path_parameters=path)
    parameters = route_handler.parsed_fn_signature.parameters
    query = {
        p.field_alias: (p.is_sequence, _is_time(parameters[p.field_name].annotation))
        for p in model.expected_query_params
    }
    data = parameters.get("data")
    return _Shape(query, None if data is None else data.annotation)


def _is_time(annotation: Any) -> bool:  # noqa: ANN401 (any annotation)
    return annotation is datetime or datetime in get_args(annotation)


def _check_query(connection: ASGIConnection[Any, Any, Any, Any], shape: _Shape) -> None:
    params = connection.query_params
    for name in params:
        if name not in shape.query:
            takes = ", ".join(sorted(shape.query)) or "none"
            raise ApiError(
                HTTP_400_BAD_REQUEST,
                f"{name}: this route takes no such query parameter",
                field=name,
                fix=f"leave it out; the query parameters it takes: {takes}",
            )
        many, time = shape.query[name]
        values = params.getall(name)
        if len(values) > 1 and not many:
            raise ApiError(
                HTTP_400_BAD_REQUEST,
                f"{name}: given {len(values)} times, but it takes one value",
                field=name,
                fix="give it once",
            )
        if time and any(_is_number(v) for v in values):
            raise ApiError(
                HTTP_400_BAD_REQUEST,
                f"{name}: a bare number is not a time",
                field=name,
                fix=_TIME_FIX,
            )


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _check_body(body: bytes, kind: Any) -> Any:  # noqa: ANN401 (the body's declared type)
    """The body read as ``kind``, strictly; ``Empty`` if it is empty or Litestar's own
    reading should answer (it names the field)."""
    if not body.strip():
        return Empty
    try:
        return msgspec.json.decode(body, type=kind, strict=True)
    except msgspec.ValidationError as strict:
        try:
            msgspec.json.decode(body, type=kind, strict=False)
        except msgspec.MsgspecError:
            return Empty  # wrong either way: Litestar's own answer names the field
        raise _coerced(strict) from None
    except msgspec.MsgspecError:
        return Empty  # not JSON, or too deep: Litestar's own answer says so


def _coerced(error: msgspec.ValidationError) -> ApiError:
    """A value that only reads as its type when converted (text as a number, a number
    as a flag), named by its path in the body."""
    problem, place = problem_and_place(str(error))
    path = (place or "").lstrip(".")
    if not path:
        return ApiError(HTTP_400_BAD_REQUEST, f"body: {problem}", field="body", fix=SCHEMA_FIX)
    return ApiError(
        HTTP_400_BAD_REQUEST,
        f"{path}: {problem}",
        field=path,
        fix=f"send {path} as the type the schema gives, not as text or a number for it",
    )
