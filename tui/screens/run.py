"""One run (work in progress: issue 16)."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer, Header, Static


class RunScreen(Screen[None]):
    """One run."""

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("One run", classes="status")
        yield Footer()

    def show_run(self, run_id: int) -> None:
        """Show ``run_id``."""
