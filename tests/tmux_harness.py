"""`gpuscope tui` in a real terminal: a private tmux server, its screen, its keys (shared by
tests/test_tui_terminal.py, tests/test_concurrency.py and bench/bench_concurrency.py)."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class Tmux:
    """One private tmux server (its own socket), so nothing else's sessions are touched."""

    def __init__(self) -> None:
        self.socket = f"gpuscope-test-{uuid.uuid4().hex[:8]}"
        self.session = "tui"

    def __call__(self, *args: str) -> str:
        # the server (started by the first command) copies this environment into its sessions:
        # without NO_COLOR or an outer tmux's variables, so each test says what it wants
        env = {k: v for k, v in os.environ.items() if k != "NO_COLOR" and not k.startswith("TMUX")}
        p = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30, env=env)
        assert p.returncode == 0, (args, p.stderr)
        return p.stdout

    def screen(self, escapes: bool = False) -> str:
        return self("capture-pane", "-p", *(["-e"] if escapes else []), "-t", self.session)

    def keys(self, *keys: str) -> None:
        self("send-keys", "-t", self.session, *keys)

    def wait_for(self, what: str, check: Callable[[str], bool], timeout_s: float = 30) -> str:
        deadline = time.monotonic() + timeout_s
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if check(text):
                return text
            time.sleep(0.2)
        raise AssertionError(f"{what}: not on the screen within {timeout_s:g} s; the screen:\n{text}")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30)


def start_tui(tmux: Tmux, db: Path, *args: str, width: int = 100, height: int = 30,
              extra_env: dict[str, str] | None = None) -> None:
    """``gpuscope tui --db DB ARGS`` in a new session; the line after it says how it ended."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV")}
    env.update(extra_env or {}, TERM="xterm-256color")
    cmd = shlex.join([sys.executable, "-m", "gpuscope", "tui", "--db", str(db), *args])
    # the shell line after the app says how it ended, and keeps the pane open to read it
    script = f"cd {shlex.quote(str(REPO))} && {cmd}; echo gpuscope-exit=$?; sleep 120"
    tmux("new-session", "-d", "-s", tmux.session, "-x", str(width), "-y", str(height),
         *[a for k, v in env.items() for a in ("-e", f"{k}={v}")], script)
