"""Runtime errors: settings, stores and processes."""


class RuntimeLayerError(Exception):
    """jobledger could not start or run with the given settings."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.__doc__)


class SettingsError(RuntimeLayerError):
    """A setting is missing or malformed."""


class StoreUnavailableError(RuntimeLayerError):
    """The event store cannot be reached."""


class StoreNotMigratedError(RuntimeLayerError):
    """The event store lacks tables this release needs; run `jobledger migrate` first."""


class WriterClosedError(RuntimeLayerError):
    """The event writer is closed and takes no more saves."""


class RebuildPartError(RuntimeLayerError):
    """A share of the read-model rebuild failed; the live tables are unchanged."""
