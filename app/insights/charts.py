"""Geometry of the insight page's bar charts (templates/_bar_chart.html draws them as SVG with
classes only: CSP). One bar per row under its label, so that long diagnosis codes fit a phone."""

from dataclasses import dataclass

WIDTH = 360
LABEL_H = 14  # the label line above each bar
BAR_H = 12
GAP = 8
VALUE_ROOM = 56  # right of the longest bar, for its number


@dataclass(frozen=True)
class BarRow:
    label: str
    value: int
    label_y: float
    bar_y: float
    width: float
    value_x: float


@dataclass(frozen=True)
class BarChart:
    width: int
    height: int
    bar_height: int
    rows: list[BarRow]


def bar_chart(items: list[tuple[str, int]]) -> BarChart | None:
    """None when there is nothing to draw (no items, or all zero)."""
    top = max((value for _, value in items), default=0)
    if top <= 0:
        return None
    room = WIDTH - VALUE_ROOM
    rows = []
    y = 0.0
    for label, value in items:
        width = round(max(value / top * room, 1.0 if value else 0.0), 2)
        rows.append(
            BarRow(
                label=label,
                value=value,
                label_y=y + LABEL_H - 3,
                bar_y=y + LABEL_H,
                width=width,
                value_x=width + 6,
            )
        )
        y += LABEL_H + BAR_H + GAP
    return BarChart(width=WIDTH, height=int(y), bar_height=BAR_H, rows=rows)
