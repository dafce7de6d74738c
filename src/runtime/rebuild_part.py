"""A share of a read-model rebuild, as a process: ``python -m jobledger.runtime.rebuild_part``.

It reads its task (pickled by ``rebuild_processes``) from standard input and answers on
standard output; its log lines go to standard error like the caller's.
"""

import os
import sys

from jobledger.runtime.rebuild_processes import run_part


def main() -> None:
    # The answers keep standard output to themselves: anything else written there (a
    # library's print) goes to standard error instead of into the rebuild's reading.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    with answers:
        run_part(sys.stdin.buffer.read(), answers)


if __name__ == "__main__":
    main()
