"""A share of a read-model rebuild, as a process: ``python -m jobledger.rebuild_part``.

It reads its task (pickled by ``rebuild_processes``) from standard input and answers on
standard output; its log lines go to standard error like the caller's.
"""

import os
import pickle
import sys
from typing import IO

import structlog

from jobledger.bootstrap import bootstrap
from jobledger.infra.logging import configure_logging
from jobledger.projections.quarantine import READ_MODELS_FOLLOWER, describe, is_outage
from jobledger.projections.read_models.parts import fold_part
from jobledger.runtime.rebuild_processes import answer

log = structlog.get_logger(__name__)


def run_part(task: bytes, out: IO[bytes]) -> None:
    """A share's process: fold it and answer (what it folded, or why it failed)."""
    settings, part, page_size = pickle.loads(task)  # noqa: S301 (sent by the rebuild)
    configure_logging(settings)
    try:
        with bootstrap(settings, role="rebuild") as container:
            isolation = container.isolation(READ_MODELS_FOLLOWER, persist=part.persist)
            result = fold_part(
                container.ledger,
                container.database,
                container.read_model_tables(),
                isolation,
                part,
                page_size=page_size,
                reached=lambda position: answer(out, ("reached", part.index, position)),
            )
        answer(out, ("done", part.index, result))
    except BaseException as error:  # noqa: BLE001 (every failure goes to the rebuild)
        log.warning("read_models.rebuild_part_failed", part=part.index, error=describe(error))
        answer(out, ("failed", part.index, describe(error), is_outage(error)))


def main() -> None:
    # The answers keep standard output to themselves: anything else written there (a
    # library's print) goes to standard error instead of into the rebuild's reading.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    with answers:
        run_part(sys.stdin.buffer.read(), answers)


if __name__ == "__main__":
    main()
