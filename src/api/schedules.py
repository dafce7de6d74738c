"""Schedule previews: the next fire times of a schedule, before or after it is saved."""

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from litestar import post
from litestar.di import NamedDependency
from litestar.params import JSONBody
from litestar.status_codes import HTTP_200_OK

from jobledger.api.schemas import Fire, PreviewIn, PreviewOut, to_schedule
from jobledger.api.security import VIEWER
from jobledger.domain.clock import Clock
from jobledger.domain.schedules import CronSchedule, Schedule, check_instant, upcoming_fires
from jobledger.services.jobs import Jobs

# Far enough for any cron to reach its count (a yearly one needs count years).
_HORIZON = timedelta(days=366 * 100)


def preview_fires(schedule: Schedule, *, after: datetime, count: int) -> PreviewOut:
    zone_name = schedule.timezone if isinstance(schedule, CronSchedule) else "UTC"
    zone = ZoneInfo(zone_name)
    fires = upcoming_fires(schedule, after, horizon=_HORIZON, limit=count)
    return PreviewOut(
        timezone=zone_name, fires=[Fire(at, at.astimezone(zone).isoformat()) for at in fires]
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
    """The next fires of a schedule with the DST policy applied; refuses what the job
    definition would refuse, naming the field."""
    schedule = jobs.check_schedule(to_schedule(data.schedule))
    after = clock() if data.after is None else check_instant("after", data.after)
    return preview_fires(schedule, after=after, count=data.count)
