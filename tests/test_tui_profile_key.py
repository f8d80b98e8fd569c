"""The ``p`` key of the TUI's live and run screens: a profiler window now in the run recording,
through the same request as ``gpuscope profile``, with a notification naming the processes
that opened one (driven with Textual's pilot; the run's child is the stand-in of
tests/fakes/fake_window_child.py)."""
from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import FIXTURES, REPO

PY = sys.executable
FAKE = REPO / "tests" / "fakes" / "fake_window_child.py"
RECORDING = FIXTURES / "recordings" / "synthetic_h100_a100.jsonl"


def _armed(tmp_path: Path) -> bool:
    for f in (tmp_path / "gpuscope-runs").glob("*/profiler.jsonl"):
        if any(json.loads(x).get("event") == "armed" for x in f.read_text().splitlines() if x.strip()):
            return True
    return False


def test_p_opens_a_window_from_the_live_and_run_screens(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    proc = subprocess.Popen([PY, "-m", "gpuscope", "run", "--db", str(db), "-q", "--no-analyze",
                             "--profile-duration", "0.2", "--", PY, str(FAKE), "2", "--deadline", "90"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not _armed(tmp_path):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the run's child never armed"
            time.sleep(0.05)
        asyncio.run(_drive(db))
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0
    lines = [json.loads(x) for f in (tmp_path / "gpuscope-runs").glob("*/window-requests.jsonl")
             for x in f.read_text().splitlines()]
    assert [r["source"] for r in lines] == ["gpuscope tui", "gpuscope tui"]


async def _drive(db: Path) -> None:
    from gpuscope.tui.app import GpuscopeApp
    from gpuscope.tui.screens.live import LiveScreen
    from gpuscope.tui.screens.run import RunScreen

    app = GpuscopeApp(db=db, replay=RECORDING, interval_s=0.5)
    said: list[tuple[str, str]] = []
    notify = app.notify

    def capture(message: str, **kw) -> None:
        said.append((message, kw.get("severity", "information")))
        notify(message, **kw)

    app.notify = capture  # type: ignore[method-assign]

    async def answer(n: int) -> tuple[str, str]:
        deadline = time.monotonic() + 90
        while len([m for m in said if not m[0].startswith("asking")]) < n:
            assert time.monotonic() < deadline, said
            await asyncio.sleep(0.05)
        return [m for m in said if not m[0].startswith("asking")][n - 1]

    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, LiveScreen)
        await pilot.press("p")
        msg, severity = await answer(1)
        assert re.fullmatch(r"run (\d+) \(fake_window_child\): a 0\.2 s window opened in pid \d+ \(python\S*\)", msg), msg
        assert severity == "information"
        run_id = int(re.match(r"run (\d+)", msg).group(1))
        app.open_run(run_id)
        await pilot.pause()
        assert isinstance(app.screen, RunScreen)
        await pilot.press("p")
        msg, _ = await answer(2)
        assert msg.startswith(f"run {run_id} (fake_window_child): a 0.2 s window opened in pid"), msg
        assert said[0][0] == "asking the newest run recording for a profiler window…"
        assert any(m == f"asking run {run_id} for a profiler window…" for m, _ in said)


def test_p_without_a_recording_run_says_why(tmp_path: Path) -> None:
    from gpuscope.tui.windows import ask_window_now

    msg, severity = ask_window_now(tmp_path / "none.duckdb", None)
    assert severity == "warning" and msg.startswith("no window: ") and "no store here yet" in msg
