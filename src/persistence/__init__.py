"""The event store: the eventsourcing Application over the log, its codec, and the
placeholder for a stored event that no longer decodes."""
