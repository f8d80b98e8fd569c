"""The help screen: every key of every screen."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = (
    ("?", "this help"),
    ("q", "quit"),
    ("1 2 3 4", "live, runs, run, compare"),
    ("Tab", "next screen"),
    ("Enter", "open the selected run (runs screen)"),
    ("Esc", "back (from a run or compare to the runs; closes this help)"),
    ("c", "mark the selected run for compare (two marked: compare opens)"),
    ("/", "filter the runs by typing"),
    ("s", "cycle the sort column"),
    ("p", "open a profiler window now in the run shown, when it is recording (live: the newest such run)"),
)


class HelpScreen(ModalScreen[None]):
    """Every key, on top of the current screen."""

    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "close")]

    def compose(self) -> ComposeResult:
        width = max(len(k) for k, _ in KEYS)
        lines = ["gpuscope tui — keys (the mouse works too)", ""]
        lines += [f"  {k:<{width}}  {what}" for k, what in KEYS]
        yield Static("\n".join(lines), id="help")
