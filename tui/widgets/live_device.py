"""One device on the live screen: a card with a title line, one cell per metric (its value and
a sparkline of its short history), the metrics it lacks with the reason, and the processes
using it.

The card is one widget that draws its own lines (Textual's line API, ``render_line``): a
refresh works out the card's lines as text, and only the lines whose text changed are marked
dirty and repainted. An earlier card of about 25 widgets (a Static and a Sparkline per cell)
cost the compositor a third of a core for 8 GPUs at 10 Hz (bench/README.md, bench_tui live).
A sparkline's characters are worked out again only when its history closes a bucket. When the
screen has room (:meth:`DeviceCard.set_plot_rows`), utilization, memory, power and temperature
are drawn as large charts instead (``live_chart``), their plots likewise worked out again when
a bucket closes. Metric
names and units come from :data:`gpuscope.metrics.METRICS`; numbers are formatted with
:mod:`gpuscope.render.table`'s helpers. Nothing relies on colour alone: a lost device says
LOST, a missing metric says why.
"""
from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

from gpuscope.collectors.base import DeviceInfo, ProcessSample, Sample
from gpuscope.metrics import METRICS_BY_NAME, HeldReadings
from gpuscope.render.table import fmt_pct, fmt_rate, shorten

from ..text import safe_text
from .live_chart import MAX_PLOT_ROWS, chart_grid, chart_lines, finite_max, nice_top
from .live_history import MetricHistory


@dataclass(frozen=True)
class Cell:
    """One cell: ``metric`` (the sparkline's too), optionally shown against ``total``."""

    key: str
    label: str
    metric: str
    total: str | None = None


GPU_CELLS: tuple[Cell, ...] = (
    Cell("util", "util", "gpu_util"),
    Cell("mem", "mem", "mem_used_bytes", "mem_total_bytes"),
    Cell("power", "power", "power_w", "power_limit_w"),
    Cell("temp", "temp", "temp_c"),
    Cell("smclk", "SM clk", "sm_clock_mhz"),
    Cell("memclk", "mem clk", "mem_clock_mhz"),
    Cell("smact", "SM act", "sm_active"),
    Cell("tensor", "tensor", "tensor_active"),
    Cell("dram", "DRAM", "dram_bw_util"),
)
HOST_CELLS: tuple[Cell, ...] = (
    Cell("cpu", "CPU", "host_cpu_util"),
    Cell("hmem", "mem", "host_mem_used_bytes", "host_mem_total_bytes"),
)
#: The metrics drawn as large charts when the screen has room, in this order: a GPU's
#: utilization, memory, power and temperature (its other metrics keep their cells and
#: sparklines), the host's CPU and memory. A wider terminal gives wider charts, not more.
CHART_METRICS = ("gpu_util", "mem_used_bytes", "power_w", "temp_c", "host_cpu_util", "host_mem_used_bytes")

#: Short names of the metrics a cell shows against (for the "n/a" line).
TOTAL_LABELS = {"mem_total_bytes": "mem total", "power_limit_w": "power limit", "host_mem_total_bytes": "mem total"}

LABEL_WIDTH = 8
VALUE_WIDTH = 15
#: A cell's text (label and value) is this wide; the sparkline takes the rest of the cell.
TEXT_WIDTH = 27
#: Columns between two cells on one line, and the card's left padding under its title.
GUTTER = 2
PAD = 1
SPARK_BARS = "▁▂▃▄▅▆▇█"


def fmt_metric(metric: str, value: float | int | None) -> str:
    """``value`` of ``metric`` in the unit :data:`METRICS` gives it ("-" when None)."""
    if value is None:
        return "-"
    unit = METRICS_BY_NAME[metric].otel_unit
    if unit == "1":
        return fmt_pct(float(value), 1.0).strip()
    if unit == "By":
        return fmt_rate(float(value), "B")
    if unit == "Cel":
        return f"{value:.0f} °C"
    if unit in ("W", "MHz"):
        return f"{value:.0f} {unit}"
    return f"{value:g} {unit}"


def fmt_against(metric: str, value: float | int | None, total_metric: str, total: float | int | None) -> str:
    """``value/total unit`` (``60.1/85.5 GB``, ``688/700 W``); the value alone without a total."""
    text = fmt_metric(metric, value)
    if value is None or total is None:
        return text
    whole = fmt_metric(total_metric, total)
    num, _, unit = text.partition(" ")
    tnum, _, tunit = whole.partition(" ")
    return f"{num}/{tnum} {unit}" if unit == tunit else f"{text}/{whole}"


def dom_id(key: str) -> str:
    """A device key (``gpu0``, ``gpu0/mig1``, ``amd:gpu0``) as a widget id."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", key)


def _one_line(text: str) -> str:
    return " ".join(safe_text(text, layout=True).split())


def sparkline(data: Sequence[float], width: int) -> str:
    """``data`` in ``width`` characters of :data:`SPARK_BARS`: split into ``width`` stretches,
    each drawn at its maximum (a spike is never averaged away), scaled from the data's minimum
    to its maximum; a flat line at the bottom when all are equal."""
    if width <= 0 or not data:
        return ""
    n = len(data)
    if n <= width:
        points = list(data)
    else:
        points = [max(data[i * n // width:max((i + 1) * n // width, i * n // width + 1)]) for i in range(width)]
    lo, hi = min(points), max(points)
    span = hi - lo
    top = len(SPARK_BARS) - 1
    return "".join(SPARK_BARS[int(round((v - lo) / span * top)) if span > 0 else 0] for v in points)


def axis_range(metric: str, data: Sequence[float], total: float | int | None) -> tuple[float, float, str, str]:
    """A chart's y axis for ``metric``: (bottom, top, their labels). Ratios span 0-100 %; a
    metric shown against a total (memory, power) spans 0 to the total (or the history's
    maximum when that is higher); the others 0 to their maximum rounded up (57 °C -> 60)."""
    unit = METRICS_BY_NAME[metric].otel_unit
    peak = finite_max(data)
    if unit == "1":
        hi = max(1.0, float(peak))
        return 0.0, hi, "0%", f"{hi * 100:.0f}%"
    if total is not None and math.isfinite(total) and total > 0:
        hi = max(float(total), float(peak))
    else:
        hi = nice_top(float(peak))
    lo_label = fmt_metric(metric, 0)
    if unit == "By":
        return 0.0, hi, "0", fmt_rate(hi, "B")
    return 0.0, hi, lo_label.split(" ")[0], fmt_metric(metric, hi)


#: A line of a card: (text, style name) parts; style names are the card's component classes.
_Line = tuple[tuple[str, str], ...]


class DeviceCard(Widget):
    """One GPU (or the host): title, metric cells, what is missing and why, processes."""

    COMPONENT_CLASSES = {"device-card--title", "device-card--spark", "device-card--muted", "device-card--lost"}
    DEFAULT_CSS = """
    DeviceCard { height: auto; }
    DeviceCard > .device-card--title { text-style: bold; }
    DeviceCard > .device-card--spark { color: $accent; }
    DeviceCard > .device-card--muted { color: $text-muted; }
    DeviceCard > .device-card--lost { text-style: bold reverse; }
    """

    def __init__(self, device: DeviceInfo, cells: Sequence[Cell], bucket_s: float, *,
                 processes: bool = True, columns: int = 2) -> None:
        super().__init__(id=f"card-{dom_id(device.key)}", classes="device-card")
        self.device = device
        self.cells = tuple(cells)
        self.bucket_s = bucket_s
        self.with_processes = processes
        self.columns = max(1, columns)
        self.history: dict[str, MetricHistory] = {c.metric: MetricHistory(bucket_s) for c in self.cells}
        self.lost = False
        self.title_text = self._title(None)
        self._shown = self.shown_cells()
        self._texts: dict[str, str] = {c.key: "" for c in self._shown}  # cell key -> its text
        self._sparks: dict[str, tuple[int | None, int, str]] = {}  # cell key -> (bucket, width, line)
        #: plot rows of the large charts (0: none, the cells' sparklines only); the screen sets it
        self.plot_rows = 0
        self._charts: dict[str, tuple[tuple[object, ...], list[tuple[str, str, str]]]] = {}
        #: the last reading of each total a cell is shown against (a chart's axis keeps its top
        #: while the device is lost or a tick misses it)
        self._totals: dict[str, float | int] = {}
        #: where the charts were drawn: (metric, x, y, width, plot rows) in the card's lines
        self.chart_boxes: list[tuple[str, int, int, int, int]] = []
        missing = self.missing()
        self.missing_text = "; ".join(f"n/a {', '.join(names)}: {why}" for why, names in missing.items())
        self.procs_text = ""
        self._last_ts = -1
        # metrics read on some ticks only (energy, GPM) keep showing their last reading
        self._held = HeldReadings()
        self._now: tuple[int, dict[str, float | int | None]] = (-1, {})  # (ts_ns, values held)
        self._last_procs: tuple[ProcessSample, ...] | None = None
        self._lines: list[_Line] = []
        self._lines_width = -1
        self._strips: dict[int, Strip] = {}

    # -- what the card shows ------------------------------------------------------------
    def shown_cells(self) -> list[Cell]:
        """The cells of the metrics this device has (the others go to the "n/a" line)."""
        return [c for c in self.cells if c.metric not in self.device.unsupported]

    def missing(self) -> dict[str, list[str]]:
        """reason -> the names of the shown metrics this device lacks for it."""
        out: dict[str, list[str]] = {}
        for c in self.cells:
            for metric, label in ((c.metric, c.label), (c.total, TOTAL_LABELS.get(c.total or "", c.total))):
                if metric is None:
                    continue
                why = self.device.unsupported.get(metric)
                if why:
                    out.setdefault(_one_line(why), []).append(str(label))
        return out

    def cell_text(self, key: str) -> str:
        """The text a cell shows (label and value), "" before the first refresh."""
        return self._texts.get(key, "")

    def _title(self, lost_reason: str | None) -> str:
        # a replayed recording's device names are somebody's text: control characters shown
        return safe_text(self._title_parts(lost_reason))

    def _title_parts(self, lost_reason: str | None) -> str:
        d = self.device
        if d.kind == "host":
            cpus = d.properties.get("cpus_logical")
            head = f"host  {d.properties.get('hostname') or ''}  {d.name or ''}".rstrip()
            return head + (f"  ({cpus} CPUs)" if cpus else "")
        arch = d.properties.get("architecture")
        extra = " ".join(str(p) for p in (d.vendor, d.kind if d.kind != "gpu" else None, arch) if p)
        head = f"{d.key}  {d.name or '(unnamed)'}  [{extra}]"
        if d.source == "replay":
            head += "  replay"
        if lost_reason is not None:
            head = f"{d.key}  {d.name or '(unnamed)'}  LOST: {lost_reason}"
        return head

    # -- drawing: lines of text, repainted only where they changed -----------------------------
    def set_columns(self, columns: int) -> None:
        """How many cells side by side (the screen picks it from its width)."""
        columns = max(1, columns)
        if columns != self.columns:
            self.columns = columns
            self._relayout()

    def set_plot_rows(self, rows: int) -> None:
        """Large charts ``rows`` plot rows high (0: none); the screen picks it from its room."""
        rows = max(0, min(MAX_PLOT_ROWS, rows))
        if rows != self.plot_rows:
            self.plot_rows = rows
            self._relayout()

    def charted_cells(self, width: int) -> tuple[list[Cell], int]:
        """(the cells drawn as charts, charts per row) at ``width`` columns when charts are on."""
        cells = [c for c in self._shown if c.metric in CHART_METRICS]
        cells.sort(key=lambda c: CHART_METRICS.index(c.metric))
        kept, per_row = chart_grid(len(cells), max(1, width - PAD))
        return cells[:kept], per_row

    def rows_at(self, width: int, plot_rows: int) -> int:
        """How many lines the card takes at ``width`` columns with charts of ``plot_rows`` rows
        (0: without charts), as :meth:`_build_lines` makes them; the screen uses it to share
        its height out."""
        charted: list[Cell] = []
        chart_rows = 0
        if plot_rows > 0:
            charted, per_row = self.charted_cells(width)
            chart_rows = -(-len(charted) // per_row) if charted else 0
        cells = len([c for c in self._shown if c not in charted])
        n = 1 + -(-cells // self.columns) + chart_rows * (min(plot_rows, MAX_PLOT_ROWS) + 2)
        if self.missing_text:
            n += len(textwrap.wrap(self.missing_text, max(10, width - PAD)) or [""])
        return n + (1 if self.with_processes else 0)

    def chart_rows_at(self, width: int) -> int:
        """How many rows of charts the card has at ``width`` columns (0 without chartable metrics)."""
        cells, per_row = self.charted_cells(width)
        return -(-len(cells) // per_row) if cells else 0

    def _chart(self, cell: Cell, width: int, rows: int) -> list[tuple[str, str, str]]:
        h = self.history[cell.metric]
        total = self._totals.get(cell.total) if cell.total else None
        title = self._texts.get(cell.key, "") or cell.label
        # the plot is worked out again when a bucket closes (or the size or the axis changes);
        # the title line, with the value of this tick, every time
        key = (h.newest_bucket, width, rows, total)
        drawn = self._charts.get(cell.key)
        if drawn is None or drawn[0] != key:
            data = h.data
            lo, hi, lo_label, hi_label = axis_range(cell.metric, data, total)
            lines = chart_lines("", data, points=h.points, span_s=h.points * self.bucket_s, width=width,
                                rows=rows, lo=lo, hi=hi, lo_label=lo_label, hi_label=hi_label)
            drawn = (key, lines)
            self._charts[cell.key] = drawn
        return [("", "", f"{title[:width]:<{width}}"), *drawn[1][1:]]

    def _relayout(self) -> None:
        self._lines_width = -1
        self._strips.clear()
        self.refresh(layout=True)

    def _cell_width(self, width: int) -> int:
        return max(1, (width - PAD - GUTTER * (self.columns - 1)) // self.columns)

    def _spark(self, cell: Cell, width: int) -> str:
        h = self.history[cell.metric]
        bucket = h.newest_bucket
        drawn = self._sparks.get(cell.key)
        if drawn is None or drawn[0] != bucket or drawn[1] != width:
            drawn = (bucket, width, sparkline(h.data, width))
            self._sparks[cell.key] = drawn
        return drawn[2]

    def _build_lines(self, width: int) -> list[_Line]:
        """The card's lines at ``width`` columns, as (text, style) parts."""
        lines: list[_Line] = [((self.title_text, "lost" if self.lost else "title"),)]
        cw = self._cell_width(width)
        text_w = min(TEXT_WIDTH, cw)
        spark_w = cw - text_w - 1 if cw - text_w - 1 >= 4 else 0
        value_style = "muted" if self.lost else ""
        charted: list[Cell] = []
        per_row = 1
        if self.plot_rows > 0:
            charted, per_row = self.charted_cells(width)
        cells = [c for c in self._shown if c not in charted]
        for i in range(0, len(cells), self.columns):
            parts: list[tuple[str, str]] = [(" " * PAD, "")]
            for j, c in enumerate(cells[i:i + self.columns]):
                if j:
                    parts.append((" " * GUTTER, ""))
                text = self._texts.get(c.key, "")
                text = text if len(text) <= text_w else text[:text_w - 1] + "…"
                parts.append((f"{text:<{text_w}}", value_style))
                if spark_w:
                    parts.append((" ", ""))
                    parts.append((f"{self._spark(c, spark_w):<{spark_w}}", "spark"))
            lines.append(tuple(parts))
        boxes: list[tuple[str, int, int, int, int]] = []
        if charted:
            chart_w = max(1, (width - PAD - GUTTER * (per_row - 1)) // per_row)
            plot_style = "muted" if self.lost else "spark"
            for i in range(0, len(charted), per_row):
                group = charted[i:i + per_row]
                drawn = [self._chart(c, chart_w, self.plot_rows) for c in group]
                top = len(lines)
                for j, c in enumerate(group):
                    boxes.append((c.metric, PAD + j * (chart_w + GUTTER), top, chart_w, self.plot_rows))
                for k in range(self.plot_rows + 2):
                    parts = [(" " * PAD, "")]
                    for j, chart in enumerate(drawn):
                        if j:
                            parts.append((" " * GUTTER, ""))
                        axis, plot, whole = chart[k]
                        if whole:
                            parts.append((f"{whole:<{chart_w}}", value_style if k == 0 else "muted"))
                        else:
                            parts.append((axis, "muted"))
                            parts.append((plot, plot_style))
                    lines.append(tuple(parts))
        self.chart_boxes = boxes
        if self.missing_text:
            for row in textwrap.wrap(self.missing_text, max(10, width - PAD)) or [""]:
                lines.append(((" " * PAD + row, "muted"),))
        if self.with_processes:
            lines.append(((" " * PAD + self.procs_text, ""),))
        return lines

    def _update_lines(self) -> None:
        """Work out the lines again; repaint the ones that changed (all when the count did)."""
        width = self.size.width
        if not self.is_mounted or width <= 0:
            return
        new = self._build_lines(width)
        old = self._lines
        self._lines, self._lines_width = new, width
        if len(new) != len(old):
            self._strips.clear()
            self.refresh(layout=True)
            return
        for y, (a, b) in enumerate(zip(old, new)):
            if a != b:
                self._strips.pop(y, None)
                self.refresh(Region(0, y, width, 1))

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._build_lines(width))

    def on_resize(self) -> None:
        self._relayout()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if width != self._lines_width:
            self._lines = self._build_lines(width)
            self._lines_width = width
            self._strips.clear()
        strip = self._strips.get(y)
        if strip is None:
            base = self.rich_style
            if y >= len(self._lines):
                strip = Strip.blank(width, base)
            else:
                # the card hands its strings to the terminal as they are: shown visible (a no-op
                # on what _title and _processes_text made so already)
                segs = [Segment(safe_text(text), base + self._style(name)) for text, name in self._lines[y] if text]
                strip = Strip(segs).crop_extend(0, width, base)
            self._strips[y] = strip
        return strip

    def _style(self, name: str) -> Style:
        if not name:
            return Style()
        return self.get_component_rich_style(f"device-card--{name}", partial=True)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()

    # -- feeding and showing -----------------------------------------------------------------
    def feed(self, samples: Iterable[Sample]) -> Sample | None:
        """Add the samples not seen yet to the histories; returns the newest."""
        newest = None
        for s in samples:
            newest = s
            if s.ts_ns <= self._last_ts:
                continue
            self._last_ts = s.ts_ns
            self._now = (s.ts_ns, self._held.update(s.ts_ns, s.values, s.lost))
            if s.lost:
                continue
            for metric, h in self.history.items():
                v = s.values.get(metric)
                if v is not None:
                    h.add(s.ts_ns, v)
            for c in self.cells:
                t = s.values.get(c.total) if c.total else None
                if t is not None:
                    self._totals[str(c.total)] = t
            if s.values.get("proc_gpu_mem_bytes") is not None or s.processes:
                self._last_procs = s.processes  # a process query was made this tick
        return newest

    def show(self, latest: Sample | None, reasons: dict[str | None, str], lost_reason: str | None = None,
             proc_names: dict[int, str] | None = None) -> None:
        """Show the newest sample. ``reasons``: metric (None: the device) -> why it is missing
        now (the sampler's degradations); ``lost_reason`` set when the device is lost."""
        lost = lost_reason is not None or (latest is not None and latest.lost)
        if lost and lost_reason is None:
            lost_reason = reasons.get(None) or "stopped answering"
        self.lost = lost  # drawn by the lines' styles (no CSS class: a class change restyles the widget)
        self.title_text = self._title(lost_reason if lost else None)
        for c in self._shown:
            if lost:
                text = "lost"
            elif latest is None:
                text = "waiting…"
            else:
                values = self._now[1] if self._now[0] == latest.ts_ns else latest.values
                v = values.get(c.metric)
                if v is None:
                    why = reasons.get(c.metric) or "not read this tick"
                    text = "- " + shorten(_one_line(why), VALUE_WIDTH + 8)
                elif c.total is not None:
                    text = fmt_against(c.metric, v, c.total, values.get(c.total))
                else:
                    text = fmt_metric(c.metric, v)
            self._texts[c.key] = f"{c.label:<{LABEL_WIDTH}}{text:<{VALUE_WIDTH}}".rstrip()
        if self.with_processes:
            self.procs_text = self._processes_text(lost, proc_names or {})
        self._update_lines()

    def pids(self) -> list[int]:
        """The pids of the processes last reported on this device."""
        return [p.pid for p in self._last_procs or ()]

    def processes_reason(self) -> str | None:
        """Why this device's processes cannot be shown, or None when the vendor reports them."""
        d = self.device
        if d.source == "replay":
            return "none in a recording (replayed telemetry)"
        why = d.unsupported.get("proc_gpu_mem_bytes")
        if why:
            return _one_line(why)
        note = d.properties.get("process_memory_note")
        if note:
            return _one_line(str(note))
        return None

    def _processes_text(self, lost: bool, names: dict[int, str]) -> str:
        why = self.processes_reason()
        if lost:
            text = "processes: - (device lost)"
        elif why is not None:
            text = f"processes: {why}"
        elif self._last_procs is None:
            text = "processes: waiting for the first query"
        elif not self._last_procs:
            text = "processes: none"
        else:
            procs = sorted(self._last_procs, key=lambda p: -(p.gpu_mem_bytes or 0))
            parts = []
            for p in procs[:4]:
                bits = [str(p.pid), p.name or names.get(p.pid) or "?"]
                if p.gpu_mem_bytes is not None:
                    bits.append(fmt_metric("proc_gpu_mem_bytes", p.gpu_mem_bytes))
                if p.gpu_util is not None:
                    bits.append(fmt_metric("proc_gpu_util", p.gpu_util))
                parts.append(" ".join(bits))
            more = f" +{len(procs) - 4} more" if len(procs) > 4 else ""
            text = f"processes ({len(procs)}): " + " · ".join(parts) + more
        # process names come from other users' processes (/proc/PID/comm is theirs to set)
        return safe_text(text)
