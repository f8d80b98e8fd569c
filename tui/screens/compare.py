"""The compare screen (4): two runs marked on the runs screen, op by op, as ``gpuscope compare``.

A worker reads both runs' analyses and compares them with the same analyzer the command uses
(``tui/data.compare`` -> ``analyzers.compare.compare_docs``). The screen shows the totals, then
in tabs the matched ops (GPU time, bound class and percent of roof on each side, the ratio B/A
and the difference), the ops found on one side only, the time by kernel family and the totals
by category. ``s`` cycles the sort of the table in view, a click on a header sorts by it; the
line under the table shows the selected row whole (what a narrow terminal leaves out).
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Footer, Header, Static, TabbedContent, TabPane

from gpuscope.render.analysis import BOUND_LABEL, bound_label, dims, roof_pct
from gpuscope.render.compare import _ratio as fmt_ratio  # the command's own spelling of B/A
from gpuscope.render.table import fmt_us, shorten

from .. import data
from ..text import safe_text
from .base import GpuscopeScreen
from .runs import Column, cell_text, fit_columns

#: how long to wait before reading again when the store was busy (seconds)
RETRY_S = 2.0

HOW_TO_MARK = ("Compare needs two runs: on the runs screen (2) select a run and press c (it becomes A, "
               "the baseline), then another and press c (B); compare opens with both.")


def op_key(o: dict[str, Any]) -> str:
    """The table row key of an op signature: its name, input shapes and dtypes, as the
    analyzer matches them."""
    return json.dumps([o["name"], o.get("input_dims"), o.get("input_types")], separators=(",", ":"))


def _neg(v: float | None) -> float:
    """Largest first, None last."""
    return float("inf") if v is None else -v


def _side(m: dict[str, Any], side: str, key: str) -> Any:
    return (m.get(side) or {}).get(key)


# (column, cell of a row); the sort functions are in the Column
Cell = Callable[[dict[str, Any]], Any]

MATCHED: tuple[tuple[Column, Cell], ...] = (
    (Column("op", "op", "l", lambda m: m["name"]), lambda m: m["name"]),
    (Column("shapes", "input shapes", "l", lambda m: dims(m["input_dims"])), lambda m: dims(m["input_dims"])),
    (Column("a_time", "A time", "r", lambda m: _neg(_side(m, "a", "kernel_us"))),
     lambda m: fmt_us(_side(m, "a", "kernel_us"))),
    (Column("a_bound", "A bound", "l", lambda m: bound_label(m["a"])), lambda m: bound_label(m["a"])),
    (Column("a_roof", "A roof", "r", lambda m: _neg(_side(m, "a", "pct_of_roof"))), lambda m: roof_pct(m["a"])),
    (Column("b_time", "B time", "r", lambda m: _neg(_side(m, "b", "kernel_us"))),
     lambda m: fmt_us(_side(m, "b", "kernel_us"))),
    (Column("b_bound", "B bound", "l", lambda m: bound_label(m["b"])), lambda m: bound_label(m["b"])),
    (Column("b_roof", "B roof", "r", lambda m: _neg(_side(m, "b", "pct_of_roof"))), lambda m: roof_pct(m["b"])),
    (Column("ratio", "B/A", "r", lambda m: _neg(m["ratio"])), lambda m: fmt_ratio(m["ratio"])),
    (Column("delta", "B-A", "r", lambda m: -m["delta_us"]), lambda m: fmt_us(m["delta_us"])),
)
#: what goes first when the terminal is narrow, each side's pair together (the line under the
#: table still shows the selected row whole)
MATCHED_DROP = ("delta", "shapes", ("a_roof", "b_roof"), ("a_bound", "b_bound"))

ONLY: tuple[tuple[Column, Cell], ...] = (
    (Column("op", "op", "l", lambda r: r["name"]), lambda r: r["name"]),
    (Column("shapes", "input shapes", "l", lambda r: dims(r["input_dims"])), lambda r: dims(r["input_dims"])),
    (Column("calls", "calls", "r", lambda r: -r["count"]), lambda r: r["count"]),
    (Column("time", "time", "r", lambda r: -r["kernel_us"]), lambda r: fmt_us(r["kernel_us"])),
    (Column("bound", "bound", "l", lambda r: BOUND_LABEL.get(r.get("bound"), "-")),
     lambda r: BOUND_LABEL.get(r.get("bound"), "-")),
)
ONLY_DROP = ("calls", "shapes", "bound")

FAMILIES: tuple[tuple[Column, Cell], ...] = (
    (Column("family", "kernel family", "l", lambda f: f["family"]), lambda f: f["family"]),
    (Column("a", "A", "r", lambda f: -f["a_us"]), lambda f: fmt_us(f["a_us"])),
    (Column("b", "B", "r", lambda f: -f["b_us"]), lambda f: fmt_us(f["b_us"])),
    (Column("ratio", "B/A", "r", lambda f: _neg(f["ratio"])), lambda f: fmt_ratio(f["ratio"])),
    (Column("delta", "B-A", "r", lambda f: -f["delta_us"]), lambda f: fmt_us(f["delta_us"])),
)

TOTALS: tuple[tuple[Column, Cell], ...] = (
    (Column("what", "", "l"), lambda t: t["what"]),
    (Column("a", "A", "r"), lambda t: t["a"]),
    (Column("b", "B", "r"), lambda t: t["b"]),
    (Column("ratio", "B/A", "r"), lambda t: t["ratio"]),
)

TOTAL_ROWS = (("gpu_us", "GPU busy"), ("compute", "compute"), ("communication", "communication"),
              ("memory", "memory"), ("idle", "idle"), ("matched_ops_us", "matched ops"))


def totals_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The totals tab: time by category, then compute time by bound class, A and B."""
    t = doc["totals"]
    rows = [{"key": k, "what": label, "a": fmt_us(t[k]["a"]), "b": fmt_us(t[k]["b"]), "ratio": fmt_ratio(t[k]["ratio"])}
            for k, label in TOTAL_ROWS]
    ra, rb = t["roofline_us"]["a"] or {}, t["roofline_us"]["b"] or {}
    for k in ("compute_bound", "memory_bound", "latency_bound", "unknown"):
        a, b = ra.get(k), rb.get(k)
        rows.append({"key": k, "what": f"{BOUND_LABEL[k]}-bound", "a": fmt_us(a), "b": fmt_us(b),
                     "ratio": fmt_ratio(b / a if a and b is not None else None)})
    return rows


def run_label(r: dict[str, Any]) -> str:
    """``run ID 'NAME' [GPUs]`` as the command's report heads each side."""
    devs = ", ".join(sorted({d.get("spec") or d.get("name") or d["key"] for d in r["devices"]})) or "no GPU"
    return f"run {r['id']} '{r['name']}' [{devs}]"


class CompareTable:
    """One tab's table: its columns, its rows, how they are keyed, sorted and fitted."""

    def __init__(self, table_id: str, spec: Sequence[tuple[Column, Cell]], drop: Sequence[str | tuple[str, ...]],
                 flex: str | None, key: Callable[[dict[str, Any]], str]) -> None:
        self.table_id, self.spec, self.drop, self.flex, self.key = table_id, spec, drop, flex, key
        self.rows: list[dict[str, Any]] = []
        self.sort_key: str | None = None
        self.sort_reverse = False

    def sorted_rows(self) -> list[dict[str, Any]]:
        rows = list(self.rows)
        if self.sort_key is not None:
            col = next(c for c, _ in self.spec if c.key == self.sort_key)
            if col.sort is not None:
                rows.sort(key=col.sort, reverse=self.sort_reverse)
        elif self.sort_reverse:
            rows.reverse()
        return rows

    def sortable(self) -> list[str | None]:
        return [None] + [c.key for c, _ in self.spec if c.sort is not None]

    def fill(self, table: DataTable[Any], width: int) -> None:
        rows = self.sorted_rows()
        cells = {self.key(r): {c.key: "-" if f(r) is None else str(f(r)) for c, f in self.spec} for r in rows}
        widths = {c.key: max([len(c.header) + 2] + [len(cells[k][c.key]) for k in cells]) for c, _ in self.spec}
        cols, flex_w = fit_columns([c for c, _ in self.spec], widths, max(20, width), self.drop, flex=self.flex,
                                   flex_min=14)
        if flex_w is not None and self.flex:
            for k in cells:
                cells[k][self.flex] = shorten(cells[k][self.flex], flex_w)
        selected = None
        if table.row_count:
            try:
                selected = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
            except Exception:
                selected = None
        table.clear(columns=True)
        for c in cols:
            arrow = (" ▲" if self.sort_reverse else " ▼") if c.key == self.sort_key else ""
            table.add_column(c.header + arrow, key=c.key)
        for k, row in cells.items():
            table.add_row(*(cell_text(row[c.key], c.align) for c in cols), key=k)
        if selected in cells:
            table.move_cursor(row=list(cells).index(selected), animate=False)


class PairCompared(Message, bubble=False):
    """The compare screen's worker compared ``pair`` (A, B): ``doc`` (``gpuscope compare
    --json``'s document) when it worked, else None and the head line's ``message``."""

    def __init__(self, pair: tuple[int, int], doc: dict[str, Any] | None, message: str) -> None:
        super().__init__()
        self.pair = pair
        self.doc = doc
        self.message = message


class CompareScreen(GpuscopeScreen):
    """Two runs compared."""

    BINDINGS = [
        Binding("escape", "back", "back to runs"),
        Binding("s", "cycle_sort", "sort"),
        # priority: the focused table would take ←/→ to scroll sideways (its columns are fitted
        # to the terminal, so there is nothing to its side)
        Binding("left", "switch_tab(-1)", "tab", key_display="←", priority=True),
        Binding("right", "switch_tab(1)", "tab", key_display="→", priority=True),
    ]

    #: the tabs in the order ←/→ walk through them
    TAB_ORDER = ("matched", "only_a", "only_b", "families", "totals")

    def action_switch_tab(self, step: int) -> None:
        """←/→: the previous or next tab (round), its table focused."""
        tabs = self.query_one("#compare-tabs", TabbedContent)
        if not tabs.display:
            return
        i = self.TAB_ORDER.index(self.active_table()) if self.active_table() in self.TAB_ORDER else 0
        name = self.TAB_ORDER[(i + step) % len(self.TAB_ORDER)]
        tabs.active = f"tab-{name}"
        self.query_one(f"#{self.tables[name].table_id}", DataTable).focus()
        self._show_detail()

    def __init__(self) -> None:
        super().__init__()
        #: the pair asked for (baseline first) and the one shown
        self.pair: tuple[int, int] | None = None
        self.shown_pair: tuple[int, int] | None = None
        #: the last comparison document (``gpuscope compare --json``'s)
        self.doc: dict[str, Any] | None = None
        self.message = ""
        self._reading: tuple[int, int] | None = None
        self.tables = {
            "matched": CompareTable("compare-matched", MATCHED, MATCHED_DROP, "op", op_key),
            "only_a": CompareTable("compare-only-a", ONLY, ONLY_DROP, "op", op_key),
            "only_b": CompareTable("compare-only-b", ONLY, ONLY_DROP, "op", op_key),
            "families": CompareTable("compare-families", FAMILIES, ("delta",), "family", lambda f: f["family"]),
            "totals": CompareTable("compare-totals", TOTALS, (), None, lambda t: t["key"]),
        }

    DEFAULT_CSS = """
    CompareScreen #compare-tabs { height: 1fr; }
    CompareScreen TabPane { height: 1fr; padding: 0; }
    CompareScreen DataTable { height: 1fr; }
    CompareScreen #compare-detail { height: auto; max-height: 4; }
    """

    def compose(self) -> ComposeResult:
        self.sub_title = "compare"
        yield Header()
        yield Static(HOW_TO_MARK, id="compare-head", classes="status")
        with TabbedContent(id="compare-tabs", initial="tab-matched"):
            with TabPane("matched", id="tab-matched"):
                yield DataTable(id="compare-matched", cursor_type="row", zebra_stripes=True)
            with TabPane("only A", id="tab-only_a"):
                yield DataTable(id="compare-only-a", cursor_type="row", zebra_stripes=True)
            with TabPane("only B", id="tab-only_b"):
                yield DataTable(id="compare-only-b", cursor_type="row", zebra_stripes=True)
            with TabPane("families", id="tab-families"):
                yield DataTable(id="compare-families", cursor_type="row", zebra_stripes=True)
            with TabPane("totals", id="tab-totals"):
                yield DataTable(id="compare-totals", cursor_type="row")
        yield Static("", id="compare-detail", classes="status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#compare-tabs").display = False
        self.query_one("#compare-detail").display = False
        self._want(self.app.compare_ids)

    def on_screen_resume(self) -> None:
        self._want(self.app.compare_ids)

    def on_resize(self) -> None:
        if self.doc is not None:
            self._fill_tables()

    def show_pair(self, run_a: int, run_b: int) -> None:
        """Compare ``run_a`` (baseline) with ``run_b``."""
        if self.is_mounted:
            self._want([run_a, run_b])
        else:
            self.pair = (run_a, run_b)  # on_mount reads it

    def _want(self, ids: Sequence[int]) -> None:
        if len(ids) < 2:
            self.pair = self._reading = None
            self.doc = None
            self.shown_pair = None
            self.query_one("#compare-head", Static).update(Text(HOW_TO_MARK + (
                f" Marked now: run {ids[0]}." if ids else "")))
            self.query_one("#compare-tabs").display = False
            self.query_one("#compare-detail").display = False
            return
        pair = (int(ids[0]), int(ids[1]))
        if (pair == self.shown_pair and not self.message) or pair == self._reading:
            return
        self.pair = self._reading = pair
        self.query_one("#compare-head", Static).update(Text(f"comparing run {pair[0]} (A) with run {pair[1]} (B)…"))
        self._read(pair)

    @work(thread=True, exclusive=True, group="compare-read")
    def _read(self, pair: tuple[int, int]) -> None:
        from gpuscope.errors import StoreBusyError, StoreError

        db = self.app.db
        doc: dict[str, Any] | None = None
        try:
            doc = data.compare(db, *pair)
            message = ""
        except data.NoStore:
            message = f"No store at {db} yet: make one with `gpuscope run -- CMD` or `gpuscope ingest TRACE`."
        except StoreBusyError:
            message = "store busy, retrying"
        except StoreError as exc:
            message = str(exc)
        self.post_message(PairCompared(pair, doc, message))

    @on(PairCompared)
    def _got(self, compared: PairCompared) -> None:
        pair, doc, message = compared.pair, compared.doc, compared.message
        if pair != self.pair:
            return  # a newer pair was asked for meanwhile
        self._reading = None
        self.message = message
        head = self.query_one("#compare-head", Static)
        head.set_class(message == "store busy, retrying", "busy")
        if doc is None:
            head.update(Text(safe_text(message, layout=True)))  # messages quote file names
            if message == "store busy, retrying":
                self.set_timer(RETRY_S, lambda: self._want(list(self.pair or ())))
            return
        self.doc, self.shown_pair = doc, pair
        t = doc["totals"]
        head.update(Text(
            f"A: {run_label(doc['a'])}\nB: {run_label(doc['b'])}\n"
            f"GPU busy A {fmt_us(t['gpu_us']['a'])} · B {fmt_us(t['gpu_us']['b'])} · B/A {fmt_ratio(t['gpu_us']['ratio'])}"
            f" | matched ops B/A {fmt_ratio(t['matched_ops_us']['ratio'])}"))
        self.tables["matched"].rows = doc["matched"]
        self.tables["only_a"].rows = doc["only_a"]
        self.tables["only_b"].rows = doc["only_b"]
        self.tables["families"].rows = doc["by_family"]
        self.tables["totals"].rows = totals_rows(doc)
        tabs = self.query_one("#compare-tabs", TabbedContent)
        for name, label in (("matched", f"matched {len(doc['matched'])}"), ("only_a", f"only A {len(doc['only_a'])}"),
                            ("only_b", f"only B {len(doc['only_b'])}")):
            tabs.get_tab(f"tab-{name}").label = label
        tabs.display = True
        self.query_one("#compare-detail").display = True
        self._fill_tables()
        self.query_one("#compare-matched", DataTable).focus()

    def _fill_tables(self, only: str | None = None) -> None:
        width = (self.size.width or self.app.size.width) - 2
        for name, ct in self.tables.items():
            if only is None or name == only:
                ct.fill(self.query_one(f"#{ct.table_id}", DataTable), width)
        self._show_detail()

    # -- the selected row, whole ---------------------------------------------------------------

    def active_table(self) -> str:
        active = self.query_one("#compare-tabs", TabbedContent).active or "tab-matched"
        return active.removeprefix("tab-")

    def _show_detail(self) -> None:
        detail = self.query_one("#compare-detail", Static)
        name = self.active_table()
        ct = self.tables[name]
        table = self.query_one(f"#{ct.table_id}", DataTable)
        if not table.row_count or name in ("totals", "families"):
            detail.update(Text(f"{len(ct.rows)} rows · s sorts · Esc back to runs" if ct.rows else
                               "nothing here"))
            return
        try:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        except Exception:
            return
        row = next((r for r in ct.rows if ct.key(r) == key), None)
        if row is None:
            return
        head = f"{row['name']} {dims(row['input_dims'])} {dims(row['input_types'])}".strip()
        if name == "matched":
            sides = " · ".join(
                f"{s.upper()}: {row[s]['count']} calls {fmt_us(row[s]['kernel_us'])} {bound_label(row[s])}"
                f" {roof_pct(row[s])} of roof" for s in ("a", "b"))
            body = f"{sides} · B/A {fmt_ratio(row['ratio'])} (per call {fmt_ratio(row['ratio_per_call'])})"
        else:
            body = (f"only in {name[-1].upper()}: {row['count']} calls {fmt_us(row['kernel_us'])} "
                    f"{BOUND_LABEL.get(row.get('bound'), '-')}")
        detail.update(Text(f"{head}\n{body}"))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail()

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if self.doc is not None:
            self._show_detail()

    # -- actions -------------------------------------------------------------------------------

    def action_back(self) -> None:
        self.app.switch_mode("runs")

    def action_cycle_sort(self) -> None:
        if self.doc is None:
            return
        name = self.active_table()
        ct = self.tables[name]
        order = ct.sortable()
        if len(order) < 2:
            return
        i = order.index(ct.sort_key) if ct.sort_key in order else 0
        ct.sort_key, ct.sort_reverse = order[(i + 1) % len(order)], False
        self._fill_tables(only=name)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        name = next((n for n, ct in self.tables.items() if ct.table_id == event.data_table.id), None)
        if name is None:
            return
        ct = self.tables[name]
        key = event.column_key.value
        if key not in ct.sortable():
            return
        if key == ct.sort_key:
            ct.sort_reverse = not ct.sort_reverse
        else:
            ct.sort_key, ct.sort_reverse = key, False
        self._fill_tables(only=name)
