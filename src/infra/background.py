"""A loop on a daemon thread of its own, with a stop flag the loop watches."""

import threading


class Background:
    """Subclasses implement ``_run``, which returns once ``_stopping`` is set."""

    join_timeout = 10.0

    def __init__(self, name: str) -> None:
        self.name = name
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"jobledger-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake()
        self._thread.join(self.join_timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for the loop to end; True once it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _wake(self) -> None:
        """Called on stop, for loops that wait on something besides the stop flag."""

    def _run(self) -> None:
        raise NotImplementedError
