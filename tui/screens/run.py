"""One run: the time breakdown, the top ops and kernels, the roofline plot, the telemetry on a
timeline with the profiler windows and marks, and the advice of ``gpuscope analyze``.

Everything comes from one read in a worker (``data.run_detail``: the analysis aggregated in
SQL, the power and utilization samples, the annotations); the widgets only get new data."""
from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import DataTable, Footer, Header, Static

from gpuscope.analyzers.coverage import coverage_line
from gpuscope.render.analysis import bound_label, dims, roof_pct
from gpuscope.render.table import fmt_pct, fmt_rate, fmt_us, shorten

from .. import data
from ..text import safe_text
from .base import GpuscopeScreen
from ..widgets.breakdown import BreakdownBar
from ..widgets.roofline import RooflinePlot, dominant_roof, points_from_analysis
from ..widgets.timeline import Timeline, build

NAME_W = 28
#: How often the screen reads its run again while the run is still recording (a `gpuscope run`
#: elsewhere is writing it): the analysis of a large run takes a good part of a second.
RECORDING_REFRESH_S = 5.0
BOUND_ORDER = {"compute_bound": 0, "memory_bound": 1, "cache_bound": 2, "latency_bound": 3, "unknown": 4}

#: The orders ``s`` cycles through: (label, sort key of an op or kernel entry; ascending).
SORTS: tuple[tuple[str, Any], ...] = (
    ("time", lambda item: -float(item.get("kernel_us", item.get("total_us")) or 0.0)),
    ("saved at roof", lambda item: -float(item.get("saved_us") or 0.0)),
    ("% of roof", lambda item: (item.get("pct_of_roof") is None, float(item.get("pct_of_roof") or 0.0))),
    ("bound", lambda item: (BOUND_ORDER.get(item.get("bound"), 9),
                            -float(item.get("kernel_us", item.get("total_us")) or 0.0))),
    ("name", lambda item: str(item.get("name"))),
)


def sorted_keys(items: list[dict[str, Any]], kind: str, sort: int) -> list[str]:
    """Row keys (``ops:3``) of ``items`` in sort order ``sort`` (an index into SORTS); the
    analysis order breaks ties."""
    key = SORTS[sort % len(SORTS)][1]
    return [f"{kind}:{i}" for i in sorted(range(len(items)), key=lambda i: (key(items[i]), i))]


def op_cells(o: dict[str, Any], whole_us: float, name_w: int = NAME_W) -> tuple[str, ...]:
    us = float(o.get("kernel_us") or 0.0)
    shapes = dims(o.get("input_dims"))
    label = o["name"] + (f" {shapes}" if shapes and shapes != "[]" else "")
    return (shorten(label, name_w), fmt_us(us), fmt_pct(us, whole_us).strip(), bound_label(o), roof_pct(o),
            fmt_us(o.get("saved_us")))


def kernel_cells(k: dict[str, Any], whole_us: float, name_w: int = NAME_W, shown: str | None = None) -> tuple[str, ...]:
    """A kernel's row; ``shown``: its name as the table shows it (:func:`kernel_names`), else
    the name cut to ``name_w``."""
    us = float(k.get("total_us") or 0.0)
    return (shown if shown is not None else shorten(k["name"], name_w), fmt_us(us), fmt_pct(us, whole_us).strip(), bound_label(k),
            roof_pct(k), fmt_us(k.get("saved_us")))


def kernel_names(kernels: Sequence[dict[str, Any]], name_w: int) -> list[str]:
    """The kernels' names in ``name_w`` characters, distinct wherever the full names are: the
    short names ``gpuscope analyze`` prints (``render.names.distinct_names``), not one cut
    prefix that two cutlass kernels share."""
    from gpuscope.render.names import distinct_names

    return distinct_names([str(k["name"]) for k in kernels], name_w)


def plain_cell(value: str) -> Text:
    """A table cell as plain text, as DataTable draws a one-line string cell, but never read as
    Rich markup: op and kernel names are data (``[/]`` in one stopped the screen with a
    MarkupError, ``[link=URL]`` made it a terminal hyperlink); control characters shown."""
    return Text(safe_text(value), end="", no_wrap=True)


def name_width(screen_width: int, rows: Sequence[tuple[str, ...]] = (), headers: tuple[str, ...] = ()) -> int:
    """The name column's width: what the other columns of ``rows`` (cells after the name) leave
    of the screen, with each column's padding and the scroll bars."""
    widths = [len(h) for h in headers[1:]] or [10, 6, 15, 4, 9]
    for r in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, r[1:])]
    return max(18, min(100, screen_width - sum(widths) - 2 * (len(widths) + 1) - 5))


def devices_label(devices: list[dict[str, Any]]) -> str:
    """The run's GPUs in a few words: those of its traces (else its telemetry), alike ones counted."""
    gpus = [d for d in devices if d.get("kind") in (None, "gpu")]
    gpus = [d for d in gpus if d.get("source") == "trace"] or gpus
    groups: dict[tuple[Any, Any], list[str]] = {}
    for d in gpus:
        groups.setdefault((d.get("name") or "unnamed", d.get("spec") or "spec unknown"), []).append(d["key"])
    return ", ".join((keys[0] if len(keys) == 1 else f"{len(keys)}×") + f" {name} [{spec}]"
                     for (name, spec), keys in groups.items()) or "no GPU"


def no_gpu_text(doc: dict[str, Any], profiling: bool | None) -> str:
    """What the run screen says in place of the breakdown of a run without GPU activity: a
    CPU-only trace, or no trace at all (telemetry only: ``gpuscope run --no-profile``, or a
    program that never opened a window)."""
    counts = doc.get("counts") or {}
    if not counts.get("ops") and not counts.get("gpu_activities"):
        # profiling None: a run that does not say (a monitor's recording)
        why = ("" if profiling is None else "; profiling was off (--no-profile)" if not profiling
               else "; no profiler window was written (`gpuscope run` said why)")
        return f"No trace in this run: telemetry only{why}. There are no ops, kernels or roofline."
    return ("No GPU activity in this run: the trace is CPU-only. The ops below carry their CPU time; there are no "
            "kernels and no roofline.")


def link_lines(links: Sequence[Any]) -> list[str]:
    """One line per GPU with NVLink / XGMI rates under the timeline: the link bandwidth its
    ``lnk tx`` / ``lnk rx`` rows are a percent of, and each direction's peak in bytes/s and
    percent (bytes/s only where the spec gives no link bandwidth: then it has no rows)."""
    from gpuscope.render.links import peak

    out = []
    for ln in links:
        parts = []
        for name, bps, pct in (("TX", ln.tx_bytes_per_s, ln.tx_pct), ("RX", ln.rx_bytes_per_s, ln.rx_pct)):
            top, top_pct = peak(bps), peak(pct)
            parts.append(f"{name} peak {fmt_rate(top, 'B/s')}" + ("" if top_pct is None else f" ({top_pct:.1f} %)"))
        where = (f"lnk tx/rx in % of {fmt_rate(ln.link_bytes_per_s, 'B/s')} per direction ({ln.spec})" if ln.link_bytes_per_s
                 else f"no link bandwidth in the spec ({ln.spec or 'GPU not identified'}): bytes/s only")
        out.append(f"{ln.key} NVLink/XGMI, all links: {where}; " + ", ".join(parts))
    return out


class RunRead(Message, bubble=False):
    """The run screen's worker read ``run_id`` (None: the newest run) for read number ``seq``:
    ``detail`` (:func:`tui.data.run_detail`) when it worked, else ``problem``, the status line's
    text, and ``busy`` when another process held the store (the screen tries again).
    ``again``: a read again of a recording run, which leaves the focus and cursors alone."""

    def __init__(self, run_id: int | None, seq: int, detail: dict[str, Any] | None, *, again: bool = False,
                 problem: str = "", busy: bool = False) -> None:
        super().__init__()
        self.run_id = run_id
        self.seq = seq
        self.detail = detail
        self.again = again
        self.problem = problem
        self.busy = busy


class RunScreen(GpuscopeScreen):
    """One run."""

    BINDINGS = [
        Binding("escape", "back", "runs"),
        Binding("s", "cycle_sort", "sort"),
        Binding("p", "profile_window", "profile"),
        # every section by a key: the plot, telemetry and advice sit below the tables, out of
        # sight at 80x24, and were reachable with the mouse wheel only
        Binding("o", "section('ops')", "ops"),
        Binding("k", "section('kernels')", "kernels"),
        Binding("r", "section('roofline')", "roof"),
        Binding("n", "section('communication')", "comm"),
        Binding("t", "section('telemetry')", "telem"),
        Binding("a", "section('advice')", "advice"),
    ]

    #: section name: (the heading scrolled to the top, the widget focused: a table takes ↑/↓
    #: for its rows, the body scrolls with ↑/↓/PgUp/PgDn)
    SECTIONS = {
        "ops": ("#ops-heading", "#run-ops"),
        "kernels": ("#kernels-heading", "#run-kernels"),
        "roofline": ("#roof-heading", "#run-body"),
        "communication": ("#comm-heading", "#run-body"),
        "telemetry": ("#timeline-heading", "#run-body"),
        "advice": ("#advice-heading", "#run-body"),
    }

    def action_section(self, name: str) -> None:
        """Scroll section ``name`` to the top of the body and focus it (a run without GPU
        activity has no kernels or roofline: the key does nothing there)."""
        heading_id, focus_id = self.SECTIONS[name]
        heading = self.query_one(heading_id)
        body = self.query_one("#run-body", VerticalScroll)
        if not body.display or not heading.display:
            return
        self.query_one(focus_id).focus()
        body.scroll_to_widget(heading, top=True, animate=False)

    DEFAULT_CSS = """
    #run-body { height: 1fr; }
    #run-body > .heading { margin-top: 1; text-style: bold; }
    #run-body > DataTable { height: auto; max-height: 12; }
    #run-body > .note { color: $text-muted; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.run_id: int | None = None
        self.detail: dict[str, Any] | None = None
        self.doc: dict[str, Any] | None = None
        self.sort = 0
        self.plot_kind = "ops"
        self.message = "loading…"
        self._seq = 0  # the newest read; an older one that finishes late is dropped
        #: the width the kernels table's names were fitted to
        self.kernel_name_w = 0

    def compose(self) -> ComposeResult:
        color = not self.app.no_color
        yield Header()
        yield Static("loading…", id="run-status", markup=False, classes="status")
        with VerticalScroll(id="run-body"):
            yield Static("", id="run-title", markup=False)
            yield BreakdownBar(color=color, id="run-breakdown")
            yield Static("", id="run-nogpu", markup=False, classes="note")
            yield Static("", id="run-coverage", markup=False, classes="note")
            yield Static("Top ops", id="ops-heading", markup=False, classes="heading")
            yield DataTable(id="run-ops", cursor_type="row", zebra_stripes=True)
            yield Static("Top kernels", id="kernels-heading", markup=False, classes="heading")
            yield DataTable(id="run-kernels", cursor_type="row", zebra_stripes=True)
            yield Static("Roofline", id="roof-heading", markup=False, classes="heading")
            yield RooflinePlot(color=color, id="run-roofline")
            yield Static("", id="roof-note", markup=False, classes="note")
            yield Static("Communication", id="comm-heading", markup=False, classes="heading")
            yield Static("", id="run-comm", markup=False)
            yield Static("Telemetry", id="timeline-heading", markup=False, classes="heading")
            yield Timeline(color=color, id="run-timeline")
            yield Static("", id="timeline-note", markup=False, classes="note")
            yield Static("Advice and notes", id="advice-heading", markup=False, classes="heading")
            yield Static("", id="run-advice", markup=False)
        # compact and without Textual's palette key (^p still opens it): the section keys with
        # the others fit 80 columns
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self._set_visible(False)
        self.load(self.run_id if self.run_id is not None else self.app.run_id)

    def on_resize(self) -> None:
        # the plot shrinks with the terminal, keeping room for the status and the footer
        self.query_one(RooflinePlot).styles.height = max(8, min(24, self.size.height - 6))
        if self.doc is not None and self.size.width != getattr(self, "_name_w", None):
            self._fill_tables()
            self._show_communication()

    # ---------------------------------------------------------------- reading (a worker)

    def show_run(self, run_id: int) -> None:
        """Show ``run_id``."""
        if self.is_mounted:
            self.load(run_id)
        else:
            self.run_id = run_id

    def load(self, run_id: int | None) -> None:
        self.run_id = run_id
        self._seq += 1
        self._status("loading run…" if run_id is None else f"loading run {run_id}…")
        self.run_worker(partial(self._read, run_id, self._seq), thread=True, exclusive=True, group="run-read")

    def _read(self, run_id: int | None, seq: int, again: bool = False) -> None:
        """The worker (a thread): read the run, post what came of it as a :class:`RunRead`."""
        from gpuscope.errors import GpuscopeError, StoreBusyError

        try:
            detail = data.run_detail(self.app.db, run_id)
        except StoreBusyError:
            self.post_message(RunRead(run_id, seq, None, busy=True))
            return
        except data.NoStore as exc:
            self.post_message(RunRead(run_id, seq, None, problem=f"no store at {exc} yet: `gpuscope run -- CMD` or "
                                                                 "`gpuscope ingest TRACE` makes one"))
            return
        except GpuscopeError as exc:
            self.post_message(RunRead(run_id, seq, None, problem=str(exc)))
            return
        self.post_message(RunRead(run_id, seq, detail, again=again))

    @on(RunRead)
    def _got(self, read: RunRead) -> None:
        if read.busy:
            self._busy(read.run_id, read.seq)
        elif read.detail is None:
            self._status(read.problem)
        else:
            self._show(read.detail, read.seq, read.again)

    def _busy(self, run_id: int | None, seq: int) -> None:
        if seq != self._seq:
            return
        self._status("store busy, retrying", busy=True)
        self.set_timer(max(1.0, float(self.app.interval_s)),
                       lambda: self.load(run_id) if seq == self._seq else None)

    def _status(self, text: str, busy: bool = False) -> None:
        self.message = text
        status = self.query_one("#run-status", Static)
        status.update(safe_text(text, layout=True))  # messages quote file names
        status.set_class(busy, "busy")

    # ---------------------------------------------------------------- showing

    def _set_visible(self, shown: bool) -> None:
        self.query_one("#run-body").display = shown

    def _show(self, detail: dict[str, Any], seq: int | None = None, again: bool = False) -> None:
        if seq is not None and seq != self._seq:
            return  # a newer run was asked for meanwhile
        self.detail = detail
        doc = self.doc = detail["analysis"]
        run = doc["run"]
        self.run_id = run["id"]
        devs = devices_label(doc["devices"])
        self.query_one("#run-title", Static).update(safe_text(
            f"run {run['id']} '{run['name']}' ({run.get('source')}, {run.get('status')}) — {devs}"))
        gpu = bool(doc.get("gpu_activity"))
        breakdown = self.query_one(BreakdownBar)
        breakdown.display = gpu
        nogpu = self.query_one("#run-nogpu", Static)
        nogpu.display = not gpu
        if gpu:
            breakdown.set_time(doc["time_us"])
        else:
            nogpu.update(no_gpu_text(doc, detail.get("profiling")))
        coverage = self.query_one("#run-coverage", Static)
        coverage.display = gpu
        # the share of GPU time judged against a roof, and the largest unjudged ops with why
        coverage.update(safe_text(coverage_line(doc.get("coverage")) or ""))
        for wid in ("#kernels-heading", "#run-kernels", "#roof-heading", "#run-roofline"):
            self.query_one(wid).display = gpu
        self._fill_tables()
        self._show_plot("ops")
        self._show_timeline(detail)
        self._show_communication()
        self._show_advice(doc)
        self._set_visible(True)
        recording = run.get("status") == "recording"
        self._status(f"run {run['id']}: {len(doc['ops'])} ops, {len(doc['kernels'])} kernels shown; "
                     f"sorted by {SORTS[self.sort][0]} (s)"
                     + (f"; still recording, read again every {RECORDING_REFRESH_S:g} s" if recording else ""))
        if not again:  # a read again leaves the focus and the cursors where the user put them
            self.query_one("#run-ops", DataTable).focus()
        if recording:
            self.set_timer(RECORDING_REFRESH_S, partial(self._read_again, run["id"], self._seq))

    def _read_again(self, run_id: int, seq: int) -> None:
        """Read a recording run again, unless another run was asked for since."""
        if seq != self._seq:
            return
        if not self.is_current:  # not on screen: try again later, nothing read meanwhile
            self.set_timer(RECORDING_REFRESH_S, partial(self._read_again, run_id, seq))
            return
        self.run_worker(partial(self._read, run_id, seq, True), thread=True, exclusive=True, group="run-read")

    def busy_us(self) -> float:
        """The whole the tables' shares are of: GPU busy time, or the ops' CPU time on a CPU-only run."""
        doc = self.doc or {}
        t = doc.get("time_us") or {}
        if doc.get("gpu_activity"):
            return float(t.get("compute", 0.0) + t.get("communication", 0.0) + t.get("memory", 0.0))
        return sum(float(o.get("kernel_us") or 0.0) for o in doc.get("ops") or ())

    def _fill_tables(self) -> None:
        doc = self.doc
        if doc is None:
            return
        whole = self.busy_us()
        self._name_w = width = self.size.width or 80
        time_col = "GPU time" if doc.get("gpu_activity") else "CPU time"
        for kind, table_id, name_col, cells in (("ops", "#run-ops", "op [shapes]", op_cells),
                                                 ("kernels", "#run-kernels", "kernel", kernel_cells)):
            table = self.query_one(table_id, DataTable)
            keep = self._cursor_key(table)
            table.clear(columns=True)
            headers = (name_col, time_col if kind == "ops" else "time", "share", "bound", "roof", "saved")
            table.add_columns(*headers)
            items = doc[kind]
            name_w = name_width(width, [cells(item, whole, 1) for item in items], headers)
            shown = None
            if kind == "kernels":
                self.kernel_name_w = name_w
                shown = kernel_names(items, name_w)
            for key in sorted_keys(items, kind, self.sort):
                i = int(key.split(":")[1])
                row = (kernel_cells(items[i], whole, name_w, shown[i]) if shown is not None
                       else cells(items[i], whole, name_w))
                table.add_row(*(plain_cell(c) for c in row), key=key)
            if keep is not None and keep in table.rows:
                table.move_cursor(row=table.get_row_index(keep))
        by = SORTS[self.sort][0]
        self.query_one("#ops-heading", Static).update(
            f"Top {len(doc['ops'])} ops by {by}" + (" (CPU time)" if not doc.get("gpu_activity") else ""))
        self.query_one("#kernels-heading", Static).update(f"Top {len(doc['kernels'])} kernels by {by}")

    @staticmethod
    def _cursor_key(table: DataTable) -> Any:
        if not table.row_count:
            return None
        try:
            return table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        except Exception:  # no such cell (an empty table)
            return None

    def _show_plot(self, kind: str) -> None:
        doc = self.doc
        if doc is None or not doc.get("gpu_activity"):
            self.query_one("#roof-note", Static).display = False
            return
        self.plot_kind = kind
        points = points_from_analysis(doc, kind)
        peak, bw, dtype, dev = dominant_roof(doc)
        plot = self.query_one(RooflinePlot)
        plot.set_data(points, peak, bw)
        placed = sum(1 for p in points if p.intensity and p.flops_per_s)
        if peak or bw:
            roof = (f"{dev}: memory roof {fmt_rate(bw, 'B/s')}, compute roof {fmt_rate(peak, 'FLOP/s')} ({dtype})")
        else:
            roof = "no roof: the GPU is not in the spec database (points only)"
        self.query_one("#roof-heading", Static).update(f"Roofline of the {kind} ({placed} of {len(points)} placed)")
        note = self.query_one("#roof-note", Static)
        note.display = True
        note.update(f"{safe_text(roof)}. ■ compute ● memory ▼ cache ▲ latency ? unknown ◆ selected; "
                    "rows without FLOPs or bytes have no place on a log scale.")

    def _show_timeline(self, detail: dict[str, Any]) -> None:
        from gpuscope.render.links import link_series

        doc = detail["analysis"]
        run = doc["run"]
        # NVLink / XGMI rates against the spec the run was judged on, as the timeline export draws them
        links = link_series(doc.get("devices") or [], detail["samples"])
        tl = build(detail["devices"], detail["samples"], detail["annotations"], run.get("started_ns"), run.get("ended_ns"),
                   links=links)
        self.query_one(Timeline).set_data(tl)
        note = self.query_one("#timeline-note", Static)
        if tl is None:
            note.update("No telemetry in this run (ingested traces carry none; `gpuscope run` records power and "
                        "utilization while it runs)." + (f" {len(detail['annotations'])} profiler windows/marks."
                                                          if detail["annotations"] else ""))
        else:
            kinds = sorted({a.kind for a in detail["annotations"]})
            note.update("\n".join(["═ profiler window  ▼ mark" + (f" ({', '.join(kinds)})" if kinds else " (none in this run)"),
                                    *(safe_text(line) for line in link_lines(links))]))

    def _show_communication(self) -> None:
        """The run's collectives judged against their link, the exposed communication and, with
        several ranks, the straggler: ``analyze``'s Communication section (the same document
        block, from analyzers/comm.py, overlap.py and stragglers.py, drawn by the same
        function); hidden for a run without collectives."""
        from gpuscope.render.communication import communication_lines

        doc = self.doc or {}
        lines = communication_lines(doc, max(40, (self.size.width or 80) - 4))
        shown = bool(lines)
        self.query_one("#comm-heading", Static).display = shown
        body = self.query_one("#run-comm", Static)
        body.display = shown
        if shown:
            # the first two lines are the text report's blank line and heading: ours is above
            body.update(safe_text("\n".join(lines[2:]).strip("\n"), layout=True))

    def _show_advice(self, doc: dict[str, Any]) -> None:
        lines = [f"• {a['message']}" for a in doc.get("advice") or ()]
        lines += [f"note: {n}" for n in doc.get("notes") or ()]
        self.query_one("#run-advice", Static).update("\n".join(safe_text(line) for line in lines)
                                                     or "No advice for this run.")

    # ---------------------------------------------------------------- keys and selection

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        key = event.row_key.value if event.row_key is not None else None
        if not key or event.data_table is not self.focused:
            return  # filling a table moves its cursor too: only the table in use picks the plot
        kind = key.split(":")[0]
        if kind != self.plot_kind:
            self._show_plot(kind)
        self.query_one(RooflinePlot).select(key)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        """A click on a column header sorts both tables by it (time and share alike)."""
        by_column = {0: "name", 1: "time", 2: "time", 3: "bound", 4: "% of roof", 5: "saved at roof"}
        label = by_column.get(event.column_index)
        if label is not None:
            self.set_sort([name for name, _ in SORTS].index(label))

    def action_cycle_sort(self) -> None:
        self.set_sort((self.sort + 1) % len(SORTS))

    def set_sort(self, sort: int) -> None:
        self.sort = sort
        self._fill_tables()
        if self.doc is not None:
            self._status(f"run {self.run_id}: sorted by {SORTS[self.sort][0]} (s)")

    def action_back(self) -> None:
        self.app.switch_mode("runs")

    def action_profile_window(self) -> None:
        """``p``: a profiler window now in the run shown, when it is recording (``gpuscope profile``)."""
        from ..windows import start_window_request

        start_window_request(self, self.run_id if self.run_id is not None else self.app.run_id)
