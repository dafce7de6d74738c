"""Schedule previews: the next fire times of a schedule, before or after it is saved."""

from datetime import datetime, timedelta
from uuid import UUID
from zoneinfo import ZoneInfo

from litestar import post
from litestar.di import NamedDependency
from litestar.params import JSONBody
from litestar.status_codes import HTTP_200_OK

from jobledger.api.schemas import Fire, PreviewIn, PreviewOut, to_schedule
from jobledger.api.security import VIEWER
from jobledger.domain.clock import Clock
from jobledger.domain.instants import check_instant
from jobledger.domain.schedules import (
    Schedule,
    schedule_zone,
    upcoming_occurrences,
)
from jobledger.services.jobs import Jobs

# Far enough for any cron to reach its count (a yearly one needs count years).
_HORIZON = timedelta(days=366 * 100)


def preview_fires(
    schedule: Schedule, *, after: datetime, count: int, job_id: UUID | None = None
) -> PreviewOut:
    """The next ``count`` occurrences with every rule applied: each one's run time (its
    jitter, for a saved job) and whether it is excluded (a recorded miss, not a run)."""
    zone_name = schedule_zone(schedule)
    zone = ZoneInfo(zone_name)
    occurrences = upcoming_occurrences(
        schedule, after, horizon=_HORIZON, limit=count, job_id=job_id
    )
    return PreviewOut(
        timezone=zone_name,
        fires=[
            Fire(o.run_at, o.run_at.astimezone(zone).isoformat(), o.scheduled_for, o.excluded)
            for o in occurrences
        ],
    )


@post(
    "/api/v1/schedules/preview",
    opt=VIEWER,
    sync_to_thread=True,
    status_code=HTTP_200_OK,
    tags=["jobs"],
)
def preview_schedule(
    data: JSONBody[PreviewIn], jobs: NamedDependency[Jobs], clock: NamedDependency[Clock]
) -> PreviewOut:
    """The next fires of a schedule with the DST policy, its window and exclusions
    applied (jitter shows once the job is saved: it is derived from the job's id);
    refuses what the job definition would refuse, naming the field."""
    schedule = jobs.check_schedule(to_schedule(data.schedule))
    after = clock() if data.after is None else check_instant("after", data.after)
    return preview_fires(schedule, after=after, count=data.count)
