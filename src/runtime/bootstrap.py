"""The composition root: settings in, wired objects out. Nothing else builds them."""

from dataclasses import dataclass
from typing import Self

from jobledger.domain.ledger import Ledger
from jobledger.runtime.settings import Settings
from jobledger.runtime.store import open_ledger
from jobledger.runtime.writer import GroupCommitWriter


@dataclass
class Container:
    """Everything a jobledger process runs on; close it to release connections."""

    settings: Settings
    ledger: Ledger
    writer: GroupCommitWriter

    def close(self) -> None:
        self.writer.close()
        self.ledger.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def bootstrap(settings: Settings) -> Container:
    ledger = open_ledger(settings)
    writer = GroupCommitWriter(
        ledger,
        max_batch=settings.writer_max_batch,
        max_delay=settings.writer_max_delay_ms / 1000,
    )
    return Container(settings=settings, ledger=ledger, writer=writer)
