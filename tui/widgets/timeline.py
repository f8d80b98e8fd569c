"""A run's telemetry over time: one sparkline per device and metric (power W, utilization and,
where the samples hold them, NVLink / XGMI TX and RX in percent of the spec's link bandwidth),
with the profiler windows and marks on a line of their own, all on one time axis."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rich.text import Text
from textual.widget import Widget

from gpuscope.render.table import fmt_us

SPARK = "▁▂▃▄▅▆▇█"
LABEL_W = 12
VALUE_W = 7

#: metric -> (short label, scale to the shown unit, unit)
METRICS = {"power_w": ("W", 1.0, "W"), "gpu_util": ("util", 100.0, "%")}
#: The link rows' labels: TX and RX of every NVLink / XGMI link together, % of the link.
LINK_LABELS = ("lnk tx", "lnk rx")


@dataclass
class Series:
    label: str  # "gpu0 W"
    ts_ns: list[int]
    values: list[float | None]
    unit: str


@dataclass
class TimelineData:
    t0_ns: int
    t1_ns: int
    series: list[Series] = field(default_factory=list)
    #: (start_ns, end_ns or None for a mark, kind, name)
    events: list[tuple[int, int | None, str, str]] = field(default_factory=list)


def bins(ts_ns: list[int], values: list[float | None], t0: int, t1: int, n: int) -> list[float | None]:
    """The mean of the values in each of ``n`` equal time bins from ``t0`` to ``t1`` (None where
    a bin holds no value); a sample outside the span is left out."""
    sums, counts = [0.0] * n, [0] * n
    span = max(1, t1 - t0)
    for t, v in zip(ts_ns, values):
        if v is None or t < t0 or t > t1:
            continue
        i = min(n - 1, (t - t0) * n // span)
        sums[i] += float(v)
        counts[i] += 1
    return [s / c if c else None for s, c in zip(sums, counts)]


def fill_gaps(values: list[float | None], max_gap: int) -> list[float | None]:
    """Bins left empty between two samples only because the samples are sparser than the
    columns take the value before them; a longer gap (no samples then) stays empty."""
    out = list(values)
    last = None
    for i, v in enumerate(values):
        if v is None:
            continue
        if last is not None and 1 < i - last <= max_gap + 1:
            for j in range(last + 1, i):
                out[j] = values[last]
        last = i
    return out


def sparkline(values: list[float | None], vmax: float) -> str:
    """One block per value scaled to ``vmax``; blank where there is no value."""
    out = []
    for v in values:
        if v is None:
            out.append(" ")
        else:
            out.append(SPARK[max(0, min(len(SPARK) - 1, int(v / vmax * (len(SPARK) - 1) + 0.5))) if vmax > 0 else 0])
    return "".join(out)


def event_line(events: list[tuple[int, int | None, str, str]], t0: int, t1: int, n: int) -> str:
    """Profiler windows as ``═`` over the time they cover, marks as ``▼`` (a mark wins its cell)."""
    cells = [" "] * n
    span = max(1, t1 - t0)

    def col(t: int) -> int:
        return max(0, min(n - 1, (t - t0) * n // span))

    for start, end, _kind, _name in events:
        if end is not None:
            for i in range(col(start), col(end) + 1):
                if cells[i] == " ":
                    cells[i] = "═"
    for start, end, _kind, _name in events:
        if end is None:
            cells[col(start)] = "▼"
    return "".join(cells)


def _label(key: str, label: str) -> str:
    room = LABEL_W - 2 - len(label)  # the metric stays whole; a long device key is cut
    return f"{key if len(key) <= room else '…' + key[-(room - 1):]} {label}"


def build(devices: list[Any], series: list[Any], annotations: list[Any], started_ns: int | None,
          ended_ns: int | None, links: list[Any] | None = None) -> TimelineData | None:
    """What the widget draws, from the read layer's devices, sample series and annotations, and
    ``links`` (``gpuscope.render.links.link_series``: a TX and an RX row in percent for each GPU
    whose link bandwidth the spec gives); None when the run has no telemetry."""
    keys = {d.device_id: d.key for d in devices}
    out: list[Series] = []
    for metric, (label, scale, unit) in METRICS.items():
        for s in series:
            vals = s.values.get(metric)
            if not vals or all(v is None for v in vals):
                continue
            out.append(Series(_label(str(keys.get(s.device_id, s.device_id)), label), s.ts_ns,
                              [None if v is None else float(v) * scale for v in vals], unit))
    for ln in links or ():
        if not ln.link_bytes_per_s:
            continue  # no bandwidth to divide by: the screen's note gives its bytes/s
        for label, pct in zip(LINK_LABELS, (ln.tx_pct, ln.rx_pct)):
            if any(v is not None for v in pct):
                out.append(Series(_label(str(keys.get(ln.device_id, ln.key)), label), ln.ts_ns, pct, "%"))
    if not out:
        return None
    ts = [t for s in out for t in s.ts_ns]
    t0, t1 = min(ts), max(ts)
    events = [(a.ts_ns, None if a.dur_ns is None else a.ts_ns + a.dur_ns, a.kind, a.name or a.kind)
              for a in annotations]
    return TimelineData(t0, max(t1, t0 + 1), out, events)


def render_timeline(data: TimelineData, width: int, color: bool = True) -> Text:
    n = max(4, width - LABEL_W - VALUE_W)
    text = Text(no_wrap=True, overflow="crop")
    for s in data.series:
        vals = bins(s.ts_ns, s.values, data.t0_ns, data.t1_ns, n)
        per_sample = n / max(1, sum(1 for v in s.values if v is not None))
        vals = fill_gaps(vals, max(1, math.ceil(per_sample)))
        present = [v for v in vals if v is not None]
        vmax = 100.0 if s.unit == "%" else (max(present) if present else 0.0)
        text.append(f"{s.label[:LABEL_W - 1]:<{LABEL_W}}", style="dim")
        text.append(sparkline(vals, vmax), style=("green" if s.unit == "%" else "yellow") if color else None)
        peak = max(present) if present else None
        text.append("" if peak is None else f" {peak:>4.0f}{s.unit}"[:VALUE_W])
        text.append("\n")
    if data.events:
        text.append(f"{'windows':<{LABEL_W}}", style="dim")
        text.append(event_line(data.events, data.t0_ns, data.t1_ns, n), style="cyan" if color else None)
        text.append("\n")
    end = fmt_us((data.t1_ns - data.t0_ns) / 1e3)
    axis = f"0{end:>{max(0, n - 1)}}"
    text.append(" " * LABEL_W + axis, style="dim")
    return text


class Timeline(Widget):
    """The sparklines, the event line and the time axis, sized to the widget's width."""

    DEFAULT_CSS = """
    Timeline { height: auto; }
    """

    def __init__(self, *, color: bool = True, id: str | None = None) -> None:
        super().__init__(id=id)
        self.color = color
        self.data: TimelineData | None = None

    def set_data(self, data: TimelineData | None) -> None:
        self.data = data
        self.refresh(layout=True)

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        if self.data is None:
            return 0
        return len(self.data.series) + (1 if self.data.events else 0) + 1

    def render(self) -> Text:
        return Text() if self.data is None else render_timeline(self.data, self.size.width, self.color)
