"""One device on the live screen: a card with a title line, one cell per metric (its value and
a sparkline of its short history), the metrics it lacks with the reason, and the processes
using it.

The card is built once, when the sampler reports its devices; each refresh only changes the
text of the cells whose value changed and the data of the sparklines (no full redraw). Metric
names and units come from :data:`gpuscope.metrics.METRICS`; numbers are formatted with
:mod:`gpuscope.render.table`'s helpers. Nothing relies on colour alone: a lost device says
LOST, a missing metric says why.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import Grid, Horizontal, Vertical
from textual.widgets import Sparkline, Static

from gpuscope.collectors.base import DeviceInfo, ProcessSample, Sample
from gpuscope.metrics import METRICS_BY_NAME
from gpuscope.render.table import fmt_pct, fmt_rate, shorten

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
#: Short names of the metrics a cell shows against (for the "n/a" line).
TOTAL_LABELS = {"mem_total_bytes": "mem total", "power_limit_w": "power limit", "host_mem_total_bytes": "mem total"}

LABEL_WIDTH = 8
VALUE_WIDTH = 15


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
    return " ".join(text.split())


class MetricCell(Horizontal):
    """A label, a value and the sparkline of the metric's history."""

    DEFAULT_CSS = """
    MetricCell { height: 1; width: 1fr; }
    MetricCell > .cell-text { width: 27; height: 1; text-wrap: nowrap; text-overflow: ellipsis; }
    MetricCell > Sparkline { width: 1fr; min-width: 4; height: 1; margin-left: 1; }
    """

    def __init__(self, cell: Cell, *, id: str | None = None) -> None:
        super().__init__(id=id, classes=f"cell cell-{cell.key}")
        self.cell = cell
        self.text = ""
        self._drawn_bucket: int | None = None
        self._text_widget = Static("", classes="cell-text", markup=False)
        self._spark = Sparkline([], classes="cell-spark")

    def compose(self) -> ComposeResult:
        yield self._text_widget
        yield self._spark

    def show(self, value_text: str, history: MetricHistory) -> None:
        """Set the value text and the sparkline, each only when it changed."""
        text = f"{self.cell.label:<{LABEL_WIDTH}}{value_text:<{VALUE_WIDTH}}".rstrip()
        if text != self.text:
            # the text cell has a fixed width, so a new value is repainted without a layout pass
            # of the whole screen (a layout pass at every tick dominated the live view's cost)
            self.text = text
            self._text_widget.update(text, layout=False)
        # The line is redrawn when a bucket closes (once a second), not at every tick: the
        # value text above is the newest number; redrawing every sparkline at 10 Hz was most
        # of the live view's cost (bench/README.md, bench_tui live)
        if history.newest_bucket != self._drawn_bucket:
            self._drawn_bucket = history.newest_bucket
            self._spark.data = history.data


class DeviceCard(Vertical):
    """One GPU (or the host): title, metric cells, what is missing and why, processes."""

    DEFAULT_CSS = """
    DeviceCard { height: auto; margin-bottom: 0; }
    DeviceCard > .card-title { height: 1; text-style: bold; text-wrap: nowrap; text-overflow: ellipsis; }
    DeviceCard > .cells { height: auto; grid-size: 2; grid-rows: 1; grid-gutter: 0 2; padding-left: 1; }
    DeviceCard > .card-missing { height: auto; padding-left: 1; color: $text-muted; }
    DeviceCard > .card-procs { height: auto; padding-left: 1; text-wrap: nowrap; text-overflow: ellipsis; }
    DeviceCard.lost > .card-title { text-style: bold reverse; }
    DeviceCard.lost > .cells { color: $text-muted; }
    """

    def __init__(self, device: DeviceInfo, cells: Sequence[Cell], bucket_s: float, *,
                 processes: bool = True) -> None:
        super().__init__(id=f"card-{dom_id(device.key)}", classes="device-card")
        self.device = device
        self.cells = tuple(cells)
        self.bucket_s = bucket_s
        self.with_processes = processes
        self.history: dict[str, MetricHistory] = {c.metric: MetricHistory(bucket_s) for c in self.cells}
        self.lost = False
        self.title_text = ""
        self._texts: dict[str, str] = {}
        self._last_ts = -1
        self._last_procs: tuple[ProcessSample, ...] | None = None
        self._cells: list[MetricCell] = []

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

    def compose(self) -> ComposeResult:
        yield Static(self._title(None), classes="card-title", markup=False)
        self._cells = [MetricCell(c, id=f"{self.id}-{c.key}") for c in self.shown_cells()]
        with Grid(classes="cells"):
            yield from self._cells
        missing = self.missing()
        text = "; ".join(f"n/a {', '.join(names)}: {why}" for why, names in missing.items())
        yield Static(text, classes="card-missing", markup=False)
        if self.with_processes:
            yield Static("", classes="card-procs", markup=False)

    def on_mount(self) -> None:
        self.query_one(".card-missing", Static).display = bool(self.missing())

    def _title(self, lost_reason: str | None) -> str:
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

    def feed(self, samples: Iterable[Sample]) -> Sample | None:
        """Add the samples not seen yet to the histories; returns the newest."""
        newest = None
        for s in samples:
            newest = s
            if s.ts_ns <= self._last_ts:
                continue
            self._last_ts = s.ts_ns
            if s.lost:
                continue
            for metric, h in self.history.items():
                v = s.values.get(metric)
                if v is not None:
                    h.add(s.ts_ns, v)
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
        if lost != self.lost:
            self.lost = lost
            self.set_class(lost, "lost")
        title = self._title(lost_reason if lost else None)
        if title != self.title_text:
            self.title_text = title
            self.query_one(".card-title", Static).update(title)
        for cell in self._cells:  # kept from compose: no DOM query at every tick
            c = cell.cell
            if lost:
                text = "lost"
            elif latest is None:
                text = "waiting…"
            else:
                v = latest.values.get(c.metric)
                if v is None:
                    why = reasons.get(c.metric) or "not read this tick"
                    text = "- " + shorten(_one_line(why), VALUE_WIDTH + 8)
                elif c.total is not None:
                    text = fmt_against(c.metric, v, c.total, latest.values.get(c.total))
                else:
                    text = fmt_metric(c.metric, v)
            cell.show(text, self.history[c.metric])
        if self.with_processes:
            self._show_processes(lost, proc_names or {})

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

    def _show_processes(self, lost: bool, names: dict[int, str]) -> None:
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
        if self._texts.get("procs") != text:
            self._texts["procs"] = text
            self.query_one(".card-procs", Static).update(text)
