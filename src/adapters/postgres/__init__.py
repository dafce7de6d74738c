"""PostgreSQL: the event store's server, its bulk paths, and the projection tables on it."""
