"""SQLite: the embedded mode's event store and projection tables."""
