"""SQL migrations, shipped as package data and applied by `jobledger migrate`."""
