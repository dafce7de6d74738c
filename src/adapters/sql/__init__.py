"""SQL written once for both stores (``?`` placeholders; the PostgreSQL database rewrites
them), on the projection ``Database`` port: tables beside the log that are not followers."""
