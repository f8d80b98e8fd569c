"""The run screen of `gpuscope tui` (screen 3): breakdown, top ops and kernels, the roofline
plot, the telemetry timeline, advice; checked against `gpuscope analyze --json` of the same
run, on shared real traces and a synthetic run with telemetry, windows and marks. The plot's
geometry (log scale, clipping, roofs) is tested as plain functions."""
from __future__ import annotations

import asyncio
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES, cpu_op, kernel, run_cli, runtime, shared_trace, write_trace
from gpuscope.tui.widgets.breakdown import bar_cells, shares
from gpuscope.tui.widgets.roofline import (
    BOUND_STYLE, SELECTED_GLYPH, Axes, PlotPoint, choose_axes, dominant_roof, log_pos, point_cell,
    points_from_analysis, render_plot, roof_dots,
)
from gpuscope.tui.widgets.timeline import bins, event_line, fill_gaps, sparkline

RECORDING = FIXTURES / "recordings" / "synthetic_h100_a100.jsonl"
H100 = "tracelens/qwen1.5-0.5b-chat/h100.json.gz"
CPU_ONLY = "hta/cpu_only.pt.trace.json.gz"
BASE_NS = 1_700_000_000_000_000_000
PROPS = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045870592, "computeMajor": 9,
          "computeMinor": 0, "numSms": 132, "warpSize": 32}]


# --------------------------------------------------------------------------------------------
# the plot's geometry, pure


def test_log_mapping_puts_each_decade_in_its_share_of_cells() -> None:
    # 0.1 .. 1000 is four decades over four cells: one decade per cell
    assert log_pos(0.5, 0.1, 1000, 4) == (0, False)
    assert log_pos(1.0, 0.1, 1000, 4) == (1, False)
    assert log_pos(50.0, 0.1, 1000, 4) == (2, False)
    assert log_pos(999.0, 0.1, 1000, 4) == (3, False)
    assert log_pos(1000.0, 0.1, 1000, 4) == (3, False)  # the top edge is inside
    # finer: 40 cells, ten per decade; sqrt(10) is half way through a decade
    assert log_pos(math.sqrt(10) * 0.1 * 1.0001, 0.1, 1000, 40) == (5, False)


def test_points_outside_the_range_are_clipped_to_the_edge_and_zero_has_no_place() -> None:
    assert log_pos(1e-9, 0.1, 1000, 10) == (0, True)
    assert log_pos(1e9, 0.1, 1000, 10) == (9, True)
    for v in (0.0, -1.0, None, float("nan"), float("inf")):
        assert log_pos(v, 0.1, 1000, 10) is None
    axes = Axes(0.1, 1000, 1e9, 1e15, cols=20, rows=10)
    assert point_cell(PlotPoint("a", 1e6, 1e20, "compute_bound"), axes) == (19, 0, True)  # top right
    assert point_cell(PlotPoint("b", 1e-6, 1.0, "memory_bound"), axes) == (0, 9, True)    # bottom left
    assert point_cell(PlotPoint("c", 10.0, 1e12, "memory_bound"), axes) == (10, 4, False)  # half way: rows 5..9 below
    assert point_cell(PlotPoint("d", 0.0, 1e12, "memory_bound"), axes) is None              # no FLOPs


def test_roofs_are_drawn_rising_with_the_bandwidth_then_flat_at_the_peak() -> None:
    peak, bw = 1e15, 1e12  # ridge at 1000 FLOP/B
    axes = Axes(1.0, 1e6, 1e11, 1e16, cols=30, rows=10)
    dots = roof_dots(axes, peak, bw)
    by_col: dict[int, list[int]] = {}
    for (c, r) in dots:
        by_col.setdefault(c, []).append(r)
    assert sorted(by_col) == list(range(30))  # a continuous line across the plot
    top = [min(by_col[c]) for c in range(30)]
    assert all(a >= b for a, b in zip(top, top[1:]))  # never falls (rows count from the top)
    peak_row = axes.rows - 1 - log_pos(peak, axes.y_lo, axes.y_hi, axes.rows)[0]
    ridge_col = log_pos(peak / bw, axes.x_lo, axes.x_hi, axes.cols)[0]
    assert all(set(by_col[c]) == {peak_row} for c in range(ridge_col + 1, 30))  # flat: the compute roof
    # the memory roof: at intensity 10 it is at 1e13 FLOP/s
    c10 = log_pos(10.0, axes.x_lo, axes.x_hi, axes.cols)[0]
    assert axes.rows - 1 - log_pos(1e13, axes.y_lo, axes.y_hi, axes.rows)[0] in by_col[c10]
    assert top[0] > peak_row
    # a roof wholly above the range draws nothing; no roof at all draws nothing
    assert roof_dots(Axes(1.0, 10.0, 1e3, 1e6, 10, 5), peak, bw) == {}
    assert roof_dots(axes, None, None) == {}


def test_choose_axes_holds_the_ridge_and_the_points() -> None:
    pts = [PlotPoint("a", 0.2, 5e11, "memory_bound"), PlotPoint("b", 700.0, 6e14, "compute_bound")]
    axes = choose_axes(pts, 989e12, 3.35e12, 60, 12)
    assert axes.x_lo <= 0.2 and axes.x_hi >= 700.0 and axes.x_lo <= 989e12 / 3.35e12 <= axes.x_hi
    assert axes.y_lo <= 5e11 and axes.y_hi >= 989e12
    assert all(point_cell(p, axes)[2] is False for p in pts)


def test_the_plot_tells_classes_apart_without_colour_and_shows_the_selected_point() -> None:
    pts = [PlotPoint("ops:0", 700.0, 6e14, "compute_bound"), PlotPoint("ops:1", 0.2, 5e11, "memory_bound"),
           PlotPoint("ops:2", 0.1, 1e9, "latency_bound"), PlotPoint("ops:3", 3.0, 1e10, "unknown")]
    text = render_plot(pts, 989e12, 3.35e12, 70, 16, selected=None, color=False)
    plain = text.plain
    glyphs = [BOUND_STYLE[b][0] for b in ("compute_bound", "memory_bound", "latency_bound", "unknown")]
    assert len(set(glyphs)) == 4 and all(g in plain for g in glyphs)
    assert not any(span.style and "green" in str(span.style) for span in text.spans)
    assert "FLOP/s" in plain and "FLOP/byte" in plain and "1P" in plain  # axes with units
    assert any(0x2800 < ord(ch) <= 0x28FF for ch in plain)  # the roofs, in braille
    sel = render_plot(pts, 989e12, 3.35e12, 70, 16, selected="ops:0", color=False).plain
    assert sel.count(SELECTED_GLYPH) == 1 and BOUND_STYLE["compute_bound"][0] not in sel
    assert len(sel.splitlines()) == 16 and max(len(line) for line in sel.splitlines()) <= 70
    small = render_plot(pts, 989e12, 3.35e12, 30, 8, color=False).plain  # it shrinks
    assert len(small.splitlines()) == 8 and max(len(line) for line in small.splitlines()) <= 30


def test_breakdown_bar_cells_follow_the_shares() -> None:
    parts = shares({"compute": 700.0, "communication": 0.0, "memory": 2.0, "idle": 298.0})
    assert [round(p.pct, 1) for p in parts] == [70.0, 0.0, 0.2, 29.8]
    cells = bar_cells(parts, 50)
    assert sum(cells) == 50 and cells[1] == 0 and cells[2] == 1  # a small share still shows
    assert cells[0] > cells[3] > cells[2]
    assert bar_cells(shares({}), 40) == [0, 0, 0, 0]


def test_timeline_bins_sparkline_and_events() -> None:
    ts = [0, 10, 20, 30, 40, 99]
    assert bins(ts, [1.0, 3.0, None, 5.0, 7.0, 9.0], 0, 100, 4) == [2.0, 6.0, None, 9.0]
    assert sparkline([0.0, None, 50.0, 100.0], 100.0) == "▁ ▅█"
    # sparse samples fill the columns between them; a longer silence stays blank
    assert fill_gaps([1.0, None, 2.0, None, None, None, None, 3.0], 2) == [1.0, 1.0, 2.0, None, None, None, None, 3.0]
    line = event_line([(10, 40, "profiler_window", "w"), (80, None, "mark", "m")], 0, 100, 10)
    assert line[1:5] == "════" and line[8] == "▼" and line[0] == " "


# --------------------------------------------------------------------------------------------
# stores


def _ingest(path: Path, *extra: str) -> int:
    r = run_cli("ingest", str(path), "--json", *extra)
    assert r.code == 0, r.err
    return int(r.json()["run_id"])


def _analysis(run_id: int) -> dict[str, Any]:
    r = run_cli("analyze", str(run_id), "--json")
    assert r.code == 0, r.err
    return r.json()


def _synthetic_run(tmp_path: Path, db: Path) -> int:
    """A run with a compute-bound matmul and a memory-bound add on an H100, two GPUs' power and
    utilization samples, a profiler window and a mark."""
    bf16 = "c10::BFloat16"
    events = [
        cpu_op("aten::mm", 0, 20, ext=1, dims=[[8192, 8192], [8192, 8192]], types=[bf16, bf16]),
        runtime("cudaLaunchKernel", 5, 5, corr=1, ext=1),
        kernel("sm90_xmma_gemm_bf16", 100, 1500, corr=1),
        cpu_op("aten::add", 30, 10, ext=2, dims=[[8192, 8192], [8192, 8192]], types=[bf16, bf16]),
        runtime("cudaLaunchKernel", 32, 5, corr=2, ext=2),
        kernel("vectorized_elementwise_kernel_add", 1700, 300, corr=2),
    ]
    path = write_trace(tmp_path / "t.json", events, deviceProperties=PROPS, baseTimeNanoseconds=BASE_NS)
    run_id = _ingest(path, "--name", "synthetic")
    from gpuscope import store

    con = store.connect(db)
    with store.transaction(con):
        for dev, key in ((5, "nvml/gpu0"), (6, "nvml/gpu1")):
            con.execute("INSERT INTO devices (run_id, device_id, key, source, device_index, vendor, kind, name) "
                        "VALUES (?, ?, ?, 'telemetry', ?, 'nvidia', 'gpu', 'NVIDIA H100 80GB HBM3')",
                        [run_id, dev, key, dev - 5])
            for i in range(40):
                con.execute("INSERT INTO samples (run_id, device_id, ts_ns, power_w, gpu_util) VALUES (?, ?, ?, ?, ?)",
                            [run_id, dev, BASE_NS + i * 100_000, 100.0 + 10 * i + dev, (i % 10) / 10])
        con.execute("INSERT INTO annotations (run_id, kind, name, ts_ns, dur_ns, pid, value) VALUES "
                    "(?, 'profiler_window', 'window', ?, ?, '42', '{\"trace\": \"t.json\"}'), "
                    "(?, 'mark', 'decode', ?, NULL, '42', '{\"tokens\": 128}')",
                    [run_id, BASE_NS + 500_000, 1_000_000, run_id, BASE_NS + 3_000_000])
    con.close()
    return run_id


def test_read_annotations_in_time_order_filtered_by_kind(tmp_path: Path, db: Path) -> None:
    from gpuscope import store
    from gpuscope.store import read

    run_id = _synthetic_run(tmp_path, db)
    con = store.connect(db, read_only=True)
    try:
        every = read.annotation_rows(con, run_id)
        ours = read.annotation_rows(con, run_id, ["profiler_window", "mark"])
        assert [(a.kind, a.name) for a in ours] == [("profiler_window", "window"), ("mark", "decode")]
        assert ours[0].dur_ns == 1_000_000 and ours[0].ts_ns == BASE_NS + 500_000 and ours[0].pid == "42"
        assert ours[0].value == {"trace": "t.json"} and ours[1].value == {"tokens": 128} and ours[1].dur_ns is None
        assert [a.ts_ns for a in every] == sorted(a.ts_ns for a in every) and len(every) >= 2
        assert read.annotation_rows(con, run_id, ["mark"]) == [ours[1]]
        assert read.annotation_rows(con, run_id, []) == [] and read.annotation_rows(con, run_id + 99) == []
    finally:
        con.close()


# --------------------------------------------------------------------------------------------
# the screen, with Pilot


def _app(db: Path):
    from gpuscope.tui.app import GpuscopeApp

    return GpuscopeApp(db=db, replay=RECORDING, interval_s=0.5)


async def _open(app: Any, pilot: Any, run_id: int) -> Any:
    from gpuscope.tui.screens.run import RunScreen

    app.open_run(run_id)
    for _ in range(400):
        await pilot.pause(0.05)
        screen = app.screen
        if isinstance(screen, RunScreen) and screen.doc is not None and screen.doc["run"]["id"] == run_id:
            await pilot.pause()
            return screen
    raise AssertionError(f"the run screen never showed run {run_id}: {getattr(app.screen, 'message', None)}")


def _rows(screen: Any, table_id: str) -> list[tuple[str, list[str]]]:
    from textual.widgets import DataTable

    table = screen.query_one(table_id, DataTable)
    return [(str(k.value), [str(c) for c in table.get_row(k)]) for k in table.rows]


def _text(screen: Any, wid: str) -> str:
    return str(screen.query_one(wid).render())


def test_run_screen_shows_what_analyze_says(db: Path) -> None:
    run_id = _ingest(shared_trace(H100))
    doc = _analysis(run_id)
    asyncio.run(_test_run_screen_shows_what_analyze_says(db, run_id, doc))


async def _test_run_screen_shows_what_analyze_says(db: Path, run_id: int, doc: dict[str, Any]) -> None:
    from gpuscope.render.table import fmt_us
    from gpuscope.tui.widgets.breakdown import BreakdownBar
    from gpuscope.tui.widgets.roofline import RooflinePlot

    app = _app(db)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _open(app, pilot, run_id)
        # the breakdown: each share is the category's part of busy + idle in the analysis
        t = doc["time_us"]
        total = sum(t[k] for k in ("compute", "communication", "memory", "idle"))
        bar = screen.query_one(BreakdownBar)
        assert [p.key for p in bar.parts] == ["compute", "communication", "memory", "idle"]
        for p in bar.parts:
            assert p.pct == pytest.approx(100 * t[p.key] / total)
        legend = str(bar.render())
        assert f"{100 * t['compute'] / total:.1f}%" in legend and f"{100 * t['idle'] / total:.1f}%" in legend

        # the top rows, in the analysis' order, with its times and savings
        ops = _rows(screen, "#run-ops")
        assert len(ops) == min(50, len(doc["ops"]))
        for i, (key, cells) in enumerate(ops):
            o = doc["ops"][i]
            assert key == f"ops:{i}"
            assert o["name"].startswith(cells[0].rstrip("…").split(" ")[0])
            assert cells[1] == fmt_us(o["kernel_us"]) and cells[5] == fmt_us(o.get("saved_us"))
        kernels = _rows(screen, "#run-kernels")
        # the kernel names are analyze's distinct short names at the table's width
        from gpuscope.tui.screens.run import kernel_names

        short = kernel_names(doc["kernels"][:len(kernels)], screen.kernel_name_w)
        for i, (key, cells) in enumerate(kernels):
            k = doc["kernels"][i]
            assert key == f"kernels:{i}" and cells[0] == short[i]
            assert cells[1] == fmt_us(k["total_us"])
        busy = t["compute"] + t["communication"] + t["memory"]
        assert kernels[0][1][2] == f"{100 * doc['kernels'][0]['total_us'] / busy:.1f}%"

        # s cycles the sort: the next order is by the time saved at the roof
        await pilot.press("s")
        resorted = [k for k, _ in _rows(screen, "#run-ops")]
        assert resorted != [k for k, _ in ops]
        saved = [doc["ops"][int(k.split(":")[1])].get("saved_us") or 0.0 for k in resorted]
        assert saved == sorted(saved, reverse=True)
        await pilot.press("s", "s", "s", "s")  # around to time again
        assert [k for k, _ in _rows(screen, "#run-ops")] == [k for k, _ in ops]
        # the mouse: a click on the "bound" header sorts by bound class
        from textual.widgets import DataTable

        table = screen.query_one("#run-ops", DataTable)
        x = sum(c.get_render_width(table) for c in list(table.columns.values())[:3]) + 2
        await pilot.click("#run-ops", offset=(x, 0))
        by_bound = [doc["ops"][int(k.split(":")[1])]["bound"] for k, _ in _rows(screen, "#run-ops")]
        order = ["compute_bound", "memory_bound", "latency_bound", "unknown"]
        assert by_bound == sorted(by_bound, key=order.index) and by_bound != [o["bound"] for o in doc["ops"][:50]]
        await pilot.press("s", "s")  # bound -> name -> time
        assert [k for k, _ in _rows(screen, "#run-ops")] == [k for k, _ in ops]
        table.move_cursor(row=0)
        await pilot.pause()

        # selecting a row highlights its point
        plot = screen.query_one(RooflinePlot)
        await pilot.press("down")
        assert plot.selected == "ops:1"
        assert plot.peak_flops and plot.mem_bw == doc["roofline"]["devices"][0]["mem_bw_bytes_per_s"]
        assert "◆" in str(plot.render())
        assert screen.plot_kind == "ops" and {p.key for p in plot.points} == {f"ops:{i}" for i in range(len(ops))}
        # the kernels table in use: the plot shows the kernels, the one under the cursor highlighted
        screen.query_one("#run-kernels").focus()
        await pilot.press("down")
        assert screen.plot_kind == "kernels" and plot.selected == "kernels:1"
        assert {p.key for p in plot.points} == {f"kernels:{i}" for i in range(len(kernels))}
        # this trace has no telemetry: said, not an empty widget
        assert "No telemetry" in _text(screen, "#timeline-note")
        await pilot.press("escape")
        assert app.current_mode == "runs"


def test_cpu_only_run_says_so(db: Path) -> None:
    run_id = _ingest(shared_trace(CPU_ONLY))
    doc = _analysis(run_id)
    assert doc["gpu_activity"] is False
    asyncio.run(_test_cpu_only_run_says_so(db, run_id, doc))


async def _test_cpu_only_run_says_so(db: Path, run_id: int, doc: dict[str, Any]) -> None:
    from gpuscope.render.table import fmt_us

    app = _app(db)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _open(app, pilot, run_id)
        assert "CPU-only" in _text(screen, "#run-nogpu") and screen.query_one("#run-nogpu").display
        for wid in ("#run-breakdown", "#run-kernels", "#run-roofline"):
            assert not screen.query_one(wid).display, wid
        ops = _rows(screen, "#run-ops")
        assert ops and [c[1] for _, c in ops] == [fmt_us(o["kernel_us"]) for o in doc["ops"][:len(ops)]]
        assert "No telemetry" in _text(screen, "#timeline-note")


def test_synthetic_run_plot_timeline_and_advice(tmp_path: Path, db: Path) -> None:
    run_id = _synthetic_run(tmp_path, db)
    doc = _analysis(run_id)
    asyncio.run(_test_synthetic_run(db, run_id, doc))


async def _test_synthetic_run(db: Path, run_id: int, doc: dict[str, Any]) -> None:
    from gpuscope.tui.widgets.roofline import RooflinePlot
    from gpuscope.tui.widgets.timeline import Timeline

    app = _app(db)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _open(app, pilot, run_id)
        bounds = {o["name"]: o["bound"] for o in doc["ops"]}
        assert bounds == {"aten::mm": "compute_bound", "aten::add": "memory_bound"}
        plot = screen.query_one(RooflinePlot)
        peak, bw, dtype, _ = dominant_roof(doc)
        assert dtype == "bf16" and plot.peak_flops == peak and plot.mem_bw == bw
        pts = {p.key: p for p in points_from_analysis(doc, "ops")}
        assert {p.key for p in plot.points} == set(pts)
        axes = choose_axes(plot.points, peak, bw, plot.size.width - 6, plot.size.height - 2)
        mm = point_cell(pts[f"ops:{[o['name'] for o in doc['ops']].index('aten::mm')}"], axes)
        add = point_cell(pts[f"ops:{[o['name'] for o in doc['ops']].index('aten::add')}"], axes)
        assert mm is not None and add is not None
        assert mm[0] > add[0] and mm[1] < add[1]  # the compute-bound point right of and above the memory-bound one

        timeline = screen.query_one(Timeline)
        assert timeline.data is not None
        assert [s.label for s in timeline.data.series] == ["nvml/gpu0 W", "nvml/gpu1 W", "…/gpu0 util",
                                                           "…/gpu1 util"]  # the metric whole, the key cut
        drawn = str(timeline.render())
        assert "═" in drawn and "▼" in drawn and "W" in drawn and "%" in drawn
        assert "profiler window" in _text(screen, "#timeline-note")
        advice = _text(screen, "#run-advice")
        for a in doc.get("advice") or ():
            assert a["message"][:40] in advice.replace("\n", " ")
        if not doc.get("advice") and not doc.get("notes"):
            assert "No advice" in advice


def test_busy_store_says_so_and_retries(tmp_path: Path, db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuscope.tui import data

    run_id = _synthetic_run(tmp_path, db)
    real = data.run_detail
    calls: list[int | None] = []

    def busy_once(path: Path, rid: int | None, top: int = 50) -> dict[str, Any]:
        calls.append(rid)
        if len(calls) == 1:
            raise data.StoreBusy("another process is writing")
        return real(path, rid, top)

    monkeypatch.setattr(data, "run_detail", busy_once)
    asyncio.run(_test_busy(db, run_id, calls))


async def _test_busy(db: Path, run_id: int, calls: list[int | None]) -> None:
    from gpuscope.tui.screens.run import RunScreen

    app = _app(db)
    async with app.run_test(size=(80, 24)) as pilot:
        app.open_run(run_id)
        seen = []
        for _ in range(200):
            await pilot.pause(0.05)
            screen = app.screen
            if isinstance(screen, RunScreen):
                seen.append(screen.message)
                if screen.doc is not None:
                    break
        assert "store busy, retrying" in seen
        assert app.screen.doc["run"]["id"] == run_id and len(calls) >= 2 and set(calls) == {run_id}


def test_a_recording_run_is_read_again_until_it_is_finished(tmp_path: Path, db: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A run another `gpuscope run` is still writing: the run screen reads it again while it is
    recording, and shows its final status when it is finished."""
    from gpuscope import store
    from gpuscope.store import runs as store_runs
    from gpuscope.tui.screens import run as run_screen

    run_id = _synthetic_run(tmp_path, db)
    con = store.connect(db)
    # owned by this (live) process, as `gpuscope run` owns its run: no recovery marks it incomplete
    con.execute("UPDATE runs SET status = 'recording', info = ? WHERE id = ?",
                [json.dumps({"owner": {"pid": os.getpid()}}), run_id])
    con.close()
    monkeypatch.setattr(run_screen, "RECORDING_REFRESH_S", 0.3)

    async def go() -> None:
        app = _app(db)
        async with app.run_test(size=(160, 48)) as pilot:
            screen = await _open(app, pilot, run_id)
            assert screen.doc["run"]["status"] == "recording"
            assert "still recording" in screen.message
            ops = screen.query_one("#run-ops")
            ops.move_cursor(row=1)
            con = store.connect(db)
            with store.transaction(con):
                store_runs.finish(con, run_id, "complete", BASE_NS + 10**9, exit_code=0)
            con.close()
            for _ in range(100):
                await pilot.pause(0.05)
                if screen.doc["run"]["status"] == "complete":
                    break
            assert screen.doc["run"]["status"] == "complete"
            assert "complete" in str(screen.query_one("#run-title").render())
            assert "still recording" not in screen.message
            assert ops.cursor_coordinate.row == 1  # the user's place kept across the reads

    asyncio.run(go())


def test_no_color_keeps_the_classes_apart(tmp_path: Path, db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    run_id = _synthetic_run(tmp_path, db)
    asyncio.run(_test_no_color(db, run_id))


async def _test_no_color(db: Path, run_id: int) -> None:
    from gpuscope.tui.widgets.breakdown import BreakdownBar
    from gpuscope.tui.widgets.roofline import RooflinePlot

    app = _app(db)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _open(app, pilot, run_id)
        plot, bar = screen.query_one(RooflinePlot), screen.query_one(BreakdownBar)
        assert plot.color is False and bar.color is False
        await pilot.press("down")  # the memory-bound op selected: the compute-bound one shows its glyph
        drawn = plot.render()
        assert BOUND_STYLE["compute_bound"][0] in drawn.plain and SELECTED_GLYPH in drawn.plain
        assert not any("green" in str(s.style) or "blue" in str(s.style) for s in drawn.spans)
        assert not any("green" in str(s.style) for s in bar.render().spans)
        assert "█" in bar.render().plain and "░" in bar.render().plain  # categories by fill glyph


def test_kernel_names_at_80_columns_are_the_distinct_short_names_of_analyze(tmp_path: Path, db: Path) -> None:
    """Issue 33: two cutlass kernels whose names share a long prefix are told apart at 80
    columns, with the names `analyze` prints (render.names.distinct_names)."""
    from gpuscope.render.names import distinct_names

    names = ["void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x64_32x3_tn_align8>"
             "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x64_32x3_tn_align8::Params)",
             "void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x128_32x3_tn_align8>"
             "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x128_32x3_tn_align8::Params)"]
    events = []
    for i, name in enumerate(names):
        events += [cpu_op("aten::mm", i * 100, 20, ext=i + 1, dims=[[64, 64], [64, 64]], types=["float"] * 2),
                   runtime("cudaLaunchKernel", i * 100 + 5, 5, corr=i + 1, ext=i + 1),
                   kernel(name, i * 100 + 30, 40 + i, corr=i + 1)]
    run_id = _ingest(write_trace(tmp_path / "t.json", events, deviceProperties=PROPS))

    async def go() -> None:
        app = _app(db)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await _open(app, pilot, run_id)
            shown = [cells[0] for _, cells in _rows(screen, "#run-kernels")]
            assert len(shown) == 2 and shown[0] != shown[1]
            # the names analyze prints at the same width, and each keeps the tile that tells them apart
            assert sorted(shown) == sorted(distinct_names(names, screen.kernel_name_w))
            assert any("256x64" in s for s in shown) and any("128x128" in s for s in shown)

    asyncio.run(go())


def test_host_copy_advice_is_the_figure_analyze_prints_whatever_the_tables_hold(tmp_path: Path, db: Path) -> None:
    """Issue 33: the advice's host-copy time is computed over every copy, as `analyze` does,
    not over the kernels the screen's tables hold (top N): 200 + 100 µs of copies here, with
    the tables cut to the two largest kernels (two GEMMs)."""
    from gpuscope.tui import data

    events = []
    for i, name in enumerate(("gemm_a", "gemm_b", "gemm_c")):
        events += [cpu_op("aten::mm", i * 2000, 20, ext=i + 1, dims=[[64, 64], [64, 64]], types=["float"] * 2),
                   runtime("cudaLaunchKernel", i * 2000 + 5, 5, corr=i + 1, ext=i + 1),
                   kernel(name, i * 2000 + 30, 1000, corr=i + 1)]
    events += [kernel("Memcpy HtoD (Pinned -> Device)", 7000, 200, cat="gpu_memcpy", bytes=4_000_000),
               kernel("Memcpy HtoD (Pageable -> Device)", 7300, 100, cat="gpu_memcpy", bytes=1_000_000)]
    run_id = _ingest(write_trace(tmp_path / "t.json", events, deviceProperties=PROPS))
    want = [a for a in _analysis(run_id)["advice"] if a["kind"] == "host_copies"]
    assert len(want) == 1 and want[0]["evidence"]["host_copy_us"] == pytest.approx(300.0)

    doc = data.run_detail(db, run_id, top=2)["analysis"]
    assert [k["name"] for k in doc["kernels"]] == ["gemm_a", "gemm_b"]  # the tables hold no copy
    got = [a for a in doc["advice"] if a["kind"] == "host_copies"]
    assert got == want


def _rank_set(tmp_path: Path) -> Path:
    """Four ranks of a step (a GEMM, then an all-reduce of 1024 floats, 4 times), rank 2 150 µs
    late at every collective (bench/scale_trace.py --ranks --straggler), made as the straggler
    tests make theirs."""
    from test_stragglers import _one_rank_trace, _scale

    out = tmp_path / "ranks"
    _scale(_one_rank_trace(tmp_path / "one.json"), out, "--ranks", "4", "--copies", "2", "--straggler", "2:150")
    return out


def test_communication_section_shows_the_links_exposed_time_and_the_straggler(tmp_path: Path, db: Path) -> None:
    """Issue 31 point 5: the run screen's Communication section says what `analyze --json`'s
    communication block says: the all-reduce against its link, the exposed time, rank 2 as the
    straggler; `n` brings it into view. A run without collectives has no such section."""
    from textual.containers import VerticalScroll

    run_id = _ingest(_rank_set(tmp_path))
    comm = _analysis(run_id)["communication"]
    assert comm["stragglers"]["straggler"]["rank"] == 2
    plain = _ingest(write_trace(tmp_path / "plain.json", [
        cpu_op("aten::mm", 0, 20, ext=1, dims=[[64, 64], [64, 64]], types=["float"] * 2),
        runtime("cudaLaunchKernel", 5, 5, corr=1, ext=1), kernel("gemm", 30, 40, corr=1)], deviceProperties=PROPS))

    async def go() -> None:
        from gpuscope.render.table import fmt_us

        app = _app(db)
        async with app.run_test(size=(100, 30)) as pilot:
            screen = await _open(app, pilot, run_id)
            heading = screen.query_one("#comm-heading")
            assert heading.display and screen.query_one("#run-comm").display
            text = _text(screen, "#run-comm")
            assert "all_reduce" in text
            assert f"Exposed communication: {fmt_us(comm['exposed']['exposed_us'])}" in " ".join(text.split())
            assert "straggler: rank 2 (rank2/gpu2) started last at 8 of 8 instances" in " ".join(text.split())
            body = screen.query_one("#run-body", VerticalScroll)
            assert heading.region.y > body.region.bottom  # below the fold at first
            await pilot.press("n")
            await pilot.pause()
            assert body.region.y <= heading.region.y < body.region.bottom  # in view
            assert screen.focused is body

            screen = await _open(app, pilot, plain)
            assert not screen.query_one("#comm-heading").display and not screen.query_one("#run-comm").display

    asyncio.run(go())


def test_keys_reach_every_section_and_are_in_the_footer_and_help(tmp_path: Path, db: Path) -> None:
    """Issue 33: the roofline, telemetry and advice below the tables are reached by keys (not
    only the mouse wheel), each key shown in the footer and the help."""
    run_id = _synthetic_run(tmp_path, db)

    async def go() -> None:
        from textual.containers import VerticalScroll
        from textual.widgets import Footer

        from gpuscope.tui.screens.help import KEYS

        app = _app(db)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await _open(app, pilot, run_id)
            body = screen.query_one("#run-body", VerticalScroll)
            for key, heading, focused in (("a", "#advice-heading", "#run-body"), ("t", "#timeline-heading", "#run-body"),
                                          ("r", "#roof-heading", "#run-body"), ("k", "#kernels-heading", "#run-kernels"),
                                          ("o", "#ops-heading", "#run-ops")):
                await pilot.press(key)
                await pilot.pause()
                region = screen.query_one(heading).region
                assert body.region.y <= region.y < body.region.bottom, (key, region, body.region)
                assert screen.focused is screen.query_one(focused), key
            shown = {a.binding.key: a.binding.description for a in screen.active_bindings.values()
                     if a.binding.show}
            for key in ("o", "k", "r", "t", "a", "n"):
                assert shown.get(key), key  # in the footer
            assert screen.query_one(Footer).display
            help_keys = " ".join(k for k, _ in KEYS)
            assert "o k r n t a" in help_keys and "Shift+Tab" in help_keys

    asyncio.run(go())
