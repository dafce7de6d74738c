"""Handlers: what an execution runs. Built in, by entry point, or by dotted path."""
