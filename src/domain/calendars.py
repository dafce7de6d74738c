"""Named holiday calendars: the public holidays of a country or one of its subdivisions.

A schedule may name calendars (``"US"``, ``"DE-BY"`` for Bavaria, ``"GB-SCT"``) whose
holidays it skips. The dates come from the ``holidays`` package, a table that ships
with the release, so a calendar's dates are a pure function of its name and the year:
the preview and the scheduler of one release always agree. A release with a newer
table may know a holiday the older one did not; the changelog says so.
"""

import re
from datetime import date
from functools import lru_cache
from typing import Final

from jobledger.domain.errors import InvalidDefinitionError

MAX_CALENDARS: Final = 10
_NAME: Final = re.compile(r"^([A-Z]{2,3})(?:-([A-Z0-9]{1,5}))?$")
_FIX: Final = (
    "name a country by its ISO 3166 code, optionally with a subdivision, "
    "e.g. US, DE, DE-BY or GB-SCT"
)


@lru_cache(maxsize=1)
def _supported() -> dict[str, frozenset[str]]:
    """Each country code the table knows, with its subdivision codes."""
    import holidays  # noqa: PLC0415 (11 MiB of tables: loaded by the first schedule that names a calendar)

    return {
        country: frozenset(subdivisions)
        for country, subdivisions in holidays.list_supported_countries().items()
    }


def check_calendar(name: str, field: str = "schedule.calendars") -> None:
    """Raise ``InvalidDefinitionError`` unless ``name`` is a calendar this release knows."""
    match = _NAME.fullmatch(name)
    if match is None:
        raise InvalidDefinitionError(field, f"{name!r} is not a calendar name", _FIX)
    country, subdivision = match.groups()
    known = _supported()
    if country not in known:
        raise InvalidDefinitionError(field, f"{country!r} is not a known country", _FIX)
    if subdivision is not None and subdivision not in known[country]:
        listed = ", ".join(sorted(known[country])[:12]) or "none"
        raise InvalidDefinitionError(
            field,
            f"{subdivision!r} is not a subdivision of {country} (it has: {listed})",
            _FIX,
        )


@lru_cache(maxsize=512)
def holiday_dates(name: str, year: int) -> frozenset[date]:
    """The holidays of calendar ``name`` in ``year`` (a name ``check_calendar`` accepts)."""
    match = _NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"{name!r} is not a calendar name")
    country, subdivision = match.groups()
    import holidays  # noqa: PLC0415 (as in _supported)

    table = holidays.country_holidays(country, subdiv=subdivision, years=year)
    return frozenset(day for day in table if day.year == year)


def is_holiday(names: tuple[str, ...], day: date) -> bool:
    """Whether ``day`` is a holiday in any of the calendars ``names``."""
    return any(day in holiday_dates(name, day.year) for name in names)
