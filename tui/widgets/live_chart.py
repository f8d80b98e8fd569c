"""The live screen's large history charts, as text: a multi-row block chart of one metric's
history with its y axis (the range's bottom and top labelled) and a time axis.

Plain Python, no Textual: :class:`~gpuscope.tui.widgets.live_device.DeviceCard` draws the
lines these functions return, when the terminal has room for them (few GPUs on a large
terminal; the screen works the room out). Each column of the plot is a stretch of the history
drawn at its maximum (a spike is never averaged away), each row holds eight levels
(``▁``..``█``), so a chart of ``h`` rows resolves ``8 h`` levels; the value at the range's
top fills every row, its bottom none.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

#: Eighths of a row, from 1/8 to a full cell.
EIGHTHS = "▁▂▃▄▅▆▇█"
#: The narrowest chart (its y labels, axis and plot) worth drawing.
MIN_CHART_WIDTH = 36
#: Plot rows below which the screen keeps the one-line sparklines.
MIN_PLOT_ROWS = 3
#: Plot rows above which a taller chart shows nothing more (the rest of the screen stays empty).
MAX_PLOT_ROWS = 30


def resample(data: Sequence[float], points: int, width: int) -> list[float | None]:
    """``data`` (the newest last, at most ``points`` long) as ``width`` columns spanning the
    whole window of ``points`` buckets: the newest at the right edge, None where the window
    holds nothing yet. A column covering several buckets takes their maximum; with more
    columns than buckets a bucket spans several columns."""
    if width <= 0:
        return []
    points = max(points, len(data), 1)
    missing = points - len(data)  # buckets at the window's start with no data yet
    out: list[float | None] = []
    for c in range(width):
        a = c * points // width
        b = max((c + 1) * points // width, a + 1)
        vals = [data[i - missing] for i in range(a, b) if i >= missing]
        out.append(max(vals) if vals else None)
    return out


def eighths(value: float, lo: float, hi: float, rows: int) -> int:
    """How many eighths of ``rows`` rows ``value`` fills on a ``lo``..``hi`` axis (0..8 rows)."""
    if not (hi > lo) or rows <= 0 or not math.isfinite(value):  # a NaN or inf reading: nothing drawn
        return 0
    frac = (float(value) - lo) / (hi - lo)
    return max(0, min(8 * rows, int(round(frac * 8 * rows))))


def plot_rows(columns: Sequence[float | None], lo: float, hi: float, rows: int) -> list[str]:
    """The plot of ``columns`` (from :func:`resample`) in ``rows`` text rows, the top first."""
    levels = [eighths(v, lo, hi, rows) if v is not None else 0 for v in columns]
    out = []
    for r in range(rows):
        base = (rows - 1 - r) * 8  # eighths below this row
        line = []
        for n in levels:
            fill = n - base
            line.append(" " if fill <= 0 else EIGHTHS[min(fill, 8) - 1])
        out.append("".join(line))
    return out


def finite_max(data: Sequence[float]) -> float:
    """The largest finite value of ``data`` (0 when none)."""
    return max((v for v in data if math.isfinite(v)), default=0.0)


def nice_top(value: float) -> float:
    """The axis top for data reaching ``value``: ``value`` rounded up to a multiple of its
    leading power of ten (57 -> 60, 1980 -> 2000, 210 -> 300); 1 for nothing above 0."""
    if not math.isfinite(value) or value <= 0:
        return 1.0
    step = 10.0 ** math.floor(math.log10(value))
    return math.ceil(value / step - 1e-9) * step


def fmt_ago(seconds: float, minutes: bool) -> str:
    """A time axis label ``seconds`` before now: ``-2m``, ``-30s`` (``minutes``: in minutes)."""
    if seconds <= 0:
        return "now"
    if minutes:
        return f"-{seconds / 60:g}m"
    return f"-{seconds:g}s"


def time_axis(label_width: int, width: int, span_s: float) -> str:
    """The line under a plot ``width`` columns wide after ``label_width`` columns of y labels:
    a rule with the window's start, middle and ``now`` written on it."""
    rule = ["─"] * width
    minutes = span_s >= 120
    marks = [(0, fmt_ago(span_s, minutes), "left"), (width, "now", "right")]
    if width >= 20:
        marks.append((width // 2, fmt_ago(span_s / 2, minutes), "centre"))
    for pos, text, align in marks:
        start = pos if align == "left" else pos - len(text) if align == "right" else pos - len(text) // 2
        start = max(0, min(width - len(text), start))
        if len(text) <= width:
            rule[start:start + len(text)] = list(text)
    return " " * label_width + "└" + "".join(rule)


def chart_lines(title: str, data: Sequence[float], *, points: int, span_s: float, width: int, rows: int,
                lo: float, hi: float, lo_label: str, hi_label: str) -> list[tuple[str, str, str]]:
    """A chart ``width`` columns wide and ``rows + 2`` lines high: the title, ``rows`` plot
    rows, the time axis. Each line is (y label and axis, plot, whole line when it has no
    plot): the card styles the axis and the plot apart. The y labels are right-aligned on the
    top and bottom plot rows."""
    label_w = max(len(lo_label), len(hi_label))
    plot_w = max(1, width - label_w - 1)
    out: list[tuple[str, str, str]] = [("", "", f"{title[:width]:<{width}}")]
    plot = plot_rows(resample(data, points, plot_w), lo, hi, rows)
    for r, line in enumerate(plot):
        if r == 0:
            axis = f"{hi_label:>{label_w}}┤"
        elif r == rows - 1:
            axis = f"{lo_label:>{label_w}}┤"
        else:
            axis = " " * label_w + "│"
        out.append((axis, line, ""))
    out.append(("", "", time_axis(label_w, plot_w, span_s)))
    return out


def chart_grid(n_charts: int, width: int) -> tuple[int, int]:
    """(charts kept, charts per row) for ``n_charts`` in ``width`` columns: all in one row when
    they fit, else the first four two by two (or one under another), so rows stay even."""
    per_row = max(1, width // MIN_CHART_WIDTH)
    if per_row >= n_charts:
        return n_charts, max(1, n_charts)
    kept = min(n_charts, 4)
    return kept, (4 if per_row >= 4 else 2 if per_row >= 2 else 1)
