"""What every process stands on: settings, errors, dependency health, metrics, logging,
the group-commit writer, and the ports of presence, budgets and breakers."""
