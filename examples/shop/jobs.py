# examples/shop/jobs.py
"""The shop's jobs: what runs, and when.

Workers and the API load the handlers with JOBLEDGER_HANDLERS=examples.shop.jobs;
`jobledger apply --module examples.shop.jobs` creates (or updates) the schedules.
"""

import msgspec

import jobledger


class Receipt(msgspec.Struct):
    order_id: int
    email: str
    total_cents: int


@jobledger.handler("shop.send_receipt")
def send_receipt(payload: Receipt) -> dict[str, object]:
    """Emails the receipt of one order."""
    # A real shop would call its mail service here; a plain function may block.
    return {"sent_to": payload.email, "order_id": payload.order_id}


class SalesReport(msgspec.Struct):
    period: str = "yesterday"


@jobledger.periodic(
    "0 6 * * *",
    tz="Europe/Berlin",
    key="shop.daily_sales",
    payload=SalesReport(),
    overlap="skip_if_running",
)
@jobledger.handler("shop.sales_report")
async def sales_report(payload: SalesReport, ctx: jobledger.HandlerContext) -> dict[str, str]:
    """Sums up the sales of a period."""
    ctx.log.info("shop.sales_report", period=payload.period)
    return {"period": payload.period}


@jobledger.periodic("* * * * *", key="shop.release_carts")
@jobledger.handler("shop.release_carts")
def release_carts() -> dict[str, int]:
    """Gives the stock of carts left alone for an hour back to the shelf."""
    return {"released": 0}
