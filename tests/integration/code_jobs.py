"""Handlers and schedules declared in code, as an application's jobs module holds them:
loaded by the tests through JOBLEDGER_HANDLERS=tests.integration.code_jobs."""

import time
from typing import Any

import msgspec

import jobledger
from jobledger import HandlerContext


class Invoice(msgspec.Struct):
    customer: str
    amount: int
    currency: str = "EUR"


@jobledger.periodic(
    "0 6 1 * *",
    tz="Europe/Berlin",
    key="billing.monthly",
    payload=Invoice(customer="everyone", amount=0),
    overlap="skip_if_running",
)
@jobledger.handler("billing.send_invoice")
def send_invoice(payload: Invoice) -> dict[str, Any]:
    """Sends one invoice."""
    return {"sent_to": payload.customer, "amount": payload.amount, "currency": payload.currency}


@jobledger.periodic("*/30 * * * *", key="reports.half_hourly")
@jobledger.handler("reports.refresh")
async def refresh(ctx: HandlerContext) -> dict[str, Any]:
    """Refreshes the reports, on the worker's loop."""
    return {"attempt": ctx.attempt}


@jobledger.handler("tests.block")
def block(payload: dict[str, Any]) -> dict[str, float]:
    """Blocks its thread, as synchronous code does."""
    seconds = float(payload.get("seconds", 2))
    time.sleep(seconds)
    return {"slept": seconds}


@jobledger.handler("tests.answer")
def answer() -> int:
    """Returns a plain value, stored as {"value": ...}."""
    return 42
