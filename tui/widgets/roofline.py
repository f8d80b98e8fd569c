"""A log-log roofline plot drawn with characters: the memory roof (slope = bandwidth), the
compute roof (peak FLOP/s) in braille dots, each op or kernel a glyph coloured by its bound.

The geometry (log scale, clipping, ranges) is plain functions with no Textual, tested alone;
the widget only turns their cells into a ``rich.text.Text`` of its current size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.widget import Widget

#: Glyph and colour per bound class; the glyphs differ so that NO_COLOR still tells them apart.
BOUND_STYLE: dict[str, tuple[str, str]] = {
    "compute_bound": ("■", "green"),
    "memory_bound": ("●", "dodger_blue1"),
    "cache_bound": ("▼", "cyan"),
    "latency_bound": ("▲", "yellow"),
    "unknown": ("?", "grey62"),
}
SELECTED_GLYPH = "◆"
ROOF_STYLE = "red"
Y_LABEL_W = 6  # "100T" + axis


@dataclass(frozen=True)
class PlotPoint:
    """One op or kernel on the plot."""

    key: str
    intensity: float | None  # FLOP per byte
    flops_per_s: float | None  # achieved
    bound: str


@dataclass(frozen=True)
class Axes:
    """The plot's ranges (decades) and its size in character cells."""

    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float
    cols: int
    rows: int


def log_pos(value: float | None, lo: float, hi: float, n: int) -> tuple[int, bool] | None:
    """The cell (0..n-1) of ``value`` on a log axis from ``lo`` to ``hi`` split in ``n`` cells,
    and whether it was clipped to an edge (outside the range); None when it has no logarithm."""
    if value is None or not value > 0 or not math.isfinite(value) or n <= 0:
        return None
    f = (math.log10(value) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
    i = int(math.floor(f * n))
    if i < 0:
        return 0, True
    if i >= n:
        # the top edge itself (value == hi) belongs to the last cell and is not clipped
        return n - 1, value > hi
    return i, False


def point_cell(p: PlotPoint, axes: Axes) -> tuple[int, int, bool] | None:
    """(column, row from the top, clipped) of a point, None when it cannot be placed (no FLOPs
    or no bytes: a log scale has no zero)."""
    x = log_pos(p.intensity, axes.x_lo, axes.x_hi, axes.cols)
    y = log_pos(p.flops_per_s, axes.y_lo, axes.y_hi, axes.rows)
    if x is None or y is None:
        return None
    return x[0], axes.rows - 1 - y[0], x[1] or y[1]


def _decade_floor(v: float) -> float:
    return 10.0 ** math.floor(math.log10(v))


def _decade_ceil(v: float) -> float:
    return 10.0 ** math.ceil(math.log10(v))


def choose_axes(points: list[PlotPoint], peak_flops: float | None, mem_bw: float | None, cols: int, rows: int,
                max_decades_x: int = 8, max_decades_y: int = 7) -> Axes:
    """Whole decades that hold the roofs' ridge and the points (as many as fit; the rest are
    clipped to the edges): x from the lowest to the highest intensity, y up to the peak."""
    xs = [p.intensity for p in points if p.intensity and p.intensity > 0]
    ys = [p.flops_per_s for p in points if p.flops_per_s and p.flops_per_s > 0]
    ridge = peak_flops / mem_bw if peak_flops and mem_bw else None
    if ridge:
        xs += [ridge / 10, ridge * 10]
    x_lo, x_hi = (_decade_floor(min(xs)), _decade_ceil(max(xs))) if xs else (0.1, 1e3)
    if peak_flops:  # the top just above the compute roof, not at the next decade: no empty rows
        y_hi = max([peak_flops * 2] + ys)
        y_lo = _decade_floor(min(ys + [peak_flops / 100]))
    else:
        y_lo, y_hi = (_decade_floor(min(ys)), _decade_ceil(max(ys))) if ys else (1e9, 1e15)
    if x_hi <= x_lo:
        x_hi = x_lo * 10
    if y_hi <= y_lo:
        y_lo = y_hi / 10
    # too wide a range squeezes everything: keep the decades around the ridge / below the peak
    if math.log10(x_hi / x_lo) > max_decades_x:
        centre = ridge or math.sqrt(x_lo * x_hi)
        x_lo = max(x_lo, _decade_floor(centre) / 10 ** (max_decades_x // 2))
        x_hi = x_lo * 10 ** max_decades_x
    if math.log10(y_hi / y_lo) > max_decades_y:
        y_lo = y_hi / 10 ** max_decades_y
    return Axes(x_lo, x_hi, y_lo, y_hi, max(1, cols), max(1, rows))


# braille dot bits by (dx 0..1, dy 0..3 from the top) within a cell
_BRAILLE = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))


def roof_dots(axes: Axes, peak_flops: float | None, mem_bw: float | None) -> dict[tuple[int, int], int]:
    """Braille bits per cell (column, row from the top) tracing ``min(peak, bw * intensity)``
    over the plot; parts of the roof below or above the y range are not drawn."""
    cells: dict[tuple[int, int], int] = {}
    if not peak_flops and not mem_bw:
        return cells
    w, h = axes.cols * 2, axes.rows * 4
    lx, ly = math.log10(axes.x_hi / axes.x_lo), math.log10(axes.y_hi / axes.y_lo)
    prev: int | None = None
    for px in range(w):
        x = axes.x_lo * 10 ** (lx * (px + 0.5) / w)
        y = min(v for v in (peak_flops, (mem_bw or 0) * x if mem_bw else None) if v)
        fy = math.log10(y / axes.y_lo) / ly * h
        if fy < 0 or fy > h:
            prev = None
            continue
        py = min(h - 1, int(fy))
        lo_py, hi_py = (py, py) if prev is None else (min(prev + 1, py), py) if py > prev else (py, py)
        for q in range(lo_py, hi_py + 1):  # join steep steps so that the slope stays a line
            row = axes.rows - 1 - q // 4
            cells[(px // 2, row)] = cells.get((px // 2, row), 0) | _BRAILLE[px % 2][3 - q % 4]
        prev = py
    return cells


def _tick(v: float, unit: str = "") -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= scale:
            return f"{v / scale:g}{prefix}{unit}"
    return f"{v:g}{unit}"


def render_plot(points: list[PlotPoint], peak_flops: float | None, mem_bw: float | None, width: int, height: int,
                selected: str | None = None, color: bool = True) -> Text:
    """The whole plot (axes, labels, roofs, points) in ``width`` x ``height`` cells."""
    cols = max(4, width - Y_LABEL_W)
    rows = max(2, height - 2)  # x ticks and the x title under the plot
    axes = choose_axes(points, peak_flops, mem_bw, cols, rows)
    grid: list[list[tuple[str, str]]] = [[(" ", "")] * cols for _ in range(rows)]
    for (c, r), bits in roof_dots(axes, peak_flops, mem_bw).items():
        grid[r][c] = (chr(0x2800 + bits), ROOF_STYLE if color else "")
    sel_cell = None
    for p in points:
        cell = point_cell(p, axes)
        if cell is None:
            continue
        glyph, style = BOUND_STYLE.get(p.bound, BOUND_STYLE["unknown"])
        if p.key == selected:
            sel_cell = cell
            continue
        grid[cell[1]][cell[0]] = (glyph, f"bold {style}" if color else "")
    if sel_cell is not None:  # drawn last: on top of anything in the same cell
        grid[sel_cell[1]][sel_cell[0]] = (SELECTED_GLYPH, "bold reverse")
    # y labels at each decade's row
    ylabels: dict[int, str] = {}
    d = axes.y_lo
    while d <= axes.y_hi * 1.0001:
        pos = log_pos(d, axes.y_lo, axes.y_hi, rows)
        if pos is not None:
            ylabels.setdefault(rows - 1 - pos[0], _tick(d))
        d *= 10
    text = Text(no_wrap=True, overflow="crop")
    for r in range(rows):
        label = ylabels.get(r, "")
        text.append(f"{label:>{Y_LABEL_W - 1}}┤" if label else " " * (Y_LABEL_W - 1) + "│", style="dim")
        for ch, style in grid[r]:
            text.append(ch, style=style or None)
        text.append("\n")
    # x axis ticks: a label at each decade that fits
    ticks = [" "] * cols
    d = axes.x_lo
    while d <= axes.x_hi * 1.0001:
        pos = log_pos(d, axes.x_lo, axes.x_hi, cols)
        label = _tick(d)
        if pos is not None:
            start = min(pos[0], cols - len(label))
            if all(t == " " for t in ticks[max(0, start - 1):start + len(label) + 1]):
                ticks[start:start + len(label)] = list(label)
        d *= 10
    text.append(" " * (Y_LABEL_W - 1) + "└", style="dim")
    text.append("".join(ticks), style="dim")
    text.append("\n")
    title = "y: FLOP/s achieved   x: intensity FLOP/byte (log-log)"
    text.append((" " * Y_LABEL_W + title)[: width], style="dim")
    return text


def points_from_analysis(doc: dict[str, Any], kind: str) -> list[PlotPoint]:
    """The points of the analysis' ``ops`` or ``kernels`` (``kind``), keyed as the run screen's
    table rows are (``ops:3``); those without FLOPs or bytes get no position."""
    out = []
    for i, item in enumerate(doc.get(kind) or ()):
        flops, nbytes = item.get("flops"), item.get("bytes")
        if kind == "ops":
            intensity = item.get("intensity_flop_per_byte")
            achieved = item.get("achieved_flops_per_s")
        else:  # kernels: FLOPs and bytes summed over the calls that have a cost estimate
            intensity = flops / nbytes if flops and nbytes else None
            # the analysis' own rate (over the time of the costed calls), the figure analyze prints
            achieved = item.get("achieved_flops_per_s")
        out.append(PlotPoint(f"{kind}:{i}", intensity, achieved, item.get("bound") or "unknown"))
    return out


def dominant_roof(doc: dict[str, Any]) -> tuple[float | None, float | None, str | None, str]:
    """(peak FLOP/s, memory bandwidth B/s, dtype, device label) to draw: the first device with
    a roof, at the peak of the dtype that does the most FLOPs in the run's ops (the compute roof
    bounds FLOPs, not the elementwise time around them; bf16 when no op says)."""
    time_by_dtype: dict[str, float] = {}
    for o in doc.get("ops") or ():
        if o.get("dtype"):
            work = float(o.get("flops") or 0.0) * int(o.get("count") or 1)
            time_by_dtype[o["dtype"]] = time_by_dtype.get(o["dtype"], 0.0) + work
    for dev in (doc.get("roofline") or {}).get("devices") or ():
        peaks = dev.get("peak_flops_per_s") or {}
        if not peaks and not dev.get("mem_bw_bytes_per_s"):
            continue
        ranked = sorted((d for d in time_by_dtype if d in peaks), key=lambda d: -time_by_dtype[d])
        dtype = ranked[0] if ranked else ("bf16" if "bf16" in peaks else next(iter(peaks), None))
        return (peaks.get(dtype) if dtype else None), dev.get("mem_bw_bytes_per_s"), dtype, \
            f"{dev.get('key')} {dev.get('spec') or ''}".strip()
    return None, None, None, ""


class RooflinePlot(Widget):
    """The plot at the widget's size; ``set_data`` and ``select`` redraw it."""

    DEFAULT_CSS = """
    RooflinePlot { height: 16; min-height: 8; width: 1fr; }
    """

    def __init__(self, *, color: bool = True, id: str | None = None) -> None:
        super().__init__(id=id)
        self.color = color
        self.points: list[PlotPoint] = []
        self.peak_flops: float | None = None
        self.mem_bw: float | None = None
        self.selected: str | None = None

    def set_data(self, points: list[PlotPoint], peak_flops: float | None, mem_bw: float | None) -> None:
        self.points, self.peak_flops, self.mem_bw = points, peak_flops, mem_bw
        self.refresh()

    def select(self, key: str | None) -> None:
        if key != self.selected:
            self.selected = key
            self.refresh()

    def render(self) -> Text:
        return render_plot(self.points, self.peak_flops, self.mem_bw, self.size.width, self.size.height,
                           self.selected, self.color)
