"""The runs screen (2): the stored runs, newest first, in a table that follows the store.

Every few seconds a worker reads ``gpuscope runs``' rows (``tui/data.runs``, one short
read-only connection) so that a run another ``gpuscope run`` is still recording updates as it
goes; only the cells that changed are rewritten. ``/`` filters by typing (name, GPU, status, source,
command), ``s`` cycles the sort column (a click on a header sorts by it, a second click turns
it round), Enter or a click on the selected row opens the run, ``c`` marks it for compare (the status line
names each mark by id, name and GPU: two runs of one model on two GPUs share a name).
Filter and sort see every run; the table holds the first ``ROWS_PAGE`` of them and the next
page when the cursor reaches its last row.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Footer, Header, Input, Static

from gpuscope.render.table import fmt_ns_time, fmt_us, shorten

from .. import data
from ..text import safe_text
from .base import GpuscopeScreen

#: How often the table is read again (seconds): often enough to follow a recording run, rarely
#: enough that the store is almost never held.
REFRESH_S = 2.0
#: A refresh skips the read when the store's files are as they were at the last read and no run
#: is recording (10,000 runs cost ~0.15 s a read, 7 % of a core every 2 s: bench/bench_runs10k.py);
#: it reads anyway this often (seconds), in case two commits in one tick of the file clock left
#: the files' sizes as they were.
FORCE_READ_S = 30.0

HOW_TO_MAKE = "make one with `gpuscope run -- CMD` or `gpuscope ingest TRACE`"

#: Rows the table takes at a time. Textual's DataTable measures every cell of every row it is
#: given (~0.3 ms a row here): 10,000 runs took seconds to show, to sort and to filter
#: (bench/bench_runs10k.py); a page is more than anyone scrolls through, the rest is a filter,
#: a sort or the last row away.
ROWS_PAGE = 500


@dataclass(frozen=True)
class Column:
    """A table column: its key, header, alignment, and how rows sort by it."""

    key: str
    header: str
    align: str = "l"
    #: what a row sorts by (None: the column does not sort)
    sort: Callable[[dict[str, Any]], Any] | None = None
    #: sort largest first (numbers, times)
    descending: bool = False


def fit_columns(columns: Sequence[Column], widths: dict[str, int], avail: int,
                drop: Sequence[str | tuple[str, ...]], flex: str | None = None,
                flex_min: int = 12) -> tuple[list[Column], int | None]:
    """The columns that fit ``avail`` cells (each cell padded by one on either side, as DataTable
    draws it) and the width of the ``flex`` column: the ``flex`` column narrows to ``flex_min``
    first, then the columns named in ``drop`` go (a tuple: together), in that order, until the
    rest fits (as ``render.table.table(..., drop=...)`` does for text)."""
    cols = list(columns)

    def need(cs: list[Column], flex_w: int | None) -> int:
        return sum((flex_w if c.key == flex and flex_w is not None else widths[c.key]) + 2 for c in cs)

    flex_w = widths.get(flex) if flex else None
    if flex_w is not None and need(cols, flex_w) > avail:
        flex_w = max(flex_min, flex_w - (need(cols, flex_w) - avail))
    for key in drop:
        if need(cols, flex_w) <= avail:
            break
        gone = {key} if isinstance(key, str) else set(key)
        cols = [c for c in cols if c.key not in gone]
        if flex_w is not None and flex:
            flex_w = max(flex_min, min(widths[flex], widths[flex] - (need(cols, widths[flex]) - avail)))
    return cols, flex_w


def cell_text(value: Any, align: str) -> Text:
    """A table cell as plain text (never markup: run and op names are data), its control
    characters shown (tui/text.py)."""
    return Text("-" if value is None else safe_text(value), justify="right" if align == "r" else "left",
                no_wrap=True, overflow="ellipsis")


def _duration_us(r: dict[str, Any], now_ns: int) -> float | None:
    if r.get("started_ns") and r.get("ended_ns"):
        return (r["ended_ns"] - r["started_ns"]) / 1e3
    if r.get("status") == "recording" and r.get("started_ns"):
        return max(0, now_ns - r["started_ns"]) / 1e3  # still going: so far
    return None


def _started(ns: int | None, wide: bool) -> str:
    text = fmt_ns_time(ns)
    # narrow terminals: month-day hour:minute, the year and seconds are rarely what tells runs apart
    return text if wide or len(text) != 19 else text[5:16]


RUN_COLUMNS = (
    Column("mark", " ", sort=None),
    Column("id", "id", "r", lambda r: r["id"], True),
    Column("name", "name", "l", lambda r: str(r["name"]).lower()),
    Column("gpu", "gpu", "l", lambda r: str(r.get("gpu") or "").lower()),
    Column("status", "status", "l", lambda r: r["status"]),
    Column("source", "source", "l", lambda r: r["source"] or ""),
    Column("started", "started", "l", lambda r: r["started_ns"] or 0, True),
    Column("duration", "duration", "r", lambda r: _duration_us(r, time.time_ns()) or -1.0, True),
    Column("devices", "dev", "r", lambda r: r["devices"], True),
    Column("kernels", "kernels", "r", lambda r: r["kernels"], True),
    Column("ops", "ops", "r", lambda r: r["ops"], True),
    Column("samples", "samples", "r", lambda r: r["samples"], True),
    Column("exit", "exit", "r", lambda r: -1 if r["exit_code"] is None else r["exit_code"], True),
)
#: what goes first when the terminal is narrow (what identifies a run stays)
RUN_DROP = ("samples", "devices", "exit", "ops", "source", "kernels", "duration", "started", "status")
#: the order ``s`` walks through: None is the store's (newest first)
SORT_CYCLE: tuple[str | None, ...] = (None, "name", "gpu", "status", "source", "started", "duration", "devices",
                                      "kernels", "ops", "exit", "id")


def run_cells(r: dict[str, Any], marks: list[int], wide: bool, now_ns: int) -> dict[str, Any]:
    """One run's cells as strings, by column key."""
    mark = ""
    if r["id"] in marks:
        mark = "AB"[marks.index(r["id"])]
    return {
        "mark": mark, "id": r["id"], "name": r["name"], "gpu": shorten(str(r.get("gpu") or "-"), 24), "status": r["status"],
        "source": r["source"],
        "started": _started(r["started_ns"], wide), "duration": fmt_us(_duration_us(r, now_ns)),
        "devices": r["devices"], "kernels": r["kernels"], "ops": r["ops"], "samples": r["samples"],
        "exit": "-" if r["exit_code"] is None else r["exit_code"],
    }


def run_matches(r: dict[str, Any], needle: str) -> bool:
    """Whether the filter text is in the run's name, GPUs, status, source or command."""
    needle = needle.strip().lower()
    if not needle:
        return True
    return any(needle in str(r.get(k) or "").lower() for k in ("name", "gpu", "status", "source", "command"))


def mark_label(run_id: int, rows: Sequence[dict[str, Any]]) -> str:
    """A run marked for compare as the status line names it: id, name and GPUs (two runs of one
    model on two GPUs share a name: the id and the GPU tell them apart)."""
    r = next((r for r in rows if r["id"] == run_id), None)
    if r is None:
        return str(run_id)
    gpu = f" on {r['gpu']}" if r.get("gpu") else ""
    return f"{run_id} '{shorten(str(r['name']), 24)}'{gpu}"


class RunsRead(Message, bubble=False):
    """What the runs screen's worker read: ``rows`` (None when the read failed: the screen keeps
    the rows it has), the status line's ``message`` ("" when the read worked) and the store's
    ``stamp`` taken before the read (:func:`tui.data.store_stamp`)."""

    def __init__(self, rows: list[dict[str, Any]] | None, message: str, stamp: Any = None) -> None:
        super().__init__()
        self.rows = rows
        self.message = message
        self.stamp = stamp


class RunsScreen(GpuscopeScreen):
    """Stored runs."""

    BINDINGS = [
        # priority: shown in the footer although the table has its own Enter
        Binding("enter", "open", "open", priority=True),
        Binding("c", "mark", "compare mark"),
        Binding("slash", "filter", "filter", key_display="/"),
        Binding("s", "cycle_sort", "sort"),
        Binding("escape", "clear_filter", "clear filter", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        #: the rows last read (store order: newest first)
        self.rows: list[dict[str, Any]] = []
        #: the filter text
        self.filter_text = ""
        #: the sort column (None: newest first) and whether it is turned round
        self.sort_key: str | None = None
        self.sort_reverse = False
        #: what the status line says about the store ("" when the last read worked)
        self.store_message = ""
        self._shown_keys: list[str] = []
        self._shown_cols: list[str] = []
        self._shown_cells: dict[str, dict[str, Any]] = {}
        self._shown_widths: dict[str, int] = {}
        self._loaded = False
        #: how many of the visible rows the table holds (pages of ``ROWS_PAGE``)
        self.row_limit = ROWS_PAGE
        #: how many rows matched the filter at the last show
        self._matched = 0
        #: the store's files when the rows were read, and when (monotonic seconds)
        self._read_stamp: Any = None
        self._read_at = 0.0
        # the stamp a read in flight was started for: a refresh that comes before it answers
        # (a loaded machine, a slow store) would only read the same store again
        self._reading_stamp: Any = None

    DEFAULT_CSS = """
    RunsScreen #runs-table { height: 1fr; }
    """

    def compose(self) -> ComposeResult:
        self.sub_title = "runs"
        yield Header()
        yield Input(placeholder="filter: name, GPU, status, source or command (Esc clears)", id="runs-filter")
        yield Static("reading the store…", id="runs-status", classes="status")
        table: DataTable[Any] = DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield table
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#runs-filter", Input).display = False
        self.set_interval(REFRESH_S, self.reload)
        self.reload()

    def on_screen_resume(self) -> None:
        self.query_one("#runs-table", DataTable).focus()
        if self._loaded:
            self.show()  # the marks may have changed on another screen
            self.reload()

    def on_resize(self) -> None:
        if self._loaded:
            self.show()

    # -- reading ---------------------------------------------------------------------------

    def reload(self) -> None:
        """Read the runs again (in a worker), unless another screen is showing or nothing was
        written to the store since the last read."""
        if self._loaded and not self.is_current:
            return
        # taken before the read: a write during the read changes it for the next refresh
        stamp = data.store_stamp(self.app.db)
        if (self._loaded and stamp == self._read_stamp and not self.store_message
                and time.monotonic() - self._read_at < FORCE_READ_S
                and not any(r["status"] == "recording" for r in self.rows)):
            return
        if self._reading_stamp is not None and self._reading_stamp == stamp:
            return
        self._reading_stamp = stamp
        self._read_runs(stamp)

    @work(thread=True, exclusive=True, group="runs-read")
    def _read_runs(self, stamp: Any = None) -> None:
        from gpuscope.errors import StoreBusyError, StoreError

        db = self.app.db
        rows: list[dict[str, Any]] | None = None
        try:
            rows = data.runs(db)
            message = "" if rows else f"The store {db} has no runs yet: {HOW_TO_MAKE}."
        except data.NoStore:
            rows = []
            message = f"No store at {db} yet: {HOW_TO_MAKE}."
        except StoreBusyError:
            message = "store busy, retrying"  # keep the rows we have; the next refresh tries again
        except StoreError as exc:
            message = str(exc)
        self.post_message(RunsRead(rows, message, stamp))

    @on(RunsRead)
    def _got_rows(self, read: RunsRead) -> None:
        if read.rows is not None:
            self.rows = read.rows
            self._read_stamp, self._read_at = read.stamp, time.monotonic()
        self._reading_stamp = None
        self.store_message = read.message
        self._loaded = True
        self.show()

    # -- showing ---------------------------------------------------------------------------

    def visible_rows(self) -> list[dict[str, Any]]:
        """The rows the table shows: filtered, then sorted."""
        rows = [r for r in self.rows if run_matches(r, self.filter_text)]
        if self.sort_key is not None:
            col = next(c for c in RUN_COLUMNS if c.key == self.sort_key)
            assert col.sort is not None
            rows.sort(key=col.sort, reverse=col.descending != self.sort_reverse)
        elif self.sort_reverse:
            rows.reverse()
        return rows

    def show(self) -> None:
        """Bring the table and the status line in line with the rows, marks, filter and sort;
        rewrite only the cells that changed when the same runs are shown in the same order."""
        table = self.query_one("#runs-table", DataTable)
        marks = list(self.app.compare_ids)
        width = self.size.width or self.app.size.width
        wide = width >= 120
        now_ns = time.time_ns()
        matched = self.visible_rows()
        rows = matched[: self.row_limit]
        cells = {str(r["id"]): run_cells(r, marks, wide, now_ns) for r in rows}
        widths = {c.key: max([len(c.header)] + [len(str(cells[k][c.key])) for k in cells]) for c in RUN_COLUMNS}
        widths["mark"] = 1
        cols, name_w = fit_columns(RUN_COLUMNS, widths, max(20, width - 2), RUN_DROP, flex="name", flex_min=12)
        if name_w is not None:
            for k in cells:
                cells[k]["name"] = shorten(cells[k]["name"], name_w)
        keys = list(cells)
        col_keys = [c.key for c in cols]
        # explicit column widths: DataTable's own measuring of a column happens later, on idle,
        # and a real terminal under load once drew the first fill at the headers' widths only
        col_w = {c.key: max(len(str(cells[k][c.key])) for k in keys) if keys else 1 for c in cols}
        if name_w is not None and "name" in col_w:
            col_w["name"] = min(col_w["name"], name_w)
        grown = any(col_w[k] > self._shown_widths.get(k, 0) for k in col_keys)
        n_old = len(self._shown_keys)
        # the next page below the same rows: add its rows only (a rebuild measures them all again)
        appended = (col_keys == self._shown_cols and not grown and len(keys) > n_old > 0
                    and keys[:n_old] == self._shown_keys)
        if appended:
            self._update_cells(table, keys[:n_old], cols, cells)
            for k in keys[n_old:]:
                table.add_row(*(cell_text(cells[k][c.key], c.align) for c in cols), key=k)
        elif col_keys != self._shown_cols or keys != self._shown_keys or grown:
            selected = self.selected_run_id()
            # columns rebuilt with the rows: a column keeps the width of its first fill
            # otherwise, and a narrow first fill (an empty store) would cut later cells
            table.clear(columns=True)
            for c in cols:
                label = c.header
                if c.key == self.sort_key:
                    label += " ▲" if self.sort_reverse else " ▼"
                self._shown_widths[c.key] = w = max(col_w[c.key], len(label))
                table.add_column(label, key=c.key, width=w)
            for k in keys:
                table.add_row(*(cell_text(cells[k][c.key], c.align) for c in cols), key=k)
            if selected is not None and str(selected) in cells:
                table.move_cursor(row=keys.index(str(selected)), animate=False)
        else:
            self._update_cells(table, keys, cols, cells)
        self._shown_cols, self._shown_keys, self._shown_cells = col_keys, keys, cells
        self._matched = len(matched)
        self._show_status(len(matched), len(rows), marks)

    def _update_cells(self, table: DataTable[Any], keys: list[str], cols: list[Column],
                      cells: dict[str, dict[str, Any]]) -> None:
        for k in keys:
            old = self._shown_cells.get(k, {})
            for c in cols:
                if old.get(c.key) != cells[k][c.key]:
                    table.update_cell(k, c.key, cell_text(cells[k][c.key], c.align), update_width=True)

    def _show_status(self, n_matched: int, n_in_table: int, marks: list[int]) -> None:
        status = self.query_one("#runs-status", Static)
        status.set_class(self.store_message == "store busy, retrying", "busy")
        if self.store_message and (self.store_message != "store busy, retrying" or not self.rows):
            status.update(Text(safe_text(self.store_message, layout=True)))
            return
        parts = [f"{n_matched} of {len(self.rows)} runs" if self.filter_text else f"{len(self.rows)} runs"]
        if n_in_table < n_matched:
            parts.append(f"first {n_in_table} listed, more from the last row")
        if self.filter_text:
            parts.append(f"filter '{safe_text(self.filter_text)}'")
        parts.append(f"sorted by {self.sort_key or 'newest'}{' (reversed)' if self.sort_reverse else ''}")
        if marks:
            parts.append("compare: " + " vs ".join(f"{'AB'[i]} {mark_label(m, self.rows)}" for i, m in enumerate(marks))
                         + ("" if len(marks) == 2 else " (c marks B)"))
        if self.store_message:
            parts.insert(0, self.store_message)
        status.update(Text(" · ".join(parts)))

    def selected_run_id(self) -> int | None:
        """The run under the cursor (None when the table is empty)."""
        table = self.query_one("#runs-table", DataTable)
        if table.row_count == 0:
            return None
        try:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        except Exception:  # cursor outside the rows
            return None
        return None if key.value is None else int(key.value)

    # -- actions ---------------------------------------------------------------------------

    def action_open(self) -> None:
        box = self.query_one("#runs-filter", Input)
        if box.has_focus:  # Enter in the filter: keep it, back to the table
            self.on_input_submitted(Input.Submitted(box, box.value))
            return
        run_id = self.selected_run_id()
        if run_id is not None:
            self.app.open_run(run_id)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        # the cursor on the last row listed (moved there, or put back there on the selected run
        # after a rebuild): the next page of rows below it
        if event.cursor_row >= len(self._shown_keys) - 1 and self._matched > len(self._shown_keys):
            self.row_limit = len(self._shown_keys) + ROWS_PAGE
            self.show()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        # Enter on the table, or a click on the highlighted row
        event.stop()
        if event.row_key.value is not None:
            self.app.open_run(int(event.row_key.value))

    def action_mark(self) -> None:
        run_id = self.selected_run_id()
        if run_id is None:
            return
        self.app.mark_for_compare(run_id)
        if self.is_current:
            self.show()

    def action_filter(self) -> None:
        box = self.query_one("#runs-filter", Input)
        box.display = True
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value
        self.row_limit = ROWS_PAGE  # other rows: from their first page
        self.show()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        box = self.query_one("#runs-filter", Input)
        if not box.value:
            box.display = False
        self.query_one("#runs-table", DataTable).focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#runs-filter", Input)
        box.value = ""
        box.display = False
        self.filter_text = ""
        self.row_limit = ROWS_PAGE
        self.query_one("#runs-table", DataTable).focus()
        self.show()

    def action_cycle_sort(self) -> None:
        i = SORT_CYCLE.index(self.sort_key) if self.sort_key in SORT_CYCLE else 0
        self.sort_key = SORT_CYCLE[(i + 1) % len(SORT_CYCLE)]
        self.sort_reverse = False
        self._shown_cols = []  # headers carry the sort arrow
        self.row_limit = ROWS_PAGE
        self.show()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        key = event.column_key.value
        if key not in SORT_CYCLE:
            return
        if key == self.sort_key:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_key, self.sort_reverse = key, False
        self._shown_cols = []
        self.row_limit = ROWS_PAGE
        self.show()
