"""One home per backend: PostgreSQL, SQLite, Redis and memory, behind the ports the
layers above define. Only the composition root (``jobledger.bootstrap``) imports them."""
