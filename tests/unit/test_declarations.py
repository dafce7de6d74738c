"""Handlers and schedules declared in code: what the decorators record, and how the
worker calls a declared function."""

import asyncio
import threading
import types
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

import jobledger
from jobledger.declarations import DeclarationError, HandlerDeclaration, declared_in, jobs_of_file
from jobledger.domain.policies import MisfirePolicy, OverlapPolicy
from jobledger.runtime.handlers.base import HandlerContext, PayloadRefusedError
from jobledger.runtime.handlers.code import as_result, code_handler
from jobledger.schemas.jobs import CronIn


class Invoice(msgspec.Struct):
    customer: str
    amount: int = 0


def context(payload: dict[str, Any]) -> HandlerContext:
    return HandlerContext(
        execution_id=uuid.uuid4(),
        job_id=None,
        attempt=1,
        lease_deadline=datetime(2026, 12, 1, tzinfo=UTC),
        payload=payload,
    )


def test_a_handler_records_its_payload_struct_and_context() -> None:
    """If a function is declared a handler, then its payload parameter, the struct it
    is annotated with, its context parameter and its doc line are recorded, and calling
    it still calls the function."""

    @jobledger.handler("billing.send")
    def send(payload: Invoice, ctx: HandlerContext) -> str:
        """Sends one invoice.

        More text that is not the description."""
        del ctx
        return payload.customer

    assert isinstance(send, HandlerDeclaration)
    assert (send.name, send.payload_parameter, send.context_parameter) == (
        "billing.send",
        "payload",
        "ctx",
    )
    assert send.payload_type is Invoice
    assert send.description == "Sends one invoice."
    assert not send.is_async
    assert send(Invoice(customer="acme"), context({})) == "acme"


def test_a_handler_without_a_struct_takes_any_payload() -> None:
    """If a handler's payload is a dict, or it takes none, then no struct is declared."""

    @jobledger.handler("a.dict")
    async def plain(payload: dict[str, Any]) -> None:
        del payload

    @jobledger.handler("a.none")
    def nothing() -> None:
        pass

    assert (plain.payload_type, plain.is_async) == (None, True)
    assert (nothing.payload_parameter, nothing.context_parameter) == (None, None)


def test_a_parameter_with_nothing_to_fill_it_is_refused() -> None:
    """If a handler has a second required parameter, then declaring it fails saying
    what a handler takes."""
    with pytest.raises(DeclarationError, match="has no value to get"):

        @jobledger.handler("a.b")
        def two(payload: dict[str, Any], other: int) -> None:
            del payload, other


def test_periodic_declares_a_managed_job_beside_its_handler() -> None:
    """If schedules are stacked on a handler, then each is a job with its own key, in
    the order written, its payload as JSON, and the handler's doc as description."""

    @jobledger.periodic("0 6 1 * *", tz="Europe/Berlin", key="billing.monthly",
                        payload=Invoice(customer="all"), overlap="skip_if_running")  # fmt: skip
    @jobledger.periodic("0 6 * * 1", misfire=MisfirePolicy.SKIP)
    @jobledger.handler("billing.send")
    def send(payload: Invoice) -> None:
        """Sends the invoices."""
        del payload

    monthly, weekly = send.schedules
    assert (monthly.key, monthly.name, monthly.handler) == (
        "billing.monthly",
        "billing.monthly",
        "billing.send",
    )
    assert monthly.schedule == CronIn(cron="0 6 1 * *", timezone="Europe/Berlin")
    assert monthly.payload == {"customer": "all", "amount": 0}
    assert monthly.overlap is OverlapPolicy.SKIP_IF_RUNNING
    assert (weekly.key, weekly.misfire, weekly.description) == (
        "billing.send",
        MisfirePolicy.SKIP,
        "Sends the invoices.",
    )


def test_a_bad_schedule_declaration_says_how_to_fix_it() -> None:
    """If a policy is misspelled, or a schedule sits below its handler, then declaring
    fails naming the fix."""
    with pytest.raises(DeclarationError, match="overlap='sometimes'; use one of allow"):
        jobledger.periodic("* * * * *", overlap="sometimes")
    with pytest.raises(DeclarationError, match="goes above"):
        jobledger.periodic("* * * * *")(lambda: None)  # type: ignore[arg-type]


def test_a_module_with_two_schedules_of_one_key_is_refused() -> None:
    """If two schedules of a module share a key, then collecting them fails naming it."""

    @jobledger.periodic("0 1 * * *", key="same")
    @jobledger.handler("a.one")
    def one() -> None:
        pass

    @jobledger.periodic("0 2 * * *", key="same")
    @jobledger.handler("a.two")
    def two() -> None:
        pass

    module = types.ModuleType("acme_jobs")
    module.one, module.two = one, two  # type: ignore[attr-defined]
    with pytest.raises(DeclarationError, match="two schedules have the key 'same'"):
        declared_in(module)
    module.two = None  # type: ignore[attr-defined]
    assert list(declared_in(module).jobs) == ["same"]


def test_a_plain_handler_runs_on_another_thread_with_its_struct() -> None:
    """If the worker runs a plain function handler, then it runs off the event loop's
    thread and gets its payload decoded into the declared struct."""
    seen: dict[str, Any] = {}

    @jobledger.handler("billing.send")
    def send(payload: Invoice) -> Invoice:
        seen["thread"] = threading.get_ident()
        seen["payload"] = payload
        return payload

    async def run() -> dict[str, Any]:
        seen["loop"] = threading.get_ident()
        return await code_handler(send)(context({"customer": "acme", "amount": 3}))

    result = asyncio.run(run())
    assert seen["thread"] != seen["loop"]
    assert seen["payload"] == Invoice(customer="acme", amount=3)
    assert result == {"customer": "acme", "amount": 3}


def test_a_payload_its_struct_refuses_is_the_runs_own_error() -> None:
    """If a run's payload no longer fits the handler's struct, then the run fails with
    a refused payload (which the circuit breaker does not count)."""

    @jobledger.handler("billing.send")
    async def send(payload: Invoice) -> None:
        del payload

    async def run() -> dict[str, Any]:
        return await code_handler(send)(context({"amount": "ten"}))

    with pytest.raises(PayloadRefusedError, match="does not fit Invoice"):
        asyncio.run(run())


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        (None, {}),
        ({"a": 1}, {"a": 1}),
        (Invoice(customer="x"), {"customer": "x", "amount": 0}),
        (42, {"value": 42}),
        ([1, "b"], {"value": [1, "b"]}),
    ],
)
def test_what_a_handler_returns_is_stored_as_an_object(value: object, stored: object) -> None:
    """If a handler returns None, an object, a struct or another JSON value, then the
    run's result is an object: as it is, empty, or under "value"."""
    assert as_result(value) == stored


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            b'[[jobs]]\nkey = "a"\npayload = {a = ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
            "Recursion",
        ),
        (b'[[jobs]]\nkey = "a"\nmax_retries = 1' + b"0" * 5000 + b"\n", "digits"),
        (b'[[jobs]]\nkey = "\xff"\n', "utf-8"),
    ],
    ids=["nested-100000-deep", "huge-number", "invalid-utf8"],
)
def test_a_jobs_file_no_decoder_reads_is_refused_naming_the_file(
    tmp_path: Path, text: bytes, problem: str
) -> None:
    """If a jobs file for ``apply`` is nested past the decoder's depth, holds a number
    past what Python converts or is not UTF-8, then it is refused as a declaration
    error naming the file (one line for the CLI), not a stack trace."""
    path = tmp_path / "jobs.toml"
    path.write_bytes(text)
    with pytest.raises(DeclarationError, match=problem) as refused:
        jobs_of_file(path)
    assert str(path) in str(refused.value)
