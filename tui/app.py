"""The gpuscope terminal UI: four screens over one store and the live telemetry.

Screens are Textual *modes* (each its own stack): ``live`` (1), ``runs`` (2), ``run`` (3),
``compare`` (4). The app holds what the screens share: the store path, the replay file and
refresh interval, the run opened on the run screen and the runs marked for compare. Every
screen reads through ``tui/data.py`` in workers, never on the UI thread.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.app import App
from textual.binding import Binding

from .screens.compare import CompareScreen
from .screens.help import HelpScreen
from .screens.live import LiveScreen
from .screens.run import RunScreen
from .screens.runs import RunsScreen
from .text import safe_text

SCREEN_ORDER = ("live", "runs", "run", "compare")


class GpuscopeApp(App[None]):
    """``gpuscope tui``."""

    TITLE = "gpuscope"
    CSS_PATH = "gpuscope.tcss"
    MODES = {"live": LiveScreen, "runs": RunsScreen, "run": RunScreen, "compare": CompareScreen}
    DEFAULT_MODE = "live"
    # on the footer: the screen's keys, then these; at narrow widths tab and shift+tab give way
    # first, ? and q never (tui/footer.py)
    BINDINGS = [
        Binding("tab", "next_screen", "screens", priority=True),
        # Textual's own (focus the previous widget), shown: priority so that it, not the screen's
        # hidden binding of the same key, is the one the footer lists
        Binding("shift+tab", "focus_previous", "focus back", priority=True),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("q", "quit", "quit"),
        Binding("1", "switch_mode('live')", "live", show=False),
        Binding("2", "switch_mode('runs')", "runs", show=False),
        Binding("3", "switch_mode('run')", "run", show=False),
        Binding("4", "switch_mode('compare')", "compare", show=False),
    ]

    def __init__(self, db: Path, replay: Path | None = None, interval_s: float = 1.0) -> None:
        super().__init__()
        self.db = Path(db)
        self.replay = replay
        self.interval_s = interval_s
        #: the run the run screen shows (None: the newest)
        self.run_id: int | None = None
        #: runs marked for compare with `c` on the runs screen, oldest mark first (at most two)
        self.compare_ids: list[int] = []
        # NO_COLOR (https://no-color.org): Textual sets self.no_color when the variable is
        # present, even empty, and greys the output; the screens read the same flag for glyphs

    def notify(self, message: str, *, title: str = "", **kwargs: Any) -> None:
        """Textual's notification, with the control characters of the names and file names a
        message quotes shown as escapes (tui/text.py)."""
        super().notify(safe_text(message, layout=True), title=safe_text(title), **kwargs)

    def action_next_screen(self) -> None:
        current = self.current_mode if self.current_mode in SCREEN_ORDER else SCREEN_ORDER[0]
        self.switch_mode(SCREEN_ORDER[(SCREEN_ORDER.index(current) + 1) % len(SCREEN_ORDER)])

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def open_run(self, run_id: int) -> None:
        """Show ``run_id`` on the run screen."""
        self.run_id = run_id
        self.switch_mode("run")
        screen = self.screen
        if isinstance(screen, RunScreen):
            screen.show_run(run_id)

    def mark_for_compare(self, run_id: int) -> list[int]:
        """Mark (or unmark) a run for compare; with two marked the compare screen opens."""
        if run_id in self.compare_ids:
            self.compare_ids.remove(run_id)
        else:
            self.compare_ids = (self.compare_ids + [run_id])[-2:]
        if len(self.compare_ids) == 2:
            self.switch_mode("compare")
            screen = self.screen
            if isinstance(screen, CompareScreen):
                screen.show_pair(*self.compare_ids)
        return list(self.compare_ids)
