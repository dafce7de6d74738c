"""Example applications that use jobledger from Python."""
