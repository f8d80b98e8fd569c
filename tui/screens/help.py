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
    ("Shift+Tab", "move the focus back (a table, the run's body)"),
    ("Enter", "open the selected run (runs screen)"),
    ("Esc", "back (from a run or compare to the runs; closes this help)"),
    ("c", "mark the selected run for compare (two marked: compare opens)"),
    ("/", "filter the runs by typing"),
    ("s", "cycle the sort column"),
    ("o k r n t a", "run screen: go to the ops, kernels, roofline, communication, telemetry, advice"),
    ("← →", "compare screen: the previous, next tab"),
    ("p", "open a profiler window now in the run shown, when it is recording (live: the newest such run)"),
)


class HelpScreen(ModalScreen[None]):
    """Every key, on top of the current screen."""

    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "close")]

    # a framed box on an opaque background: without them the keys ran into the screen beneath,
    # which showed through
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen #help {
        width: auto; height: auto; max-width: 100%; max-height: 100%;
        border: round $accent; background: $panel; padding: 0 1;
    }
    """

    def compose(self) -> ComposeResult:
        width = max(len(k) for k, _ in KEYS)
        lines = ["gpuscope tui — keys (the mouse works too)", ""]
        lines += [f"  {k:<{width}}  {what}" for k, what in KEYS]
        yield Static("\n".join(lines), id="help")
