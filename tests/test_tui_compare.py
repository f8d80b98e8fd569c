"""The TUI's compare screen (4) with Textual's Pilot: two runs marked with `c` on the runs
screen, shown op by op with the same values as `gpuscope compare A B --json`."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli, shared_trace
from test_tui_runs import make_app, op_trace, open_runs, runs_json, wait_for

pytest.importorskip("textual")

from textual.widgets import DataTable, Static, TabbedContent  # noqa: E402

from gpuscope.render.compare import _ratio as fmt_ratio  # noqa: E402
from gpuscope.render.table import fmt_us  # noqa: E402
from gpuscope.tui.app import GpuscopeApp  # noqa: E402
from gpuscope.tui.screens.compare import CompareScreen, op_key  # noqa: E402

MM = ("aten::mm", [[64, 64], [64, 64]])
ADD = ("aten::add", [[64], [64]])


def two_runs(tmp_path: Path) -> None:
    """A baseline and a faster run sharing two op signatures; each has one op of its own."""
    base = op_trace(tmp_path / "a.json", [(*MM, 80.0), (*ADD, 10.0), ("aten::softmax", [[64, 64]], 7.0)])
    fast = op_trace(tmp_path / "b.json", [(*MM, 40.0), (*ADD, 12.0), ("aten::gelu", [[64, 64]], 5.0)])
    for path, name in ((base, "base"), (fast, "fast")):
        r = run_cli("ingest", path, "--name", name, "-q")
        assert r.code == 0, r.err


def cells(app: GpuscopeApp, table_id: str) -> dict[str, dict[str, str]]:
    """The table's rows by key: {column key: cell text}."""
    table = app.screen.query_one(f"#{table_id}", DataTable)
    cols = [c.key.value for c in table.ordered_columns]
    out = {}
    for i in range(table.row_count):
        key = table.coordinate_to_cell_key((i, 0)).row_key.value
        out[key] = {c: str(table.get_cell_at((i, j))) for j, c in enumerate(cols)}
    return out


def row_order(app: GpuscopeApp, table_id: str) -> list[str]:
    table = app.screen.query_one(f"#{table_id}", DataTable)
    return [table.coordinate_to_cell_key((i, 0)).row_key.value for i in range(table.row_count)]


def check_against_cli(app: GpuscopeApp, doc: dict[str, Any]) -> None:
    """Every matched op with the command's times and ratio, and the one-side-only ops."""
    shown = cells(app, "compare-matched")
    assert set(shown) == {op_key(m) for m in doc["matched"]}
    for m in doc["matched"]:
        row = shown[op_key(m)]
        assert row["a_time"] == fmt_us(m["a"]["kernel_us"])
        assert row["b_time"] == fmt_us(m["b"]["kernel_us"])
        assert row["ratio"] == fmt_ratio(m["ratio"])
    for side, table_id in (("only_a", "compare-only-a"), ("only_b", "compare-only-b")):
        rows = cells(app, table_id)
        assert set(rows) == {op_key(o) for o in doc[side]}
        for o in doc[side]:
            assert rows[op_key(o)]["time"] == fmt_us(o["kernel_us"])
    totals = cells(app, "compare-totals")
    t = doc["totals"]
    for k in ("gpu_us", "compute", "memory", "idle", "matched_ops_us"):
        assert (totals[k]["a"], totals[k]["b"], totals[k]["ratio"]) == (
            fmt_us(t[k]["a"]), fmt_us(t[k]["b"]), fmt_ratio(t[k]["ratio"]))


async def mark_two(pilot: Any, app: GpuscopeApp, n_runs: int, rows: tuple[int, int]) -> None:
    await open_runs(pilot, app, n_runs)
    table = app.screen.query_one("#runs-table", DataTable)
    table.move_cursor(row=rows[0])
    await pilot.press("c")
    table.move_cursor(row=rows[1])
    await pilot.press("c")
    await wait_for(pilot, lambda: app.current_mode == "compare", "the compare screen")
    await wait_for(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.doc is not None,
                   "the comparison")


def test_c_twice_shows_what_gpuscope_compare_shows(tmp_path: Path, db: Path) -> None:
    two_runs(tmp_path)
    runs = runs_json()  # newest first: fast, base
    base, fast = runs[1]["id"], runs[0]["id"]
    doc = run_cli("compare", str(base), str(fast), "--json").json()
    assert len(doc["matched"]) == 2 and len(doc["only_a"]) == 1 and len(doc["only_b"]) == 1

    async def go() -> None:
        app = make_app(db)
        async with app.run_test(size=(80, 24)) as pilot:
            await mark_two(pilot, app, 2, (1, 0))  # base first: the baseline
            assert app.compare_ids == [base, fast]
            check_against_cli(app, doc)
            head = str(app.screen.query_one("#compare-head", Static).render())
            assert f"run {base} 'base'" in head and f"run {fast} 'fast'" in head
            # the matched table fits 80 columns and keeps the op, both times and the ratio
            table = app.screen.query_one("#compare-matched", DataTable)
            cols = [c.key.value for c in table.ordered_columns]
            assert {"op", "a_time", "b_time", "ratio"} <= set(cols)
            assert sum(c.get_render_width(table) for c in table.ordered_columns) <= 80
            # the selected row whole, under the table: bound and roof of both sides
            detail = str(app.screen.query_one("#compare-detail", Static).render())
            first = doc["matched"][0]
            assert first["name"] in detail and fmt_ratio(first["ratio"]) in detail

            # s: sorted by op name, then by A time (largest first)
            default = row_order(app, "compare-matched")
            assert default == [op_key(m) for m in doc["matched"]]  # the analyzer's order
            await pilot.press("s")
            assert row_order(app, "compare-matched") == sorted(default, key=lambda k: k)  # op name first in key
            await pilot.press("s", "s")
            by_a = [op_key(m) for m in sorted(doc["matched"], key=lambda m: -m["a"]["kernel_us"])]
            assert app.screen.tables["matched"].sort_key == "a_time"
            assert row_order(app, "compare-matched") == by_a

            # the other tabs by mouse
            await pilot.click("#compare-tabs Tab#--content-tab-tab-only_b")
            await wait_for(pilot, lambda: app.screen.query_one("#compare-tabs", TabbedContent).active
                           == "tab-only_b", "the only-B tab")
            detail = str(app.screen.query_one("#compare-detail", Static).render())
            assert doc["only_b"][0]["name"] in detail and "only in B" in detail

            # Esc: back to the runs
            await pilot.press("escape")
            await wait_for(pilot, lambda: app.current_mode == "runs", "the runs screen")

    asyncio.run(go())


def test_fewer_than_two_marked_says_how(tmp_path: Path, db: Path) -> None:
    two_runs(tmp_path)

    async def go() -> None:
        app = make_app(db)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("4")
            await wait_for(pilot, lambda: isinstance(app.screen, CompareScreen), "the compare screen")
            head = str(app.screen.query_one("#compare-head", Static).render())
            assert "press c" in head and "runs screen" in head
            assert not app.screen.query_one("#compare-tabs").display
            await open_runs(pilot, app, 2)
            await pilot.press("c", "4")
            await wait_for(pilot, lambda: isinstance(app.screen, CompareScreen), "the compare screen")
            head = str(app.screen.query_one("#compare-head", Static).render())
            assert f"Marked now: run {app.compare_ids[0]}" in head

    asyncio.run(go())


def test_h100_vs_mi300x_as_the_command_compares_them(tmp_path: Path, db: Path) -> None:
    h100 = shared_trace("tracelens/qwen1.5-0.5b-chat/h100.json.gz")
    mi300x = shared_trace("tracelens/qwen1.5-0.5b-chat/mi300x.json.gz")
    for path, name in ((h100, "qwen-h100"), (mi300x, "qwen-mi300x")):
        r = run_cli("ingest", path, "--name", name, "-q")
        assert r.code == 0, r.err
    runs = runs_json()
    a, b = runs[1]["id"], runs[0]["id"]  # h100 the baseline
    doc = run_cli("compare", str(a), str(b), "--json").json()
    assert doc["matched"], "the same model on two vendors shares ops"

    async def go() -> None:
        app = make_app(db)
        async with app.run_test(size=(80, 24)) as pilot:
            await mark_two(pilot, app, 2, (1, 0))
            assert app.compare_ids == [a, b]
            check_against_cli(app, doc)

    asyncio.run(go())


def test_left_and_right_switch_the_tabs(tmp_path: Path, db: Path) -> None:
    """Issue 33: ←/→ walk the compare screen's tabs (round), the tab's table focused."""
    two_runs(tmp_path)

    async def go() -> None:
        from textual.widgets import TabbedContent

        app = make_app(db)
        async with app.run_test(size=(80, 24)) as pilot:
            await mark_two(pilot, app, 2, (1, 0))
            tabs = app.screen.query_one("#compare-tabs", TabbedContent)
            seen = [tabs.active]
            for _ in range(5):
                await pilot.press("right")
                await pilot.pause()
                seen.append(tabs.active)
                assert app.screen.focused is app.screen.query_one(
                    f"#{app.screen.tables[tabs.active.removeprefix('tab-')].table_id}")
            assert seen == ["tab-matched", "tab-only_a", "tab-only_b", "tab-families", "tab-totals", "tab-matched"]
            await pilot.press("left")
            await pilot.pause()
            assert tabs.active == "tab-totals"

    asyncio.run(go())
