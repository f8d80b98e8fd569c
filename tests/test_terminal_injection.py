"""Terminal escape injection (issue 27, class 2): names other people made (kernel, op and thread
names, run names from file names, a recording's device names, a program's name, file names in
error messages) reach every text face with their control characters shown as visible escapes,
never raw: a kernel named ``ESC ] 0 ; TITLE BEL`` must not set the window title, ``ESC ] 52``
must not write the clipboard. ``--json`` keeps the exact string (JSON escapes it).

A trace and a recording carrying every payload below go through every command's text output
and through the TUI (Pilot, and a real terminal in tmux); the payloads themselves are also fed
one by one, and as Hypothesis strings, to the one function that owns this
(``gpuscope.textsafe.visible``) and the table renderer."""
from __future__ import annotations

import asyncio
import json
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, cpu_op, kernel, run_cli, runtime, write_trace

#: What an attacker puts in a name: OSC title, OSC 52 clipboard, CSI clear, the one-byte C1 CSI
#: (0x9b), DCS, a lone ESC, ST (``ESC \\``) and the one-byte ST/OSC, a bidi override, NUL, BEL,
#: backspace, carriage return, DEL, the line separator and C1 NEL.
PAYLOADS = {
    "osc_title": "\x1b]0;TITLE\x07",
    "osc52": "\x1b]52;c;QkFTRTY0\x07",
    "csi_clear": "\x1b[2J\x1b[H",
    "c1_csi": "\x9b2J",
    "dcs": "\x1bP1$r\x1b\\",
    "lone_esc": "\x1b",
    "st": "\x1b\\",
    "c1_osc_st": "\x9d0;C1TITLE\x9c",
    "bidi": "\u202eevil\u202c",
    "nul": "\x00",
    "bel": "\x07",
    "backspace": "\x08\x08\x08",
    "cr": "\rOVERWRITE",
    "del": "\x7f",
    "line_sep": "\u2028",
    "nel": "\x85",
    "isolate": "\u2066x\u2069",
    # Rich markup: as markup a DataTable's string cell becomes an OSC 8 hyperlink, or a crash
    "markup_link": "[link=https://evil.example/]click[/link]",
    "markup_close": "[/]",
}
#: All of them in one string (a device name, a file name: NUL cannot be in a file name).
ALL = "".join(PAYLOADS.values())
FILE_SAFE = ALL.replace("\x00", "").replace("/", "")

#: Raw characters no text face may write (an oracle of its own, not textsafe's): C0 but tab and
#: newline, DEL, C1, the bidi and line-separator format characters, lone surrogates.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def raw_controls(text: str) -> list[str]:
    return sorted({repr(m.group()) for m in RAW.finditer(text)})


def assert_clean(what: str, *texts: str) -> None:
    for text in texts:
        found = raw_controls(text)
        assert not found, f"{what}: raw control characters {found} reach the terminal in:\n{text[:3000]!r}"


# -- the hostile inputs ------------------------------------------------------------------------------


def hostile_trace(path: Path, tag: str) -> Path:
    """A small GPU trace whose kernels, ops, thread, dtypes and device name each carry a payload."""
    events: list[Any] = [{"ph": "M", "name": "thread_name", "pid": 100, "tid": 100, "args": {"name": "thr" + ALL}},
                         {"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "proc" + ALL}}]
    t = 0.0
    for i, (label, payload) in enumerate(PAYLOADS.items()):
        ext = corr = i + 1
        events += [cpu_op(f"aten::{label}{payload}_{tag}", t, 20.0, ext, dims=[[8, 8], [8, 8]],
                          types=["float" + payload, "float"]),
                   runtime("cudaLaunchKernel", t + 2, 2.0, corr, ext),
                   kernel(f"void ns::k_{label}{payload}<{i}>(float*)", t + 5, 10.0 + i, corr)]
        t += 50.0
    return write_trace(path, events, deviceProperties=[{"id": 0, "name": "NVIDIA H100" + ALL,
                                                        "totalGlobalMem": 80 * 2**30, "computeMajor": 9,
                                                        "computeMinor": 0, "numSms": 132}])


def hostile_recording(path: Path) -> Path:
    """The synthetic recording with device names, architectures and reasons that carry payloads."""
    lines = (FIXTURES / "recordings" / "synthetic_h100_a100.jsonl").read_text().splitlines()
    head = json.loads(lines[0])
    for d in head["devices"]:
        d["name"] = f"{d.get('name')}{ALL}"
        d.setdefault("properties", {})["architecture"] = "Hopper" + ALL
        d["unsupported"] = {k: v + ALL for k, v in (d.get("unsupported") or {}).items()}
    path.write_text("\n".join([json.dumps(head)] + lines[1:]) + "\n")
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A store with two hostile runs (ingested through the CLI: its summary is checked too)."""
    tmp = tmp_path_factory.mktemp("hostile")
    db = tmp / "store.duckdb"
    out: dict[str, Any] = {"tmp": tmp, "db": db, "texts": []}
    for tag in ("a", "b"):
        trace = hostile_trace(tmp / f"run{tag}{FILE_SAFE}.pt.trace.json", tag)
        r = run_cli("ingest", "--db", db, trace)
        assert r.code == 0, r.err
        out["texts"].append(("ingest", r.out, r.err))
    out["recording"] = hostile_recording(tmp / f"rec{FILE_SAFE}.jsonl")
    return out


def cli(store: dict[str, Any], *args: Any) -> Any:
    return run_cli(*args[:1], "--db", store["db"], *args[1:])


# -- every command's text output ---------------------------------------------------------------------


def test_ingest_summary_shows_the_file_name_visible(store: dict[str, Any]) -> None:
    for what, out, err in store["texts"]:
        assert_clean(what, out, err)
        assert "\\x1b]0;TITLE\\x07" in out  # the run name (the file's) is there, shown


@pytest.mark.parametrize("args", [
    ("runs",), ("runs", "--limit", "1"),
    ("analyze", "1"), ("analyze", "1", "--wide"), ("analyze", "2", "--top", "30"),
    ("compare", "1", "2"), ("compare", "1", "2", "--wide"), ("compare", "1", "1"),
    ("sql", "SELECT name, kind FROM kernels"), ("sql", "SELECT * FROM ops", "--wide"),
    ("sql", "SELECT name FROM runs UNION ALL SELECT name FROM devices"),
], ids=lambda a: " ".join(a))
def test_text_reports_show_hostile_names_visible(store: dict[str, Any], args: tuple[str, ...]) -> None:
    r = cli(store, *args)
    assert r.code == 0, r.err
    assert_clean(" ".join(args), r.out, r.err)
    if args[0] in ("analyze", "compare"):
        assert "\\x1b]0;TITLE\\x07" in r.out or "\\x1b]0;TITL" in r.out, r.out  # shown, not dropped


@pytest.mark.parametrize("args", [("analyze", "1"), ("sql", "SELECT name FROM kernels"), ("runs",)])
def test_json_keeps_the_exact_names(store: dict[str, Any], args: tuple[str, ...]) -> None:
    r = cli(store, *args, "--json")
    assert r.code == 0, r.err
    assert "\x1b" not in r.out and "\x9b" not in r.out  # JSON escapes them ...
    assert any(PAYLOADS["osc52"] in s for s in strings(r.json()))  # ... and keep them exact


def strings(doc: Any) -> list[str]:
    if isinstance(doc, str):
        return [doc]
    if isinstance(doc, dict):
        return [s for k, v in doc.items() for s in strings(k) + strings(v)]
    if isinstance(doc, list):
        return [s for v in doc for s in strings(v)]
    return []


def test_json_document_round_trips_a_kernel_name(store: dict[str, Any]) -> None:
    doc = cli(store, "analyze", "1", "--json", "--top", "50").json()
    names = {k["name"] for k in doc["kernels"]}
    assert f"void ns::k_osc52{PAYLOADS['osc52']}<1>(float*)" in names


def test_export_and_report_summaries(store: dict[str, Any]) -> None:
    tmp = store["tmp"]
    for args in (("export", "1", "--format", "perfetto", "--out", tmp / "t.json.gz", "--force"),
                 ("export", "1", "--format", "csv", "--out", tmp / "csv", "--force"),
                 ("report", "1", "--out", tmp / "r.html", "--force")):
        r = cli(store, *args)
        assert r.code == 0, (args, r.err)
        assert_clean(str(args[:3]), r.out, r.err)
        assert "\\x1b]0;TITLE" in r.out + r.err  # the run's name is on its line, shown


def test_error_lines_show_file_and_run_names_visible(store: dict[str, Any]) -> None:
    tmp = store["tmp"]
    missing = tmp / f"missing{FILE_SAFE}.json"
    bad = tmp / f"bad{FILE_SAFE}.json"
    bad.write_text("{not json" + ALL)
    for args in (("analyze", f"no-such-run{ALL}"), ("ingest", missing), ("ingest", bad),
                 ("compare", f"x{ALL}", "1"), ("sql", f"SELECT '{FILE_SAFE}' FROM no_such_table"),
                 ("export", f"r{ALL}", "--format", "csv", "--out", tmp / "e")):
        r = cli(store, *args)
        assert r.code == 2, (args, r.code, r.err)
        assert_clean(str(args[0]), r.out, r.err)
        assert len(r.err.strip().splitlines()) == 1, r.err  # one line: a newline in a name is shown too


@pytest.mark.parametrize("label", sorted(PAYLOADS))
def test_argument_errors_echo_arguments_visible(label: str) -> None:
    payload = PAYLOADS[label]
    for args in (("runs", "--limit", f"x{payload}"), ("nosuchcommand" + payload,), ("analyze", "--top", payload),
                 ("runs", f"extra{payload}"), ("sql", "SELECT 1", f"--no-such-flag{payload}")):
        r = run_cli(*args)
        assert r.code == 2, (args, r.code)
        assert_clean(label, r.out, r.err)


def test_monitor_banner_shows_replayed_device_names_visible(store: dict[str, Any]) -> None:
    r = run_cli("monitor", "--replay", store["recording"], "--db", store["tmp"] / "mon.duckdb",
                "--interval", "0.1", "--seconds", "0.3")
    assert r.code == 0, r.err
    assert_clean("monitor", r.out, r.err)
    assert "NVIDIA H100 80GB HBM3\\x1b]0;TITLE" in r.err, r.err


def test_run_summary_of_a_hostile_program_and_recording(store: dict[str, Any]) -> None:
    tmp = store["tmp"]
    script = tmp / f"prog{FILE_SAFE}.py"
    script.write_text("print('hello')\n")
    r = run_cli("run", "--db", tmp / "run.duckdb", "--replay", store["recording"], "--no-profile", "--hz", "20",
                "--", sys.executable, script, f"--arg{FILE_SAFE}")
    assert r.code == 0, r.err
    assert_clean("run", r.out, r.err)
    assert "\\x1b]0;TITLE" in r.out  # the replayed GPU's name
    runs = run_cli("runs", "--db", tmp / "run.duckdb")
    assert_clean("runs after run", runs.out, runs.err)
    assert "prog" in runs.out  # the run's name, from the script's (`run` keeps only safe characters of it)


def test_run_of_a_command_not_found_names_it_visible(tmp_path: Path) -> None:
    r = run_cli("run", "--db", tmp_path / "s.duckdb", "--no-profile", "--", f"no-such-program{FILE_SAFE}")
    assert r.code == 2, r.err
    assert_clean("run not found", r.out, r.err)
    assert len(r.err.strip().splitlines()) == 1 and "no-such-program\\x1b]0;TITLE" in r.err, r.err


# -- the one function, the stream and the renderers, over many strings ----------------------------------


@pytest.mark.parametrize("label", sorted(PAYLOADS))
def test_visible_shows_each_payload(label: str) -> None:
    from gpuscope.textsafe import visible

    for layout in (False, True):
        shown = visible(f"a{PAYLOADS[label]}b", layout=layout)
        assert not raw_controls(shown) and shown.startswith("a") and shown.endswith("b")
        assert visible(shown, layout=layout) == shown  # idempotent


def test_visible_shows_the_bytes_of_a_file_name_that_is_not_utf8() -> None:
    import os

    from gpuscope.textsafe import visible

    name = os.fsdecode(b"trace\x9b2J\x1b.json")  # how Python holds it: \udc9b, then ESC
    assert visible(name) == "trace\\udc9b2J\\x1b.json"


@settings(max_examples=200, deadline=None)
@given(st.text(st.one_of(st.characters(codec=None, exclude_categories=()),
                         st.sampled_from("\x1b\x9b\x9c\x9d\x90\x85\x7f\x00\r\x08\u061c\u200e\u200f\u202e\u2067"
                                         "\u2028\udc9b\udc1b")), max_size=40))
def test_visible_leaves_no_control_character(text: str) -> None:
    from gpuscope.textsafe import has_control, visible

    for layout in (False, True):
        shown = visible(text, layout=layout)
        assert not raw_controls(shown.replace("\t", "").replace("\n", "") if layout else shown)
        assert not has_control(shown, layout=layout)
        assert visible(shown, layout=layout) == shown
        if not has_control(text, layout=layout):
            assert shown is text  # ordinary names are not copied, let alone changed


@settings(max_examples=80, deadline=None)
@given(st.lists(st.text(max_size=30), min_size=1, max_size=6), st.integers(min_value=60, max_value=140))
def test_table_cells_have_no_control_character_and_fit(names: list[str], width: int) -> None:
    from gpuscope.render.table import table

    text = table(["name", "n"], [(n, i) for i, n in enumerate(names)], "lr", width=width, flex="name")
    assert not raw_controls(text)
    lines = text.split("\n")
    assert len(lines) == len(names) + 2  # one line per row: a newline in a name is shown, not obeyed


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=60))
def test_visible_stream_passes_no_control_character(text: str) -> None:
    import io

    from gpuscope.textsafe import VisibleStream, raw_stream

    sink = io.StringIO()
    stream = VisibleStream(sink)
    assert stream.write(text) == len(text)
    print(text, file=stream, flush=True)
    assert not raw_controls(sink.getvalue())
    raw_stream(stream).write("\r\x1b[2K")  # gpuscope's own sequence goes past it
    assert sink.getvalue().endswith("\r\x1b[2K") and raw_stream(sink) is sink


def test_the_progress_line_keeps_its_own_sequence_and_shows_the_file_name() -> None:
    import io

    from gpuscope.ingest.progress import ProgressLine
    from gpuscope.textsafe import VisibleStream

    sink = io.StringIO()
    clock = iter([0.0, 5.0, 6.0, 7.0])
    line = ProgressLine(VisibleStream(sink), live=True, clock=lambda: next(clock))
    line.tick(f"t{ALL}.json", 1000, 0.5, 100)
    line(f"linking {ALL}")
    text = sink.getvalue()
    assert text.startswith("\r\x1b[2Kgpuscope: t\\x1b]0;TITLE")
    assert not raw_controls(text[len("\r\x1b[2K"):])


# -- the TUI ------------------------------------------------------------------------------------------

textual = pytest.importorskip("textual")


def screen_text(app: Any) -> str:
    """What the screen shows now: the text of every segment the compositor would write."""
    strips = app.screen._compositor.render_strips()
    links = {seg.style.link for strip in strips for seg in strip if seg.style is not None and seg.style.link}
    assert not links, f"a name became a hyperlink (OSC 8): {links}"  # a name is text, never markup
    return "\n".join("".join(seg.text for seg in strip) for strip in strips)


async def _settle(pilot: Any, done: Any, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


def test_tui_screens_show_hostile_names_visible(store: dict[str, Any]) -> None:
    from textual.widgets import DataTable

    from gpuscope.tui.app import GpuscopeApp
    from gpuscope.tui.screens.run import RunScreen

    shown: dict[str, str] = {}

    async def go() -> None:
        app = GpuscopeApp(db=store["db"], replay=store["recording"], interval_s=0.1)
        async with app.run_test(size=(160, 50)) as pilot:
            # live: the replayed GPUs' cards, their names and reasons
            await _settle(pilot, lambda: "NVIDIA H100" in screen_text(app), "the live cards")
            await pilot.pause(0.3)
            shown["live"] = screen_text(app)
            # runs
            app.switch_mode("runs")
            await _settle(pilot, lambda: "runa" in screen_text(app), "the runs table")
            shown["runs"] = screen_text(app)
            # one run: title, tables, roofline, advice
            app.open_run(1)
            await _settle(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.doc is not None
                          and app.screen.query_one("#run-ops", DataTable).row_count > 0, "the run screen")
            await pilot.pause(0.2)
            shown["run"] = screen_text(app)
            await pilot.press("down", "down", "tab")
            await pilot.pause(0.2)
            shown["run, kernels"] = screen_text(app)
            # compare
            app.mark_for_compare(1)
            app.mark_for_compare(2)
            await _settle(pilot, lambda: "comparing" not in screen_text(app) and "B:" in screen_text(app),
                          "the compare screen")
            await pilot.pause(0.2)
            shown["compare"] = screen_text(app)
            app.notify(f"note {ALL}", title=f"title {ALL}")
            await pilot.pause(0.2)
            shown["notification"] = screen_text(app)

    asyncio.run(go())
    for screen, text in shown.items():
        assert_clean(f"TUI {screen}", text)
    assert "\\x1b]0;TITLE" in shown["live"]  # the device name, shown
    assert "\\x1b]0;TITLE" in shown["run"] + shown["runs"]


def test_tui_cards_and_cells_make_names_visible() -> None:
    from gpuscope.tui.screens.runs import cell_text
    from gpuscope.tui.text import safe_data

    for payload in PAYLOADS.values():
        assert not raw_controls(cell_text(f"k{payload}", "l").plain)
        doc = safe_data({"kernels": [{"name": f"k{payload}", "n": [1, 2.0, None]}], ("t" + payload): (payload,)})
        assert not raw_controls(json.dumps(doc, ensure_ascii=False))
        assert doc["kernels"][0]["n"] == [1, 2.0, None]


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_tui_in_a_real_terminal_writes_no_raw_control(store: dict[str, Any]) -> None:
    """``gpuscope tui`` in tmux over the hostile store and recording: the pane's title stays
    tmux's, the names show as escapes, and ``capture-pane -e`` holds only SGR colour sequences."""
    from tmux_harness import Tmux, start_tui

    tmux = Tmux()
    try:
        start_tui(tmux, store["db"], "--replay", str(store["recording"]), width=140, height=40)
        tmux.wait_for("the live cards", lambda s: "NVIDIA H100" in s)
        tmux.keys("2")
        tmux.wait_for("the runs table", lambda s: "runa" in s)
        tmux.keys("Enter")
        tmux.wait_for("the run screen", lambda s: "aten::" in s and "Top" in s)
        screen = tmux.screen(escapes=True)
        title = tmux("display-message", "-p", "-t", tmux.session, "#{pane_title}")
        tmux.keys("q")
        tmux.wait_for("the exit", lambda s: "gpuscope-exit=" in s)
    finally:
        tmux.close()
    assert "TITLE" not in title, title  # OSC 0 in a name did not set the title
    assert "\\x1b]0;TITL" in screen or "\\x1b]" in screen  # the names are there, shown
    without_sgr = re.sub(r"\x1b\[[0-9;:]*m", "", screen)
    assert_clean("tmux capture-pane -e", without_sgr)
