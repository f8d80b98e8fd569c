"""Live telemetry (work in progress: issue 16)."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer, Header, Static


class LiveScreen(Screen[None]):
    """Live telemetry."""

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("Live telemetry", classes="status")
        yield Footer()
