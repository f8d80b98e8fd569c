"""`gpuscope run` on Ctrl-C and around empty windows (issue 30, "Also seen"): the status line
is cleared before gpuscope says anything; a program that ignores SIGINT is said to, and a
further Ctrl-C sends SIGTERM, then SIGKILL; a window that recorded nothing (or was dropped)
is said to instead of "not a Kineto/Chrome trace?"; the TUI says "telemetry only" for a run
without a trace. The runs start real child processes and wait on events (a line read, a file
written), never fixed sleeps."""
from __future__ import annotations

import asyncio
import json
import os
import pty
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES, REPO, run_cli, write_trace

PY = sys.executable
TIMEOUT_S = 60.0

#: gpuscope's CLI in a process of its own, with the wait before the ignored-signal check made
#: short (the constant is read when the first signal is passed on).
CLI_SHORT_WAIT = ("import sys; import gpuscope.run.wrapper as w; w.IGNORED_SIGNAL_WAIT_S = 0.3; "
                  "from gpuscope.cli import main; sys.exit(main(sys.argv[1:]))")


def _gpuscope(db: Path, *args: str, **kw: Any) -> subprocess.Popen[Any]:
    return subprocess.Popen([PY, "-c", CLI_SHORT_WAIT, "run", "--db", str(db), *args], cwd=REPO, **kw)


def _kill_group(pid_file: Path) -> None:
    """Kill the program's process group (it leads it) if it is still there."""
    try:
        os.killpg(int(pid_file.read_text()), signal.SIGKILL)
    except (OSError, ValueError):
        pass


def _wait_file(path: Path, proc: subprocess.Popen[Any]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not (path.exists() and path.read_text().strip()):
        assert proc.poll() is None, f"gpuscope ended before {path.name} was written"
        assert time.monotonic() < deadline, f"no {path.name} within {TIMEOUT_S} s"
        time.sleep(0.05)


# --------------------------------------------------------------------------------------------
# the status line is cleared before a message


def _read_pty_until(fd: int, text: str, seen: bytearray) -> str:
    deadline = time.monotonic() + TIMEOUT_S
    while text.encode() not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"{text!r} never came; the terminal showed {bytes(seen)[-400:]!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the other side closed
                chunk = b""
            assert chunk, f"the terminal closed before {text!r}: {bytes(seen)[-400:]!r}"
            seen += chunk
    return seen.decode(errors="replace")


WAITS_FOR_CTRL_C = """
import os, signal, sys, time
signal.signal(signal.SIGINT, lambda *a: sys.exit(0))
open(sys.argv[1], 'w').write(str(os.getpid()))
time.sleep(120)
"""


def test_a_message_on_ctrl_c_starts_on_a_cleared_line(tmp_path: Path) -> None:
    script = tmp_path / "waits.py"
    script.write_text(WAITS_FOR_CTRL_C)
    ready = tmp_path / "ready"
    master, slave = pty.openpty()
    proc = _gpuscope(tmp_path / "s.duckdb", "--no-profile", "--no-analyze", "--", PY, str(script), str(ready),
                     stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    seen = bytearray()
    try:
        _read_pty_until(master, " samples", seen)  # the status line is up
        _wait_file(ready, proc)
        proc.send_signal(signal.SIGINT)
        shown = _read_pty_until(master, "gpuscope run: SIGINT passed on", seen)
        assert proc.wait(timeout=TIMEOUT_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        _kill_group(ready)
        os.close(master)
    at = shown.index("gpuscope run: SIGINT passed on")
    # back to the line's start and erased, not glued to "... N samples"
    assert shown[:at].endswith("\r\x1b[K"), repr(shown[max(0, at - 80):at + 40])
    assert " samples" in shown[:at]


# --------------------------------------------------------------------------------------------
# a program that ignores SIGINT


IGNORES_INT = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
open(sys.argv[1], 'w').write(str(os.getpid()))
time.sleep(120)
"""

#: the shell ignores SIGINT and SIGTERM, and the Python it becomes inherits both
SHELL_IGNORES_INT_TERM = ("trap '' INT TERM; exec " + PY
                          + " -c 'import os, sys, time; open(sys.argv[1], \"w\").write(str(os.getpid())); "
                            "time.sleep(120)' \"$0\"")


def _lines(stream: Any) -> queue.Queue[str]:
    q: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:
            q.put(line)
        q.put("")  # end of the stream

    threading.Thread(target=pump, daemon=True).start()
    return q


def _next_line_with(q: queue.Queue[str], text: str, got: list[str]) -> str:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            line = q.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no line with {text!r} within {TIMEOUT_S} s: {got}") from None
        assert line, f"stderr ended before a line with {text!r}: {got}"
        got.append(line)
        if text in line:
            return line


@pytest.mark.parametrize("how,presses,code", [
    ("python SIG_IGN", 2, 128 + signal.SIGTERM),
    ("sh trap INT TERM", 3, 128 + signal.SIGKILL),
])
def test_a_program_that_ignores_ctrl_c_is_said_to_and_stopped_by_the_next(tmp_path: Path, how: str, presses: int,
                                                                           code: int) -> None:
    ready = tmp_path / "ready"
    if how.startswith("python"):
        script = tmp_path / "ignores.py"
        script.write_text(IGNORES_INT)
        cmd = [PY, str(script), str(ready)]
    else:
        cmd = ["sh", "-c", SHELL_IGNORES_INT_TERM, str(ready)]
    proc = _gpuscope(tmp_path / "s.duckdb", "--no-profile", "--no-analyze", "--json", "--", *cmd,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    got: list[str] = []
    try:
        lines = _lines(proc.stderr)
        _wait_file(ready, proc)
        proc.send_signal(signal.SIGINT)
        _next_line_with(lines, "SIGINT passed on to the program", got)
        said = _next_line_with(lines, "the program ignores SIGINT", got)
        assert said.strip() == "gpuscope run: the program ignores SIGINT; press Ctrl-C again to send SIGTERM"
        proc.send_signal(signal.SIGINT)
        said = _next_line_with(lines, "SIGTERM sent", got)
        assert said.strip() == ("gpuscope run: SIGTERM sent to the program's process group; press Ctrl-C again to "
                                "send SIGKILL")
        if presses == 3:
            # SIGTERM is ignored too: the program is still there until the third Ctrl-C
            assert proc.poll() is None and Path(f"/proc/{int(ready.read_text())}").exists()
            proc.send_signal(signal.SIGINT)
            said = _next_line_with(lines, "SIGKILL sent", got)
            assert said.strip() == "gpuscope run: SIGKILL sent to the program's process group"
        out = proc.stdout.read()
        assert proc.wait(timeout=TIMEOUT_S) == code, got
    finally:
        if proc.poll() is None:
            proc.kill()
        _kill_group(ready)
    doc = json.loads(out)
    assert doc["exit_code"] == code and doc["interrupted"]["signal"] == "SIGINT"


def test_a_program_that_handles_ctrl_c_itself_gets_no_warning(tmp_path: Path) -> None:
    # it takes its time to exit (a handler of its own, as while a window is written): no
    # "ignores" line, and a second Ctrl-C is passed on as SIGINT, not turned into SIGTERM
    script = tmp_path / "slow.py"
    go = tmp_path / "go"
    script.write_text(f"""
import os, signal, sys, time
hits = []
def on_int(*a):
    hits.append(1)
    if len(hits) == 2:
        sys.exit(5)
signal.signal(signal.SIGINT, on_int)
open(sys.argv[1], 'w').write(str(os.getpid()))
while not hits:
    time.sleep(0.02)
open({str(go)!r}, 'w').write('1')  # the first SIGINT reached the program
while True:
    time.sleep(0.02)
""")
    ready = tmp_path / "ready"
    proc = _gpuscope(tmp_path / "s.duckdb", "--no-profile", "--no-analyze", "--", PY, str(script), str(ready),
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    got: list[str] = []
    try:
        lines = _lines(proc.stderr)
        _wait_file(ready, proc)
        proc.send_signal(signal.SIGINT)
        _next_line_with(lines, "SIGINT passed on", got)
        _wait_file(go, proc)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=TIMEOUT_S) == 5  # its own exit on the second SIGINT
        _next_line_with(lines, "storing the run", got)
    finally:
        if proc.poll() is None:
            proc.kill()
        _kill_group(ready)
    assert not any("ignores" in line or "SIGTERM" in line for line in got), got


def test_ignores_signal_reads_the_process_mask() -> None:
    from gpuscope.run.wrapper import ignores_signal

    if not Path(f"/proc/{os.getpid()}/status").exists():
        pytest.skip("no /proc")
    child = subprocess.Popen([PY, "-c", "import signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                              "print('ok', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ok"
        assert ignores_signal(child.pid, signal.SIGINT)
        assert not ignores_signal(child.pid, signal.SIGTERM)
    finally:
        child.stdin.close()
        child.wait(timeout=TIMEOUT_S)
    assert not ignores_signal(child.pid, signal.SIGINT)  # gone


# --------------------------------------------------------------------------------------------
# windows that recorded nothing, or were dropped


def _empty_kineto_trace(path: Path) -> Path:
    """What torch 2.x writes for a window during which the program ran no op: metadata, the
    profiler's own span, two instants; no op, kernel or annotation."""
    pid = 4242
    events = [
        {"ph": "M", "name": "process_name", "ts": 1000.0, "pid": pid, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_labels", "ts": 1000.0, "pid": pid, "tid": 0, "args": {"labels": "CPU"}},
        {"ph": "M", "name": "process_sort_index", "ts": 1000.0, "pid": pid, "tid": 0, "args": {"sort_index": pid}},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": 900.0, "dur": 200453.0, "args": {"Op count": 0}},
        {"ph": "M", "name": "process_sort_index", "ts": 900.0, "pid": "Spans", "tid": 0,
         "args": {"sort_index": 536870912}},
        {"ph": "i", "s": "g", "name": "Iteration Start: PyTorch Profiler", "pid": "Traces",
         "tid": "Trace PyTorch Profiler", "ts": 900.0},
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 201400.0},
    ]
    return write_trace(path, events, schemaVersion=1, deviceProperties=[], record_shapes=1,
                       displayTimeUnit="ms", baseTimeNanoseconds=1_790_000_000_000_000_000)


def test_ingest_tells_a_trace_that_recorded_nothing_from_a_file_that_is_no_trace(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    empty = _empty_kineto_trace(tmp_path / "empty.pt.trace.json")
    r = run_cli("ingest", "--db", str(db), str(empty))
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert "the trace recorded no activity: only metadata (7 entries" in r.err
    assert "not a Kineto/Chrome trace" not in r.err
    # entries that are no trace events still read as such
    other = write_trace(tmp_path / "other.json", [{"foo": 1}, {"bar": 2}])
    r = run_cli("ingest", "--db", str(db), str(other))
    assert r.code == 2 and "no trace events gpuscope can use among 2 entries (not a Kineto/Chrome trace?)" in r.err
    assert not db.exists() or run_cli("runs", "--db", str(db), "--json").json() == []


def _profile() -> Any:
    from gpuscope.run.wrapper import ProfileConfig

    return ProfileConfig(delay_s=2.0, duration_s=2.0, windows=2)


def test_a_window_that_recorded_nothing_is_said_to() -> None:
    from gpuscope.run.wrapper import profiler_notes

    s = 10**9
    path = "/r/traces/h_7_window1.pt.trace.json.gz"
    events = [{"event": "armed", "pid": 7, "ts_ns": 1 * s}, {"event": "window_open", "pid": 7, "ts_ns": 3 * s,
                                                             "path": path},
              {"event": "exit", "pid": 7, "ts_ns": 6 * s}]
    windows = [{"pid": 7, "start_ns": 3 * s, "end_ns": 5 * s, "path": path}]
    notes = profiler_notes(_profile(), events, windows, 1, 0, 4 * s, empty_traces=[path])
    assert notes == ["pid 7: the profiler window opened 3.0 s into the run recorded no activity (closed at exit, "
                     "after the interrupt): the program ran no ops while it was open (it waited, slept, or sat in "
                     "a long import); open it later with --profile-delay"]
    # the same window with ops in its trace: nothing to say
    assert profiler_notes(_profile(), events, windows, 1, 0, 4 * s) == []


def test_a_window_dropped_by_the_interrupt_is_said_to() -> None:
    from gpuscope.run.wrapper import profiler_notes

    s = 10**9
    one, two = "/r/traces/h_7_window1.pt.trace.json.gz", "/r/traces/h_7_window2.pt.trace.json.gz"
    events = [{"event": "armed", "pid": 7, "ts_ns": 1 * s},
              {"event": "window_open", "pid": 7, "ts_ns": 3 * s, "path": one},
              {"event": "window_open", "pid": 7, "ts_ns": 7 * s, "path": two},
              {"event": "window_discarded", "pid": 7, "ts_ns": 7 * s, "path": two,
               "reason": "exit began while the profiler was starting"},
              {"event": "exit", "pid": 7, "ts_ns": 8 * s}]
    windows = [{"pid": 7, "start_ns": 3 * s, "end_ns": 5 * s, "path": one}]
    assert profiler_notes(_profile(), events, windows, 1, 0, 7 * s) == [
        "pid 7: the profiler window opened 7.0 s into the run was dropped unwritten by the interrupt (exit began "
        "while the profiler was starting)"]


#: a program that writes a trace of its own into the run's traces folder (as vLLM's profiler
#: does), one that recorded nothing; no torch needed for the run's side of it
WRITES_AN_EMPTY_TRACE = ("import os, shutil, sys; shutil.copy(sys.argv[1], os.path.join(os.environ['GPUSCOPE_RUN_DIR'], "
                         "'traces', 'own.pt.trace.json'))")


def test_run_says_the_trace_recorded_no_activity(tmp_path: Path) -> None:
    empty = _empty_kineto_trace(tmp_path / "empty.pt.trace.json")
    p = subprocess.run([PY, "-m", "gpuscope", "run", "--db", str(tmp_path / "s.duckdb"), "--json", "--no-analyze",
                        "--", PY, "-c", WRITES_AN_EMPTY_TRACE, str(empty)],
                       capture_output=True, text=True, timeout=180, cwd=REPO)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert len(doc["traces"]) == 1 and doc["windows"] == []
    assert "not a Kineto/Chrome trace" not in p.stderr and "could not ingest" not in p.stderr
    assert ("gpuscope run: the profiler window recorded no activity (the program ran no ops while it was open): no "
            "trace to ingest") in p.stderr
    assert doc["ingest_error"] is None
    assert doc["profiler"]["notes"] == ["own.pt.trace.json: the trace recorded no activity"]


# --------------------------------------------------------------------------------------------
# the TUI's run screen for a run without a trace


def test_run_screen_says_telemetry_only_for_a_run_without_a_trace(tmp_path: Path) -> None:
    from gpuscope.tui.screens.run import no_gpu_text

    db = tmp_path / "s.duckdb"
    r = run_cli("run", "--db", str(db), "--no-profile", "--no-analyze", "-q", "--", PY, "-c", "pass")
    assert r.code == 0, r.err
    run_id = run_cli("runs", "--db", str(db), "--json").json()[0]["id"]
    text = asyncio.run(_nogpu_text(db, run_id))
    assert "No trace in this run: telemetry only; profiling was off (--no-profile)." in text and "CPU-only" not in text
    # a run that had profiling on and still no trace (a program that never imported torch)
    doc = {"counts": {"ops": 0, "gpu_activities": 0}}
    assert "telemetry only; no profiler window was written" in no_gpu_text(doc, True)
    assert no_gpu_text(doc, None) == "No trace in this run: telemetry only. There are no ops, kernels or roofline."
    assert "the trace is CPU-only" in no_gpu_text({"counts": {"ops": 12, "gpu_activities": 0}}, None)


async def _nogpu_text(db: Path, run_id: int) -> str:
    from gpuscope.tui.app import GpuscopeApp
    from gpuscope.tui.screens.run import RunScreen

    # a recording's GPUs on the live screen, never this machine's
    app = GpuscopeApp(db=db, replay=FIXTURES / "recordings" / "synthetic_h100_a100.jsonl", interval_s=60.0)
    async with app.run_test(size=(100, 30)) as pilot:
        app.open_run(run_id)
        for _ in range(400):
            await pilot.pause(0.05)
            screen = app.screen
            if isinstance(screen, RunScreen) and screen.doc is not None and screen.doc["run"]["id"] == run_id:
                await pilot.pause()
                nogpu = screen.query_one("#run-nogpu")
                assert nogpu.display
                return str(nogpu.render())
    raise AssertionError("the run screen never showed the run")
