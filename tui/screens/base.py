"""What every screen of the gpuscope app shares: ``app`` typed as :class:`~gpuscope.tui.app.GpuscopeApp`,
so that a screen reads the store path, the interval and the marked runs as attributes a checker
knows, instead of ``getattr(self.app, ...)`` with a default that hides a misspelt name.

Workers (threads) hand their results to the screen as typed :class:`~textual.message.Message`\\ s
(``post_message`` is safe from any thread), the way harlequin's workers post
``DatabaseConnected(connection=...)``: each screen module defines the messages its workers send.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from textual import on
from textual.events import Resize
from textual.screen import Screen

if TYPE_CHECKING:  # pragma: no cover
    from textual import getters
    from textual.binding import ActiveBinding

    from ..app import GpuscopeApp


class GpuscopeScreen(Screen[None]):
    """A screen of :class:`~gpuscope.tui.app.GpuscopeApp`."""

    if TYPE_CHECKING:
        # Textual's own way to type ``app`` (textual.getters.app, as MessagePump does for App):
        # for the checker only, because at run time this module is imported by tui/app.py before
        # GpuscopeApp exists; the running ``app`` is Textual's property, unchanged.
        app = getters.app(GpuscopeApp)

    @property
    def active_bindings(self) -> dict[str, ActiveBinding]:
        """Textual's, fitted to the footer's width: ``q quit`` and ``? help`` always on it
        (tui/footer.py)."""
        from ..footer import fit_footer, shown_keys

        fitted = fit_footer(self, super().active_bindings)
        self._footer_keys = shown_keys(fitted)
        return fitted

    @on(Resize)
    def _fit_footer_on_resize(self) -> None:
        # the footer draws the bindings again (Textual's Footer recomposes on this signal) when
        # the new width shows other keys; only then: a recompose while a screen focuses and
        # scrolls to a table (the run screen's first read) could leave it scrolled. The screens'
        # own on_resize handlers run as well (a handler of its own name, not an override of theirs).
        from ..footer import shown_keys

        before = getattr(self, "_footer_keys", None)
        if before is not None and shown_keys(self.active_bindings) != before:
            self.refresh_bindings()
