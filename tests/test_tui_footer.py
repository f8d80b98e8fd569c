"""The footer on every screen (issue 33): ``q quit`` and ``? help`` always on it at 80x24 (the run
screen's keys ran past the edge and cut ``q quit`` off), no entry cut at the edge, and Tab with
Shift+Tab on it where there is room, both or neither, as the width changes; the Shift+Tab shown
moves the focus back. Read from what the footer draws (Textual's Pilot). One app for all of it:
each screen's first mount costs more than a second."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from conftest import FIXTURES

pytest.importorskip("textual")

RECORDING = FIXTURES / "recordings" / "synthetic_h100_a100.jsonl"
SCREENS = ("live", "runs", "run", "compare")
#: how the help overlay names the keys the footer shows by their glyph or short name
HELP_NAMES = {"⏎": "Enter", "esc": "Esc", "tab": "Tab", "shift+tab": "Shift+Tab"}


def _app(tmp_path: Path):
    from gpuscope.tui.app import GpuscopeApp

    return GpuscopeApp(db=tmp_path / "s.duckdb", replay=RECORDING, interval_s=0.5)


def _footer(app) -> tuple[str, list[tuple[str, int]]]:
    """The footer's line as drawn, and its keys' (text, right edge) (the palette's key too)."""
    from textual.widgets import Footer
    from textual.widgets._footer import FooterKey

    footer = app.screen.query_one(Footer)
    lines = [strip.text for strip in app.screen._compositor.render_strips()]
    keys = [(str(k.render()).strip(), k.region.right) for k in footer.query(FooterKey) if k.display]
    return lines[footer.region.y], keys


async def _footer_settled(pilot) -> tuple[str, list[tuple[str, int]]]:
    """Until the footer stops changing (it recomposes after a resize or a screen switch)."""
    seen = None
    for _ in range(50):
        await pilot.pause()
        now = _footer(pilot.app)
        if now == seen:
            return now
        seen = now
    return seen


def test_quit_and_help_on_every_screen_at_80x24_tab_and_shift_tab_where_there_is_room(tmp_path: Path) -> None:
    from textual.widgets import Input

    from gpuscope.tui.screens.help import KEYS

    help_keys = " ".join(k for k, _ in KEYS).split()

    async def go() -> None:
        app = _app(tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            for mode in SCREENS:
                app.switch_mode(mode)
                line, keys = await _footer_settled(pilot)
                texts = [t for t, _ in keys]
                assert "q quit" in line and "? help" in line, (mode, line)
                assert "q quit" in texts and "? help" in texts, (mode, texts)
                # every entry drawn whole, inside the 80 columns
                assert all(right <= 80 for _, right in keys), (mode, keys)
                # no room for Tab and Shift+Tab at 80 columns: neither (never one without the other)
                assert ("tab screens" in texts) == ("shift+tab focus back" in texts), (mode, texts)
            await pilot.resize_terminal(160, 48)
            for mode in SCREENS:
                app.switch_mode(mode)
                line, keys = await _footer_settled(pilot)
                texts = [t for t, _ in keys]
                for entry in ("tab screens", "shift+tab focus back", "? help", "q quit"):
                    assert entry in texts and entry in line, (mode, entry, line)
                # the app's keys after the screen's, quit last
                assert [t for t in texts if not t.startswith("^p")][-1] == "q quit", (mode, texts)
                # every key on the footer is on the help overlay too, as the help names it
                for t in texts:
                    key = t.split(" ")[0]
                    if key != "^p":  # Textual's palette, not ours
                        assert HELP_NAMES.get(key, key) in help_keys, (mode, key, help_keys)
            # the screen with the most keys (app.current_mode is "compare" now; then "run"), narrowed
            # and widened again: the footer follows the width
            app.switch_mode("run")
            await pilot.resize_terminal(80, 24)
            line, keys = await _footer_settled(pilot)
            texts = [t for t, _ in keys]
            assert "q quit" in line and "shift+tab focus back" not in texts and "tab screens" not in texts, line
            assert all(right <= 80 for _, right in keys), keys
            for section in ("o ops", "k kernels", "r roof", "n comm", "t telem", "a advice"):
                assert section in texts, (section, texts)  # its other keys gave way first
            # narrower still: the six section keys as one entry, quit still there
            await pilot.resize_terminal(60, 24)
            line, keys = await _footer_settled(pilot)
            assert "o k r n t a section" in line and "q quit" in line, line
            assert all(right <= 60 for _, right in keys), keys
            await pilot.resize_terminal(160, 48)
            line, keys = await _footer_settled(pilot)
            assert "shift+tab focus back" in line and "tab screens" in line and "q quit" in line, line
            # the Shift+Tab shown is Textual's focus-previous: on the runs screen with the filter
            # open (two focusable widgets) it moves the focus to the one before, and stays there
            app.switch_mode("runs")
            await _footer_settled(pilot)
            await pilot.press("slash")
            await pilot.pause()
            chain = app.screen.focus_chain
            start = app.focused
            assert isinstance(start, Input) and len(chain) >= 2, (start, chain)
            await pilot.press("shift+tab")
            await pilot.pause()
            assert app.focused is chain[(chain.index(start) - 1) % len(chain)] and app.focused is not start
            assert app.current_mode == "runs"  # Tab switches screens; Shift+Tab does not

    asyncio.run(go())
