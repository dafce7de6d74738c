# examples/shop/app.py
"""The shop's web service: POST /orders saves an order and enqueues its receipt in the
same transaction; GET /orders/{id}/receipt waits for the receipt's result.

    SHOP_DATABASE_URL=postgresql://...   jobledger's database (it holds the outbox)
    JOBLEDGER_URL, JOBLEDGER_TOKEN       where jobledger's API is, and an operator token

    uvicorn examples.shop.app:app
"""

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from uuid import UUID

import msgspec
import psycopg
from litestar import Litestar, get, post
from litestar.exceptions import NotFoundException

from examples.shop.jobs import Receipt, send_receipt
from jobledger.client import AsyncClient, enqueue_in_transaction_async

DATABASE_URL = os.environ["SHOP_DATABASE_URL"]
jobledger = AsyncClient()  # JOBLEDGER_URL and JOBLEDGER_TOKEN


class OrderIn(msgspec.Struct):
    email: str
    total_cents: int


class OrderOut(msgspec.Struct):
    order_id: int
    receipt: UUID  # the run that sends the receipt


@post("/orders")
async def place_order(data: OrderIn) -> OrderOut:
    """The order and its receipt run commit together, or neither does."""
    async with await psycopg.AsyncConnection.connect(DATABASE_URL) as conn, conn.transaction():
        cursor = await conn.execute(
            "INSERT INTO shop_orders (email, total_cents) VALUES (%s, %s) RETURNING id",
            (data.email, data.total_cents),
        )
        row = await cursor.fetchone()
        order_id = int(row[0]) if row else 0  # RETURNING always gives the row
        receipt = Receipt(order_id=order_id, email=data.email, total_cents=data.total_cents)
        run = await enqueue_in_transaction_async(
            conn, send_receipt, receipt, idempotency_key=f"receipt-{order_id}"
        )
        await conn.execute("UPDATE shop_orders SET receipt = %s WHERE id = %s", (run, order_id))
    return OrderOut(order_id=order_id, receipt=run)


@get("/orders/{order_id:int}/receipt")
async def receipt_of(order_id: int) -> dict[str, object]:
    """The receipt run's result, once it has run (a 500 if it failed for good)."""
    async with await psycopg.AsyncConnection.connect(DATABASE_URL) as conn:
        cursor = await conn.execute("SELECT receipt FROM shop_orders WHERE id = %s", (order_id,))
        row = await cursor.fetchone()
    if row is None:
        raise NotFoundException(f"no order {order_id}")
    result = await jobledger.wait(row[0], timeout=30)
    return {"order_id": order_id, **result}


@asynccontextmanager
async def lifespan(_: Litestar) -> AsyncIterator[None]:
    async with await psycopg.AsyncConnection.connect(DATABASE_URL, autocommit=True) as conn:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS shop_orders (id bigserial PRIMARY KEY, "
            "email text NOT NULL, total_cents integer NOT NULL, receipt uuid)"
        )
    yield
    await jobledger.close()


app = Litestar([place_order, receipt_of], lifespan=[lifespan])
