"""Two runs compared (work in progress: issue 16)."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer, Header, Static


class CompareScreen(Screen[None]):
    """Two runs compared."""

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("Two runs compared", classes="status")
        yield Footer()

    def show_pair(self, run_a: int, run_b: int) -> None:
        """Compare ``run_a`` (baseline) with ``run_b``."""
