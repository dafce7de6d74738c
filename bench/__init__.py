"""Benchmarks that print tables and JSON; each runs as a module from the repository
root: ``python -m bench.NAME`` (see bench/README.md)."""
