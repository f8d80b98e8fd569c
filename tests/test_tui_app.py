"""`gpuscope tui`: the command (arguments checked before the UI starts, Textual loaded only by
this command) and the app's frame (screens by 1-4 and Tab, help with every key, Esc, q)."""
from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, REPO, run_cli

PY = sys.executable
RECORDING = FIXTURES / "recordings" / "synthetic_h100_a100.jsonl"


@pytest.fixture
def no_ui(monkeypatch: pytest.MonkeyPatch) -> None:
    """Starting the UI fails the test: the errors below must come before it."""
    from gpuscope.tui.app import GpuscopeApp

    def started(self: GpuscopeApp, *a: object, **k: object) -> None:
        raise AssertionError("the UI started")

    monkeypatch.setattr(GpuscopeApp, "run", started)


def _one_line_error(r) -> str:
    assert r.code == 2, (r.code, r.out, r.err)
    assert r.out == ""
    assert "Traceback" not in r.err
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    assert lines[0].startswith("gpuscope tui: ")
    return lines[0]


@pytest.mark.parametrize("content", ["not json at all\n", "", '{"format": "something else/9"}\n'])
def test_bad_replay_file_is_exit_2_and_one_line_before_the_ui(tmp_path: Path, no_ui: None, content: str) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    line = _one_line_error(run_cli("tui", "--db", str(tmp_path / "s.duckdb"), "--replay", str(bad)))
    assert str(bad) in line


def test_missing_replay_file_is_exit_2_and_one_line(tmp_path: Path, no_ui: None) -> None:
    missing = tmp_path / "nope.jsonl"
    line = _one_line_error(run_cli("tui", "--db", str(tmp_path / "s.duckdb"), "--replay", str(missing)))
    assert str(missing) in line


@pytest.mark.parametrize("value", ["0.01", "nan", "-1", "inf", "0"])
def test_bad_interval_is_exit_2_and_one_line(tmp_path: Path, no_ui: None, value: str) -> None:
    line = _one_line_error(run_cli("tui", "--db", str(tmp_path / "s.duckdb"), "--interval", value))
    assert "--interval" in line and "0.1" in line


def test_good_arguments_reach_the_ui(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other side of the tests above: with good arguments the app is built and run, with them."""
    from gpuscope.tui.app import GpuscopeApp

    seen: list[GpuscopeApp] = []
    monkeypatch.setattr(GpuscopeApp, "run", lambda self, *a, **k: seen.append(self))
    r = run_cli("tui", "--db", str(tmp_path / "s.duckdb"), "--replay", str(RECORDING), "--interval", "0.1")
    assert r.code == 0, r.err
    assert len(seen) == 1
    app = seen[0]
    assert app.db == tmp_path / "s.duckdb" and app.replay == RECORDING and app.interval_s == 0.1


def _child_python(code: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=REPO)


def test_gpuscope_help_does_not_load_textual() -> None:
    p = _child_python(
        "import sys\n"
        "from gpuscope.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('TEXTUAL', 'textual' in sys.modules, 'gpuscope.tui' in sys.modules)\n")
    assert p.returncode == 0, p.stderr
    assert "TEXTUAL False False" in p.stdout, p.stdout


def test_gpuscope_run_and_its_child_do_not_load_textual(tmp_path: Path) -> None:
    """The wrapper (in this child python) and the command it wraps (its own child) both."""
    child = [PY, "-c", "import sys; print('CHILD', 'textual' in sys.modules)"]
    code = (
        "import sys\n"
        "from gpuscope.cli import main\n"
        f"rc = main(['run', '--db', {str(tmp_path / 's.duckdb')!r}, '--no-analyze', '-q', '--replay', "
        f"{str(RECORDING)!r}, '--', *{child!r}])\n"
        "print('WRAPPER', 'textual' in sys.modules, rc)\n")
    p = _child_python(code)
    assert p.returncode == 0, p.stderr
    assert "CHILD False" in p.stdout, (p.stdout, p.stderr)
    assert "WRAPPER False 0" in p.stdout, (p.stdout, p.stderr)


def test_the_tui_command_does_load_textual(tmp_path: Path) -> None:
    """So the two tests above can fail: the same probe sees Textual once `tui` runs."""
    code = (
        "import sys\n"
        "from gpuscope.tui.app import GpuscopeApp\n"
        "GpuscopeApp.run = lambda self, *a, **k: None\n"
        "from gpuscope.cli import main\n"
        f"rc = main(['tui', '--db', {str(tmp_path / 's.duckdb')!r}])\n"
        "print('TEXTUAL', 'textual' in sys.modules, rc)\n")
    p = _child_python(code)
    assert p.returncode == 0, p.stderr
    assert "TEXTUAL True 0" in p.stdout, p.stdout


# --- the app's frame, with Textual's Pilot ---------------------------------------------------------


def _app(tmp_path: Path):
    from gpuscope.tui.app import GpuscopeApp

    return GpuscopeApp(db=tmp_path / "s.duckdb", replay=RECORDING, interval_s=0.5)


def test_number_keys_and_tab_switch_screens(tmp_path: Path) -> None:
    asyncio.run(_test_number_keys_and_tab_switch_screens(tmp_path))


async def _test_number_keys_and_tab_switch_screens(tmp_path: Path) -> None:
    from gpuscope.tui.app import SCREEN_ORDER
    from gpuscope.tui.screens.compare import CompareScreen
    from gpuscope.tui.screens.live import LiveScreen
    from gpuscope.tui.screens.run import RunScreen
    from gpuscope.tui.screens.runs import RunsScreen

    kinds = {"live": LiveScreen, "runs": RunsScreen, "run": RunScreen, "compare": CompareScreen}
    app = _app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.current_mode == "live" and isinstance(app.screen, LiveScreen)
        for key, mode in (("2", "runs"), ("4", "compare"), ("3", "run"), ("1", "live")):
            await pilot.press(key)
            await pilot.pause()
            assert app.current_mode == mode, (key, app.current_mode)
            assert isinstance(app.screen, kinds[mode])
        seen = []
        for _ in SCREEN_ORDER:
            await pilot.press("tab")
            await pilot.pause()
            seen.append(app.current_mode)
        assert seen == ["runs", "run", "compare", "live"]


def test_help_lists_every_key_esc_closes_it_q_quits(tmp_path: Path) -> None:
    asyncio.run(_test_help_lists_every_key_esc_closes_it_q_quits(tmp_path))


async def _test_help_lists_every_key_esc_closes_it_q_quits(tmp_path: Path) -> None:
    from textual.widgets import Static

    from gpuscope.tui.screens.help import KEYS, HelpScreen

    app = _app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("2")
        await pilot.pause()
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = str(app.screen.query_one("#help", Static).render())
        for key, what in KEYS:
            assert key in text and what in text, (key, what)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)
        assert app.current_mode == "runs"
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0
    assert not app.is_running


def test_help_keys_cover_every_binding_of_the_app(tmp_path: Path) -> None:
    asyncio.run(_test_help_keys_cover_every_binding_of_the_app(tmp_path))


async def _test_help_keys_cover_every_binding_of_the_app(tmp_path: Path) -> None:
    """Every key the app and its screens bind is on the help screen (the help "lists every key")."""
    from gpuscope.tui.screens.help import KEYS

    shown = " ".join(k for k, _ in KEYS).lower()
    names = {"question_mark": "?", "escape": "esc", "enter": "enter", "tab": "tab", "slash": "/"}
    app = _app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        missing = []
        for mode in ("live", "runs", "run", "compare"):
            app.switch_mode(mode)
            await pilot.pause()
            ours = [c for c in (*type(app).__mro__, *type(app.screen).__mro__)
                    if c.__module__.startswith("gpuscope.tui") and "BINDINGS" in vars(c)]
            for binding in [b for c in ours for b in vars(c)["BINDINGS"]]:
                keys = binding.key if hasattr(binding, "key") else binding[0]
                for key in keys.split(","):
                    key = key.strip()
                    if key.startswith(("ctrl+", "shift+", "up", "down", "left", "right", "page", "home", "end")):
                        continue  # navigation that every Textual table has
                    if names.get(key, key).lower() not in shown:
                        missing.append(f"{mode}: {key}")
        assert not missing, missing


def test_help_has_a_border_and_an_opaque_background(tmp_path: Path) -> None:
    """Issue 33: the help overlay is a framed box the screen beneath does not show through."""
    async def go() -> None:
        from textual.widgets import Static

        from gpuscope.tui.screens.help import HelpScreen

        app = _app(tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            await pilot.press("question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            box = app.screen.query_one("#help", Static)
            assert all(edge[0] not in ("", "none", "hidden") for edge in (
                box.styles.border_top, box.styles.border_right, box.styles.border_bottom, box.styles.border_left))
            assert box.styles.background.a == 1.0  # opaque

    asyncio.run(go())
