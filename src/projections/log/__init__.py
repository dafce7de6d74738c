"""Following the log: the reader, positions, stream loads and the archive's side."""
