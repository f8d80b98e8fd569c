"""Stored runs (work in progress: issue 16)."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer, Header, Static


class RunsScreen(Screen[None]):
    """Stored runs."""

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("Stored runs", classes="status")
        yield Footer()
