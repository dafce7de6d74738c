"""`jobledger worker` with a clock that is off: a worker on a machine whose clock drifted.

    python -m tests.chaos.skewed_worker      (CHAOS_CLOCK_OFFSET_SECONDS=-4.5)

It is built as the command builds it, through the composition root, from the same
``JOBLEDGER_*`` settings, and checks them at start the same way; only the worker's
``now`` (what it leases, extends, defers and backs off by) runs the offset ahead of
this machine's clock, or behind it when negative. Everything else in the process,
event timestamps included, keeps the real time.
"""

import asyncio
import os
import signal
from datetime import UTC, datetime, timedelta

from jobledger.adapters.store import check_migrated
from jobledger.bootstrap import Container, bootstrap
from jobledger.infra.logging import configure_logging
from jobledger.infra.settings import load_settings

OFFSET = "CHAOS_CLOCK_OFFSET_SECONDS"


async def _work(container: Container, offset: timedelta) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    worker = container.worker()
    worker.now = lambda: datetime.now(UTC) + offset
    await worker.run(stop)


def main() -> int:
    offset = timedelta(seconds=float(os.environ[OFFSET]))
    settings = load_settings(os.environ)
    configure_logging(settings)
    with bootstrap(settings, role="worker") as container:
        # The start checks of `jobledger worker`.
        check_migrated(settings)
        container.ping()
        container.handlers()
        container.health.expect(*container.dependencies())
        if settings.metrics_port:
            container.metrics.serve(settings.metrics_port, settings.metrics_host)
        asyncio.run(_work(container, offset))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
