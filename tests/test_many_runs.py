"""Many runs in one store (issue 20): the benchmark's copies of a store are whole, the read
layer redacts every listed command however often it is asked, and the TUI's runs screen holds
a page of rows at a time while its filter and sort see every run."""
from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from conftest import REPO, run_cli

sys.path.insert(0, str(REPO / "bench"))
from bench_runs10k import multiply_runs, same_analysis  # noqa: E402

pytest.importorskip("textual")

from textual.widgets import DataTable  # noqa: E402

from test_tui_runs import ingest, make_app, op_trace, runs_json, status_text, table_ids, wait_for  # noqa: E402


def three_runs(tmp_path: Path) -> None:
    ingest(op_trace(tmp_path / "a.json", [("aten::mm", [[64, 64], [64, 64]], 50.0)]), "alpha")
    ingest(op_trace(tmp_path / "b.json", [("aten::mm", [[64, 64], [64, 64]], 40.0),
                                          ("aten::add", [[64], [64]], 5.0)]), "zulu")
    ingest(op_trace(tmp_path / "c.json", [("aten::relu", [[8]], 3.0)] * 3), "mike")


def test_copies_of_a_store_are_whole_and_the_next_run_gets_a_new_id(tmp_path: Path, db: Path) -> None:
    three_runs(tmp_path)
    before = runs_json()
    done = multiply_runs(db, 4)
    assert done["source_runs"] == 3 and "kernels" in done["tables"] and "ops" in done["tables"]
    after = runs_json()
    assert len(after) == 12
    assert len({r["id"] for r in after}) == 12 and len({r["name"] for r in after}) == 12
    # newest first: the last copy's runs, in the source's order, first; the source's last
    assert [r["id"] for r in after[:3]] == [r["id"] + 3 * 3 for r in before]
    assert [r["id"] for r in after[-3:]] == [r["id"] for r in before]
    by_id = {r["id"]: r for r in after}
    for r in before:
        for c in range(1, 4):
            copy = by_id[r["id"] + 3 * c]
            assert copy["name"] == f"{r['name']}-x{c}"
            assert {k: copy[k] for k in ("kernels", "ops", "devices", "samples", "command")} == \
                   {k: r[k] for k in ("kernels", "ops", "devices", "samples", "command")}
        a = run_cli("analyze", str(r["id"] + 9), "--json").json()
        b = run_cli("analyze", str(r["id"]), "--json").json()
        assert same_analysis(a, b)
        assert a["run"]["name"] == f"{r['name']}-x3" and a["time_us"] == b["time_us"]
    # runs of different traces are told apart: the comparison is not blind
    assert not same_analysis(run_cli("analyze", "12", "--json").json(), run_cli("analyze", "1", "--json").json())
    # the run id sequence was moved past the copies: a new run does not take a copy's id
    ingest(op_trace(tmp_path / "d.json", [("aten::mm", [[8, 8], [8, 8]], 5.0)]), "new")
    newest = runs_json()[0]
    assert newest["name"] == "new" and newest["id"] == 13


def test_listed_commands_are_redacted_every_time_they_are_listed(tmp_path: Path, db: Path) -> None:
    from gpuscope import store

    three_runs(tmp_path)
    # commands stored by something that did not redact them (an older writer, a hand edit)
    raw = {1: "python serve.py --api-key SECRET-ONE --port 8000", 2: "python serve.py --api-key SECRET-TWO",
           3: "python serve.py --api-key SECRET-ONE --port 8000"}
    con = store.connect(db)
    try:
        for run_id, command in raw.items():
            con.execute("UPDATE runs SET command = ? WHERE id = ?", [command, run_id])
    finally:
        con.close()
    for _ in range(3):  # asked again and again, as the TUI does every 2 s
        con = store.connect(db, read_only=True)
        try:
            listed = {r["id"]: r["command"] for r in store.list_runs(con)}
        finally:
            con.close()
        assert listed == {1: "python serve.py --api-key *** --port 8000", 2: "python serve.py --api-key ***",
                          3: "python serve.py --api-key *** --port 8000"}
    shown = run_cli("runs", "--json").out + run_cli("runs").out
    assert "SECRET" not in shown and json.loads(run_cli("runs", "--json").out)[1]["command"].endswith("***")


def test_runs_screen_holds_a_page_of_rows_and_filter_and_sort_see_every_run(
        tmp_path: Path, db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuscope.tui.screens import runs as runs_screen

    three_runs(tmp_path)
    multiply_runs(db, 4)
    expected = runs_json()
    ids = [r["id"] for r in expected]
    monkeypatch.setattr(runs_screen, "ROWS_PAGE", 5)

    async def go() -> None:
        app = make_app(db)
        async with app.run_test(size=(120, 30)) as pilot:
            await pilot.press("2")
            await wait_for(pilot, lambda: isinstance(app.screen, runs_screen.RunsScreen) and app.screen._loaded
                           and len(table_ids(app)) == 5, "the first page")
            table = app.screen.query_one("#runs-table", DataTable)
            assert table_ids(app) == ids[:5]
            assert "12 runs" in status_text(app) and "first 5 listed" in status_text(app)

            # the filter finds runs past the first page
            await pilot.press("slash", *"alpha")
            alpha = [r["id"] for r in expected if "alpha" in r["name"]]
            assert len(alpha) == 4 and not set(alpha) <= set(ids[:5])
            await wait_for(pilot, lambda: table_ids(app) == alpha, "the filtered rows")
            assert "4 of 12 runs" in status_text(app) and "listed" not in status_text(app)
            await pilot.press("escape")
            await wait_for(pilot, lambda: table_ids(app) == ids[:5], "the first page again")

            # the cursor on the last row brings the next page below it, and the one after
            await pilot.press("ctrl+end")
            await wait_for(pilot, lambda: table_ids(app) == ids[:10], "the second page")
            assert table.cursor_row == 4  # where it was: the new rows came below
            # a refresh keeps the pages shown
            app.screen.reload()
            await pilot.pause(0.3)
            await wait_for(pilot, lambda: table_ids(app) == ids[:10], "two pages after a refresh")
            await pilot.press("ctrl+end")
            await wait_for(pilot, lambda: table_ids(app) == ids, "every run")
            assert "listed" not in status_text(app)

            # a sort orders every run, then shows its first page (the cursor on the newest run,
            # which is not on that page)
            await pilot.press("ctrl+home")
            await pilot.press("s")
            by_name = [r["id"] for r in sorted(expected, key=lambda r: r["name"].lower())]
            await wait_for(pilot, lambda: table_ids(app) == by_name[:5], "the first page by name")
            assert set(by_name[:5]) != set(ids[:5])

    asyncio.run(go())


def test_runs_screen_reads_the_store_again_only_after_a_write(
        tmp_path: Path, db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuscope.tui import data
    from gpuscope.tui.screens import runs as runs_screen

    three_runs(tmp_path)
    reads: list[Path] = []
    real_runs = data.runs
    monkeypatch.setattr(data, "runs", lambda path: reads.append(path) or real_runs(path))

    async def go() -> None:
        app = make_app(db)
        async with app.run_test(size=(120, 30)) as pilot:
            await pilot.press("2")
            await wait_for(pilot, lambda: isinstance(app.screen, runs_screen.RunsScreen) and len(table_ids(app)) == 3,
                           "three runs")
            read_once = len(reads)
            # nothing written: refreshes keep the rows without reading (its own reads change nothing)
            for _ in range(3):
                app.screen.reload()
                await pilot.pause(0.1)
            assert len(reads) == read_once
            # a run added by another writer: the next refresh reads it
            ingest(op_trace(tmp_path / "d.json", [("aten::mm", [[8, 8], [8, 8]], 5.0)]), "delta")
            app.screen.reload()
            await wait_for(pilot, lambda: len(table_ids(app)) == 4, "the new run")
            assert len(reads) == read_once + 1
            # and after FORCE_READ_S it reads though the files look the same
            monkeypatch.setattr(runs_screen, "FORCE_READ_S", 0.0)
            app.screen.reload()
            await wait_for(pilot, lambda: len(reads) == read_once + 2, "a forced read")

    asyncio.run(go())
