"""What every screen of the gpuscope app shares: ``app`` typed as :class:`~gpuscope.tui.app.GpuscopeApp`,
so that a screen reads the store path, the interval and the marked runs as attributes a checker
knows, instead of ``getattr(self.app, ...)`` with a default that hides a misspelt name.

Workers (threads) hand their results to the screen as typed :class:`~textual.message.Message`\\ s
(``post_message`` is safe from any thread), the way harlequin's workers post
``DatabaseConnected(connection=...)``: each screen module defines the messages its workers send.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from textual.screen import Screen

if TYPE_CHECKING:  # pragma: no cover
    from textual import getters

    from ..app import GpuscopeApp


class GpuscopeScreen(Screen[None]):
    """A screen of :class:`~gpuscope.tui.app.GpuscopeApp`."""

    if TYPE_CHECKING:
        # Textual's own way to type ``app`` (textual.getters.app, as MessagePump does for App):
        # for the checker only, because at run time this module is imported by tui/app.py before
        # GpuscopeApp exists; the running ``app`` is Textual's property, unchanged.
        app = getters.app(GpuscopeApp)
