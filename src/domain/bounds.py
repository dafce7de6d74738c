"""The bounds of values the domain checks and the API's bodies declare: a schedule's
rules and a run's limits. A module that imports nothing, so that the shared bodies take
the same numbers without loading the cron engine or the aggregates."""

from datetime import timedelta
from typing import Final

# A schedule's rules (``jobledger.domain.schedules``).
MAX_INTERVAL: Final = timedelta(days=366)
MAX_JITTER: Final = timedelta(hours=24)
MAX_EXCLUDE_DATES: Final = 1000
# A run's concurrency and rate limits (``jobledger.domain.limits``).
MAX_CONCURRENCY: Final = 100_000
MAX_RATE: Final = 1_000_000
MIN_RATE_PERIOD: Final = timedelta(seconds=1)
MAX_RATE_PERIOD: Final = timedelta(days=1)
# A notification rule's (``jobledger.domain.notifications``).
MAX_NOTIFY_RECIPIENTS: Final = 20
MAX_NOTIFY_URL_CHARS: Final = 2000
MAX_NOTIFY_COUNT: Final = 1_000_000
MAX_NOTIFY_WINDOW: Final = timedelta(days=7)
