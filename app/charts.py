"""Geometry of the feedback chart: the weight each micro-batch got in each optimizer step (the
learner's loop) next to the correct weights, from `diagnosis.evidence["weights"]` of the
gradient-accumulation grader. templates/_weights_chart.html draws it as SVG (classes only, no
inline styles: CSP) with localized labels; this module only does the arithmetic."""

import math
from dataclasses import dataclass, field
from typing import Any

WIDTH = 560
LEFT = 78  # room for "Step n" and the weight axis
RIGHT = 12
TOP = 34  # room for the legend
ROW = 64  # one row (small multiple) per optimizer step
PLOT = 44  # bar area inside a row
BOTTOM = 44  # micro-batch numbers and the axis title
MAX_STEPS = 8
MAX_MICROBATCHES = 32


@dataclass
class Bar:
    x: float
    y: float
    width: float
    height: float
    value: float


@dataclass
class Row:
    number: int  # 1-based step
    top: float
    baseline: float
    yours: list[Bar] = field(default_factory=list)
    correct: list[Bar] = field(default_factory=list)
    values: list[tuple[float, float]] = field(default_factory=list)  # (yours, correct) per mb


@dataclass
class Chart:
    width: int
    height: int
    left: int
    right_edge: int
    rows: list[Row]
    microbatches: int
    ticks: list[tuple[float, int]]  # (x centre, 1-based micro-batch) under the last row
    top_value: float
    bottom_value: float
    axis_y: float  # y of the micro-batch numbers
    title_y: float  # y of the x-axis title


def _matrix(value: Any) -> list[list[float]] | None:
    if not isinstance(value, list) or not value or len(value) > MAX_STEPS:
        return None
    rows = []
    for row in value:
        if not isinstance(row, list) or not row or len(row) > MAX_MICROBATCHES:
            return None
        if not all(isinstance(v, int | float) and math.isfinite(v) for v in row):
            return None
        rows.append([float(v) for v in row])
    return rows


def weights_chart(evidence_weights: Any) -> Chart | None:
    """None unless the evidence is the expected shape: {"steps": S x M, "expected": S x M}."""
    if not isinstance(evidence_weights, dict):
        return None
    steps = _matrix(evidence_weights.get("steps"))
    expected = _matrix(evidence_weights.get("expected"))
    if steps is None or expected is None or len(steps) != len(expected):
        return None
    width = len(steps[0])
    if any(len(r) != width for r in steps + expected):
        return None
    values = [v for r in steps + expected for v in r]
    top_value = max(max(values), 0.0) or 1.0
    bottom_value = min(min(values), 0.0)
    span = top_value - bottom_value
    plot_width = WIDTH - LEFT - RIGHT
    slot = plot_width / width
    bar = max(min(slot * 0.36, 18.0), 1.0)

    def y(top: float, v: float) -> float:
        return top + (top_value - v) / span * PLOT

    rows = []
    for k, (mine, right) in enumerate(zip(steps, expected, strict=True)):
        top = TOP + k * ROW
        baseline = y(top, 0.0)
        row = Row(number=k + 1, top=top, baseline=round(baseline, 2))
        for j, (a, b) in enumerate(zip(mine, right, strict=True)):
            centre = LEFT + slot * (j + 0.5)
            for target, value, x in ((row.yours, a, centre - bar), (row.correct, b, centre)):
                y0, y1 = sorted((y(top, value), baseline))
                target.append(
                    Bar(round(x, 2), round(y0, 2), round(bar, 2), round(y1 - y0, 2), value)
                )
            row.values.append((a, b))
        rows.append(row)
    height = TOP + len(rows) * ROW + BOTTOM
    axis_y = TOP + len(rows) * ROW + 8
    return Chart(
        width=WIDTH,
        height=int(height),
        left=LEFT,
        right_edge=WIDTH - RIGHT,
        rows=rows,
        microbatches=width,
        ticks=[(round(LEFT + slot * (j + 0.5), 2), j + 1) for j in range(width)],
        top_value=top_value,
        bottom_value=bottom_value,
        axis_y=axis_y,
        title_y=axis_y + 26,
    )
