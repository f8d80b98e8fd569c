"""`gpuscope tui` in a real terminal (tmux): start it, read the screen, press keys, quit.

Skips, saying so, where tmux is missing (CI installs it: .ci/run)."""
from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, cpu_op, kernel, run_cli, runtime, write_trace
from tmux_harness import Tmux, start_tui

RECORDING = FIXTURES / "recordings" / "synthetic_h100_a100.jsonl"
RUN_NAME = "tmux-probe-run"
WIDTH, HEIGHT = 100, 30

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None,
                                reason="tmux is not installed (apt-get install tmux; .ci/run does in CI)")


def _store_with_one_run(tmp_path: Path) -> Path:
    events = [
        cpu_op("aten::mm", 0.0, 60.0, ext=1, dims=[[512, 512], [512, 512]], types=["float", "float"]),
        runtime("cudaLaunchKernel", 5.0, 5.0, corr=10, ext=1),
        kernel("ampere_sgemm_128x64_nn", 12.0, 40.0, corr=10),
    ]
    trace = write_trace(tmp_path / "probe.json", events)
    db = tmp_path / "store.duckdb"
    r = run_cli("ingest", "--db", str(db), "--name", RUN_NAME, "-q", str(trace))
    assert r.code == 0, r.err
    return db


@pytest.fixture
def tmux() -> Tmux:
    t = Tmux()
    yield t
    t.close()


def _start(tmux: Tmux, db: Path, extra_env: dict[str, str] | None = None) -> None:
    start_tui(tmux, db, "--replay", str(RECORDING), "--interval", "0.5", width=WIDTH, height=HEIGHT,
              extra_env=extra_env)


def test_tui_in_a_real_terminal_shows_screens_takes_keys_and_quits(tmp_path: Path, tmux: Tmux) -> None:
    db = _store_with_one_run(tmp_path)
    _start(tmux, db)

    # the live screen first (the default), with the app's title
    first = tmux.wait_for("the first screen", lambda s: "gpuscope" in s and "gpuscope-exit" not in s)
    assert len(first.splitlines()) <= HEIGHT
    assert "Traceback" not in first

    # 2: the runs screen, with the stored run on it
    tmux.keys("2")
    tmux.wait_for("the runs screen with the stored run", lambda s: RUN_NAME in s)

    # ?: the help, every key; Esc closes it and the runs screen is back
    tmux.keys("?")
    shown = tmux.wait_for("the help", lambda s: "keys" in s and "compare" in s and "Esc" in s)
    for key in ("q", "Tab", "Enter", "Esc", "1 2 3 4"):
        assert key in shown, (key, shown)
    tmux.keys("Escape")
    tmux.wait_for("the runs screen again", lambda s: RUN_NAME in s and "next screen" not in s)

    # q: the app quits, exit code 0, and the terminal is the shell's again
    tmux.keys("q")
    last = tmux.wait_for("the app's exit", lambda s: "gpuscope-exit=" in s, timeout_s=30)
    assert "gpuscope-exit=0" in last, last
    assert "Traceback" not in last


_SGR = re.compile(r"\x1b\[([0-9;]*)m")


def _chromatic(screen: str) -> set[str]:
    """The colours (not greys) the terminal was told to draw: 256-colour and true-colour SGR."""
    found = set()
    for params in _SGR.findall(screen):
        p = [int(x) for x in params.split(";") if x.isdigit()]
        i = 0
        while i < len(p):
            if p[i] in (38, 48) and i + 2 < len(p) and p[i + 1] == 5:
                n = p[i + 2]
                if 16 <= n <= 231 and len({(n - 16) // 36, (n - 16) // 6 % 6, (n - 16) % 6}) > 1:
                    found.add(f"{p[i]};5;{n}")
                elif n in (1, 2, 3, 4, 5, 6, 9, 10, 11, 12, 13, 14):
                    found.add(f"{p[i]};5;{n}")
                i += 3
            elif p[i] in (38, 48) and i + 4 < len(p) and p[i + 1] == 2:
                if len(set(p[i + 2:i + 5])) > 1:
                    found.add(";".join(map(str, p[i:i + 5])))
                i += 5
            else:
                if 31 <= p[i] <= 36 or 41 <= p[i] <= 46 or 91 <= p[i] <= 96 or 101 <= p[i] <= 106:
                    found.add(str(p[i]))
                i += 1
    return found


@pytest.mark.parametrize("no_color", [True, False], ids=["NO_COLOR", "colour"])
def test_no_color_in_a_real_terminal(tmp_path: Path, tmux: Tmux, no_color: bool) -> None:
    """NO_COLOR: only greys reach the terminal; without it the same screen has colours."""
    db = _store_with_one_run(tmp_path)
    _start(tmux, db, {"NO_COLOR": "1"} if no_color else None)
    tmux.wait_for("the first screen", lambda s: "gpuscope" in s)
    tmux.keys("2")
    tmux.wait_for("the runs screen with the stored run", lambda s: RUN_NAME in s)
    time.sleep(0.5)  # the selected row's highlight
    colours = _chromatic(tmux.screen(escapes=True))
    if no_color:
        assert not colours, colours
    else:
        assert colours, "no colour at all without NO_COLOR: the probe cannot tell"
    tmux.keys("q")
    assert "gpuscope-exit=0" in tmux.wait_for("the app's exit", lambda s: "gpuscope-exit=" in s)
