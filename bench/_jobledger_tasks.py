"""The jobledger side of throughput.py: one no-op handler, as a user declares one.

Every role of the benchmark's deployment loads it through ``JOBLEDGER_HANDLERS``
(``bench.noop=bench._jobledger_tasks:noop``), run from the repository. The handler
returns the time it started, which lands in the run's ``ExecutionCompleted`` event
and in the answer of the client's ``wait``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench import _starts as starts

if TYPE_CHECKING:
    from jobledger.runtime.handlers.base import HandlerContext

NAME = "bench.noop"
HANDLERS = f"{NAME}=bench._jobledger_tasks:noop"


async def noop(ctx: HandlerContext) -> dict[str, Any]:
    return {"started": starts.note(str(ctx.execution_id))}
