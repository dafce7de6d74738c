"""The queue: its contract, the fold of the log into entries, the checkpoint, the projection."""
