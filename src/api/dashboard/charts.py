"""Line charts of the last hour as inline SVG, drawn on the server.

A chart is plain geometry (polyline points in a fixed view box) plus the figures it
shows, so the template can render both the picture and its text alternative (a
caption that states the totals and peaks, and a table of every minute with data).
Missing values (a percentile of a minute with no executions) break a line instead of
pulling it to zero.
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from jobledger.services.views import MinuteStats

WIDTH = 600
HEIGHT = 170
LEFT = 48  # room for the y-axis labels
RIGHT = 8
TOP = 10
BOTTOM = 24  # room for the x-axis labels
_PLOT_W = WIDTH - LEFT - RIGHT
_PLOT_H = HEIGHT - TOP - BOTTOM


@dataclass(frozen=True)
class Series:
    name: str
    css: str  # the stroke class in the stylesheet (colour and dash, for colour blindness)
    values: tuple[float | None, ...]
    segments: tuple[str, ...]  # polyline "x,y x,y" runs between gaps


@dataclass(frozen=True)
class Tick:
    position: float
    label: str
    anchor: str = "end"  # SVG text-anchor: the labels stay inside the view box


@dataclass(frozen=True)
class Chart:
    key: str
    title: str
    unit: str
    series: tuple[Series, ...]
    minutes: tuple[datetime, ...]
    y_ticks: tuple[Tick, ...]
    x_ticks: tuple[Tick, ...]
    summary: str
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    plot_right: int = WIDTH - RIGHT
    plot_bottom: int = HEIGHT - BOTTOM

    def rows(self) -> list[tuple[datetime, tuple[float | None, ...]]]:
        """The minutes that have a figure in any series, for the table."""
        found = []
        for index, minute in enumerate(self.minutes):
            values = tuple(s.values[index] for s in self.series)
            if any(v for v in values):
                found.append((minute, values))
        return found


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten that is at least ``value``."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value)


def _x(index: int, count: int) -> float:
    return LEFT + (_PLOT_W * index / max(count - 1, 1))


def _y(value: float, top: float) -> float:
    return TOP + _PLOT_H * (1 - value / top)


def _segments(values: Sequence[float | None], top: float) -> tuple[str, ...]:
    runs: list[list[str]] = [[]]
    for index, value in enumerate(values):
        if value is None:
            runs.append([])
            continue
        runs[-1].append(f"{_x(index, len(values)):.1f},{_y(value, top):.1f}")
    # A lone point between gaps gets a twin half a unit away: with round caps the
    # line then shows as a dot instead of nothing.
    return tuple(" ".join(run if len(run) > 1 else [*run, _nudged(run[0])]) for run in runs if run)


def _nudged(point: str) -> str:
    x, y = point.split(",")
    return f"{float(x) + 0.5:.1f},{y}"


def _label(value: float, unit: str) -> str:
    """Three significant digits at most: the buckets are only 2 % exact anyway."""
    if unit == "ms" and value >= 1000:  # noqa: PLR2004 (a second)
        return f"{float(f'{value / 1000:.3g}'):g} s"
    return f"{float(f'{value:.3g}'):g}{' ' + unit if unit else ''}"


def _x_ticks(minutes: Sequence[datetime]) -> tuple[Tick, ...]:
    if not minutes:
        return ()
    last = len(minutes) - 1
    anchors = {0: "start", last // 2: "middle", last: "end"}
    return tuple(
        Tick(_x(i, len(minutes)), f"{minutes[i]:%H:%M}", anchor) for i, anchor in anchors.items()
    )


def line_chart(
    key: str,
    title: str,
    *,
    unit: str,
    minutes: Sequence[datetime],
    series: Sequence[tuple[str, str, Sequence[float | None]]],
    summary: str,
) -> Chart:
    peak = max((v for _, _, values in series for v in values if v is not None), default=0.0)
    top = nice_ceiling(peak)
    y_ticks = tuple(Tick(_y(v, top), _label(v, unit)) for v in (0.0, top / 2, top))
    return Chart(
        key=key,
        title=title,
        unit=unit,
        series=tuple(
            Series(name, css, tuple(values), _segments(values, top)) for name, css, values in series
        ),
        minutes=tuple(minutes),
        y_ticks=y_ticks,
        x_ticks=_x_ticks(minutes),
        summary=summary,
    )


# ---- the overview's three charts ---------------------------------------------------


def _column(
    stats: Sequence[MinuteStats], pick: Callable[[MinuteStats], float | None]
) -> list[float | None]:
    return [pick(s) for s in stats]


def _peak_text(name: str, stats: Sequence[MinuteStats], values: Sequence[float | None]) -> str:
    known = [(v, s.minute) for v, s in zip(values, stats, strict=True) if v is not None]
    if not known:
        return f"no {name}"
    value, minute = max(known, key=lambda pair: pair[0])
    return f"highest {name} {_label(value, 'ms')} at {minute:%H:%M}"


def throughput_chart(stats: Sequence[MinuteStats]) -> Chart:
    fired = _column(stats, lambda s: s.fired)
    completed = _column(stats, lambda s: s.completed)
    failed = _column(stats, lambda s: s.failed)
    totals = [sum(v or 0 for v in column) for column in (fired, completed, failed)]
    summary = (
        f"In the last hour: {totals[0]:g} fired, {totals[1]:g} completed, "
        f"{totals[2]:g} failed attempts."
    )
    return line_chart(
        "throughput",
        "Executions per minute",
        unit="",
        minutes=[s.minute for s in stats],
        series=[("fired", "s1", fired), ("completed", "s2", completed), ("failed", "s3", failed)],
        summary=summary,
    )


def percentile_chart(stats: Sequence[MinuteStats], metric: str, title: str) -> Chart:
    p50 = _column(stats, lambda s: getattr(s, f"{metric}_p50_ms"))
    p95 = _column(stats, lambda s: getattr(s, f"{metric}_p95_ms"))
    summary = f"{title} in the last hour: {_peak_text('p95', stats, p95)}; " + _peak_text(
        "p50", stats, p50
    )
    return line_chart(
        metric,
        title,
        unit="ms",
        minutes=[s.minute for s in stats],
        series=[("p50", "s1", p50), ("p95", "s3", p95)],
        summary=summary + ".",
    )


def overview_charts(stats: Sequence[MinuteStats]) -> list[Chart]:
    return [
        throughput_chart(stats),
        percentile_chart(stats, "lateness", "Lateness"),
        percentile_chart(stats, "duration", "Duration"),
    ]
