"""The TUI's runs screen (2) with Textual's Pilot: the table follows `gpuscope runs --json`,
filters, sorts, opens a run, marks two for compare, and says what to do when there is no store,
an empty one, or one a writer holds."""
from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES, cpu_op, kernel, run_cli, runtime, shared_trace, write_trace

pytest.importorskip("textual")

from textual.widgets import DataTable, Input, Static  # noqa: E402

from gpuscope.tui.app import GpuscopeApp  # noqa: E402
from gpuscope.tui.screens.runs import SORT_CYCLE, RunsScreen  # noqa: E402

REPLAY = FIXTURES / "recordings" / "synthetic_h100_a100.jsonl"


def op_trace(path: Path, ops: list[tuple[str, list[Any], float]], **top: Any) -> Path:
    """A small Kineto trace: each (op name, input dims, kernel µs) a CPU op launching one kernel."""
    events: list[Any] = []
    t = 0.0
    for i, (name, dims, dur) in enumerate(ops):
        ext, corr = 100 + i, 1000 + i
        events.append(cpu_op(name, t, 5.0, ext, dims=dims, types=["float"] * len(dims)))
        events.append(runtime("cudaLaunchKernel", t + 1, 2.0, corr, ext))
        events.append(kernel(f"{name.split('::')[-1]}_kernel_{i}", t + 4, dur, corr))
        t += dur + 10
    return write_trace(path, events, **top)


def ingest(path: Path, name: str, *more: Path) -> None:
    r = run_cli("ingest", path, *more, "--name", name, "-q")
    assert r.code == 0, r.err


def synthetic_store(tmp_path: Path) -> None:
    """Three runs with different names, kernel and op counts, on the store GPUSCOPE_DB names."""
    ingest(op_trace(tmp_path / "a.json", [("aten::mm", [[64, 64], [64, 64]], 50.0)]), "alpha")
    ingest(op_trace(tmp_path / "b.json", [("aten::mm", [[64, 64], [64, 64]], 40.0),
                                          ("aten::add", [[64], [64]], 5.0)]), "zulu-decode")
    ingest(op_trace(tmp_path / "c.json", [("aten::relu", [[8]], 3.0)] * 3), "mike")


def runs_json() -> list[dict[str, Any]]:
    r = run_cli("runs", "--json")
    assert r.code == 0, r.err
    return r.json()


async def wait_for(pilot: Any, cond: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


def table_ids(app: GpuscopeApp) -> list[int]:
    table = app.screen.query_one("#runs-table", DataTable)
    return [int(table.coordinate_to_cell_key((i, 0)).row_key.value) for i in range(table.row_count)]


def status_text(app: GpuscopeApp) -> str:
    return str(app.screen.query_one("#runs-status", Static).render())


def make_app(db: Path) -> GpuscopeApp:
    return GpuscopeApp(db=db, replay=REPLAY if REPLAY.exists() else None)


async def open_runs(pilot: Any, app: GpuscopeApp, n: int) -> None:
    await pilot.press("2")
    await wait_for(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen._loaded
                   and app.screen.query_one("#runs-table", DataTable).row_count == n, f"{n} rows")


def test_lists_every_run_newest_first_and_filters_and_sorts(tmp_path: Path, db: Path) -> None:
    synthetic_store(tmp_path)
    expected = runs_json()
    assert len(expected) == 3

    async def go() -> None:
        app = make_app(db)
        async with app.run_test(size=(80, 24)) as pilot:
            await open_runs(pilot, app, 3)
            assert table_ids(app) == [r["id"] for r in expected]
            table = app.screen.query_one("#runs-table", DataTable)
            cols = [c.key.value for c in table.ordered_columns]
            # what identifies a run stays at 80 columns
            assert {"id", "name", "status"} <= set(cols)
            names = [str(table.get_cell_at((i, cols.index("name")))) for i in range(3)]
            assert names == [r["name"] for r in expected]
            # the whole table fits: no column past the right edge
            assert sum(c.get_render_width(table) for c in table.ordered_columns) <= 80

            # / and typing: only the matching run; Esc: all back
            await pilot.press("slash")
            assert app.screen.query_one("#runs-filter", Input).has_focus
            await pilot.press(*"zulu")
            zulu = [r["id"] for r in expected if "zulu" in r["name"]]
            await wait_for(pilot, lambda: table_ids(app) == zulu, "the filtered rows")
            assert "1 of 3" in status_text(app)
            await pilot.press("escape")
            await wait_for(pilot, lambda: table_ids(app) == [r["id"] for r in expected], "the filter cleared")
            assert not app.screen.query_one("#runs-filter", Input).display

            # status matches too (every run here is complete)
            await pilot.press("slash", *"complete", "enter")
            await wait_for(pilot, lambda: len(table_ids(app)) == 3, "status filter")
            await pilot.press("escape")

            # s: sorted by name
            await pilot.press("s")
            await wait_for(pilot, lambda: app.screen.sort_key == "name", "sort by name")
            by_name = [r["id"] for r in sorted(expected, key=lambda r: r["name"].lower())]
            assert table_ids(app) == by_name
            assert table_ids(app) != [r["id"] for r in expected]
            # s again: status (all equal: stable), again: source... and round to newest first
            for _ in range(len(SORT_CYCLE) - 1):
                await pilot.press("s")
            assert app.screen.sort_key is None
            assert table_ids(app) == [r["id"] for r in expected]

    asyncio.run(go())


def test_header_click_sorts_and_turns_round(tmp_path: Path, db: Path) -> None:
    synthetic_store(tmp_path)
    expected = runs_json()

    async def go() -> None:
        app = make_app(db)
        async with app.run_test(size=(80, 24)) as pilot:
            await open_runs(pilot, app, 3)
            table = app.screen.query_one("#runs-table", DataTable)
            # the kernels column: click its header (x inside that column, y = the header row)
            cols = [c.key.value for c in table.ordered_columns]
            assert "kernels" in cols
            x = sum(c.get_render_width(table) for c in table.ordered_columns[: cols.index("kernels")]) + 2
            await pilot.click("#runs-table", offset=(x, 0))
            await wait_for(pilot, lambda: app.screen.sort_key == "kernels", "sort by kernels")
            most_first = [r["id"] for r in sorted(expected, key=lambda r: -r["kernels"])]
            assert table_ids(app) == most_first
            await pilot.click("#runs-table", offset=(x, 0))
            await wait_for(pilot, lambda: app.screen.sort_reverse, "reversed")
            assert table_ids(app) == most_first[::-1]

    asyncio.run(go())


def test_enter_opens_the_run_and_c_twice_opens_compare(tmp_path: Path, db: Path) -> None:
    synthetic_store(tmp_path)
    expected = runs_json()

    async def go() -> None:
        app = make_app(db)
        async with app.run_test(size=(80, 24)) as pilot:
            await open_runs(pilot, app, 3)
            await pilot.press("down", "enter")
            await wait_for(pilot, lambda: app.current_mode == "run", "the run screen")
            assert app.run_id == expected[1]["id"]

            await pilot.press("2")
            await wait_for(pilot, lambda: app.current_mode == "runs", "back on runs")
            table = app.screen.query_one("#runs-table", DataTable)
            table.move_cursor(row=0)
            await pilot.press("c")
            assert app.compare_ids == [expected[0]["id"]]
            mark = str(table.get_cell(str(expected[0]["id"]), "mark"))
            assert mark == "A"  # the marked row shows it
            await pilot.press("c")  # c again on the same row unmarks it
            assert app.compare_ids == []
            assert str(table.get_cell(str(expected[0]["id"]), "mark")) == ""
            await pilot.press("c", "down", "down", "c")
            await wait_for(pilot, lambda: app.current_mode == "compare", "the compare screen")
            assert app.compare_ids == [expected[0]["id"], expected[2]["id"]]

    asyncio.run(go())


def test_mouse_click_on_the_selected_row_opens_it(tmp_path: Path, db: Path) -> None:
    synthetic_store(tmp_path)
    expected = runs_json()

    async def go() -> None:
        app = make_app(db)
        async with app.run_test(size=(80, 24)) as pilot:
            await open_runs(pilot, app, 3)
            await pilot.click("#runs-table", offset=(6, 3))  # third row: highlight
            await pilot.click("#runs-table", offset=(6, 3))  # again: open
            await wait_for(pilot, lambda: app.current_mode == "run", "the run screen")
            assert app.run_id == expected[2]["id"]

    asyncio.run(go())


def test_no_store_and_empty_store_say_how_to_make_one(tmp_path: Path, db: Path) -> None:
    async def go(n_expected_rows: int, words: str) -> None:
        app = make_app(db)
        async with app.run_test(size=(80, 24)) as pilot:
            await open_runs(pilot, app, n_expected_rows)
            text = status_text(app)
            assert words in text, text
            assert "gpuscope run -- CMD" in text and "gpuscope ingest TRACE" in text

    assert not db.exists()
    asyncio.run(go(0, "No store"))
    assert not db.exists()  # looking never makes one
    from gpuscope import store

    store.connect(db).close()  # an empty store
    assert runs_json() == []
    asyncio.run(go(0, "no runs yet"))


HOLD = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("SELECT count(*) FROM runs").fetchall()
print("held", flush=True)
sys.stdin.readline()
con.close()
"""


def test_store_held_by_a_writer_shows_busy_then_recovers(tmp_path: Path, db: Path) -> None:
    synthetic_store(tmp_path)
    expected = runs_json()

    async def go() -> None:
        # another process holds the store read-write, as `gpuscope run` or `ingest` does
        writer = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert writer.stdout is not None and writer.stdout.readline().strip() == "held"
            app = make_app(db)
            async with app.run_test(size=(80, 24)) as pilot:
                await pilot.press("2")
                await wait_for(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen._loaded,
                               "the first read")
                assert "store busy, retrying" in status_text(app)
                assert writer.poll() is None  # the writer is never made to fail
                assert writer.stdin is not None
                writer.stdin.write("\n")
                writer.stdin.flush()
                assert writer.wait(timeout=30) == 0
                await wait_for(pilot, lambda: table_ids(app) == [r["id"] for r in expected],
                               "the runs after the writer closed")
                assert "busy" not in status_text(app)
        finally:
            if writer.poll() is None:
                writer.kill()

    asyncio.run(go())


def test_shared_traces_listed_in_runs_json_order(tmp_path: Path, db: Path) -> None:
    for rel, name in (("hta/a100_alexnet.json.gz", "alexnet"), ("hta/a100_triton_kernel.json.gz", "triton")):
        ingest(shared_trace(rel), name)
    expected = runs_json()

    async def go() -> None:
        app = make_app(db)
        async with app.run_test(size=(80, 24)) as pilot:
            await open_runs(pilot, app, len(expected))
            assert table_ids(app) == [r["id"] for r in expected]
            table = app.screen.query_one("#runs-table", DataTable)
            cols = [c.key.value for c in table.ordered_columns]
            if "kernels" in cols:
                assert [int(str(table.get_cell_at((i, cols.index("kernels"))))) for i in range(len(expected))] \
                    == [r["kernels"] for r in expected]

    asyncio.run(go())


RECORDER = """
import os, sys, time
from gpuscope import store
from gpuscope.machine import hostname
from gpuscope.store import runs
db = sys.argv[1]
con = store.connect(db)
rid = runs.begin_recording(con, name="live-one", source="run", started_ns=time.time_ns(), command=["python", "w.py"],
                           info={"owner": {"pid": os.getpid(), "host": hostname()}})
con.close()
print(rid, flush=True)
sys.stdin.readline()
con = store.connect(db)
runs.finish(con, rid, "complete", time.time_ns(), exit_code=3)
con.close()
"""


def test_a_run_still_recording_updates_as_it_goes(tmp_path: Path, db: Path) -> None:
    synthetic_store(tmp_path)

    async def go() -> None:
        app = make_app(db)
        async with app.run_test(size=(160, 40)) as pilot:  # wide: every column, the exit code too
            await open_runs(pilot, app, 3)
            # another process (as `gpuscope run` does) starts recording a run, then finishes it
            rec = subprocess.Popen([sys.executable, "-c", RECORDER, str(db)], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)
            try:
                assert rec.stdout is not None and rec.stdin is not None
                rid = rec.stdout.readline().strip()
                table = app.screen.query_one("#runs-table", DataTable)
                await wait_for(pilot, lambda: table.row_count == 4, "the new run")
                assert table_ids(app)[0] == int(rid)  # newest first
                assert str(table.get_cell(rid, "status")) == "recording"
                rec.stdin.write("\n")
                rec.stdin.flush()
                assert rec.wait(timeout=30) == 0  # the writer never fails because of the TUI
                await wait_for(pilot, lambda: str(table.get_cell(rid, "status")) == "complete", "its end")
                assert str(table.get_cell(rid, "exit")) == "3"
                assert [r["status"] for r in runs_json()][0] == "complete"
            finally:
                if rec.poll() is None:
                    rec.kill()

    asyncio.run(go())


def test_runs_of_one_name_are_told_apart_by_id_and_gpu_when_marked(tmp_path: Path, db: Path) -> None:
    """Issue 33: an H100 and an MI300X run of one model share a name; the table shows each
    run's GPU and the compare marks name the id and the GPU."""
    ops = [("aten::mm", [[64, 64], [64, 64]], 50.0)]
    ingest(op_trace(tmp_path / "h.json", ops, deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]),
           "llama")
    ingest(op_trace(tmp_path / "m.json", ops, deviceProperties=[{"id": 0, "name": "AMD Instinct MI300X"}]),
           "llama")
    h100, mi300 = sorted(r["id"] for r in runs_json())

    async def go() -> None:
        app = make_app(db)
        async with app.run_test(size=(80, 24)) as pilot:
            await open_runs(pilot, app, 2)
            table = app.screen.query_one("#runs-table", DataTable)
            assert str(table.get_cell(str(h100), "gpu")) == "H100 80GB HBM3"
            assert str(table.get_cell(str(mi300), "gpu")) == "MI300X"
            table.move_cursor(row=table_ids(app).index(mi300))
            await pilot.press("c")
            assert f"compare: A {mi300} 'llama' on MI300X (c marks B)" in status_text(app)

    asyncio.run(go())
