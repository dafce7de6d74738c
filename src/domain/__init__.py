"""The pure domain: aggregates, events, value objects and rules. No I/O here."""
