"""Handlers declared in application code (``@jobledger.handler``) as the worker runs
them: the payload decoded into the declared struct, a plain function on a thread of the
worker's handler pool, the return value as the run's result."""

import functools
from typing import Any

import msgspec

from jobledger.declarations import HandlerDeclaration
from jobledger.runtime.handlers.base import Handler, HandlerContext, PayloadRefusedError


def code_handler(declaration: HandlerDeclaration[..., Any]) -> Handler:
    """The worker's handler for ``declaration``."""

    async def run(context: HandlerContext) -> dict[str, Any]:
        payload = decoded_payload(declaration, context.payload)
        call = functools.partial(declaration.function, **declaration.arguments(payload, context))
        if declaration.is_async:
            value = await call()
        else:
            # Off the worker's loop: a blocking function holds a thread, not the loop.
            value = await context.in_thread(call)
        return as_result(value)

    run.__doc__ = declaration.description
    run.__name__ = declaration.function.__name__
    return run


def decoded_payload(declaration: HandlerDeclaration[..., Any], payload: dict[str, Any]) -> object:
    """The payload as the handler declared it. A payload its struct refuses (one
    enqueued before the struct changed) is this run's own error: the breaker ignores it."""
    if declaration.payload_type is None:
        return payload
    try:
        return msgspec.convert(payload, declaration.payload_type, strict=False)
    except msgspec.ValidationError as error:
        raise PayloadRefusedError(
            f"the payload does not fit {declaration.payload_type.__name__} ({error})"
        ) from None


def as_result(value: object) -> dict[str, Any]:
    """What a handler returned, as the run's stored result: an object (a dict or a
    Struct) as it is, None as {}, any other JSON value as {"value": ...}."""
    if value is None:
        return {}
    plain = msgspec.to_builtins(value)
    return plain if isinstance(plain, dict) else {"value": plain}
