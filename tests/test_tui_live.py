"""The TUI's live screen: the replayed recording's two GPUs with the values it holds, the lost
tick of gpu1, the host, no GPU on this machine (the vendors' reasons), and the sampler's
threads gone after quit. Values expected come from the recording itself (load_recording)."""
from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from conftest import FIXTURES

pytest.importorskip("textual")

RECORDING = FIXTURES / "recordings" / "synthetic_h100_a100.jsonl"
SAMPLER_THREADS = ("gpuscope-sampler", "gpuscope-sink")


def _screen_text(app) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def _sampler_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name in SAMPLER_THREADS]


async def _wait(pilot, cond, seconds: float = 15.0) -> bool:
    for _ in range(int(seconds / 0.1)):
        if cond():
            return True
        await pilot.pause(0.1)
    return cond()


def _laid_out(screen) -> bool:
    """Every card as tall as its lines: the screen's layout caught up with the cards (a card
    that just took on charts draws its new lines one layout pass before it has their height)."""
    cards = [c for c in screen._cards.values() if c.is_mounted]
    return bool(cards) and all(c.region.height == c.rows_at(c.size.width, screen.plot_rows) for c in cards)


def _recorded(key: str, metric: str) -> set:
    from gpuscope.collectors.replay import load_recording

    rec = load_recording(RECORDING)
    return {r["values"][metric] for tick in rec.ticks for r in tick
            if r["device"] == key and metric in r["values"]}


def _cell_value(card, cell_key: str) -> str:
    """The value a cell shows (its text without the label)."""
    from gpuscope.tui.widgets.live_device import LABEL_WIDTH

    return card.cell_text(cell_key)[LABEL_WIDTH:].strip()


def _app(replay: Path | None, tmp_path: Path):
    from gpuscope.tui.app import GpuscopeApp

    return GpuscopeApp(db=tmp_path / "s.duckdb", replay=replay, interval_s=0.1)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_replayed_gpus_show_recorded_values_lost_tick_and_host(tmp_path: Path, size: tuple[int, int]) -> None:
    from gpuscope.collectors.replay import load_recording
    from gpuscope.tui.widgets.live_device import fmt_against, fmt_metric

    rec = load_recording(RECORDING)
    gpus = [d for d in rec.devices if d.kind != "host"]
    assert len(gpus) == 2

    async def go() -> None:
        app = _app(RECORDING, tmp_path)
        async with app.run_test(size=size) as pilot:
            screen = app.screen
            assert await _wait(pilot, lambda: screen.refreshes >= 5 and all(
                _cell_value(screen._cards[d.key], "power") not in ("", "waiting…") for d in gpus)), screen.failure
            assert await _wait(pilot, lambda: _laid_out(screen))
            text = _screen_text(app)
            for d in gpus:  # both names, on screen (not scrolled away) at 80x24 too
                assert d.name in text, (d.name, text)
            assert "\nhost " in "\n" + "\n".join(line.strip() for line in text.splitlines())
            assert "CPU" in text
            # values shown are values of that GPU in the recording (or "lost" on its lost tick)
            for d in gpus:
                card = screen._cards[d.key]
                for cell, metric in (("util", "gpu_util"), ("temp", "temp_c"), ("smclk", "sm_clock_mhz")):
                    shown = _cell_value(card, cell)
                    allowed = {fmt_metric(metric, v) for v in _recorded(d.key, metric)} | {"lost"}
                    assert shown in allowed, (d.key, cell, shown, allowed)
                power = _cell_value(card, "power")
                limits = _recorded(d.key, "power_limit_w")
                allowed = {fmt_against("power_w", v, "power_limit_w", lim)
                           for v in _recorded(d.key, "power_w") for lim in limits} | {"lost"}
                assert power in allowed, (d.key, power, allowed)
            # the A100 lacks GPM: the reason from the recording's device, not a blank
            a100 = next(d for d in gpus if "sm_active" in d.unsupported)
            assert a100.unsupported["sm_active"] in screen._cards[a100.key].missing_text
            assert a100.unsupported["sm_active"].split()[0] in text
            # the recording loses gpu1 for a tick range: the card says LOST
            lost_key = next(r["device"] for tick in rec.ticks for r in tick if r.get("lost"))
            card = screen._cards[lost_key]
            assert await _wait(pilot, lambda: card.lost), "the lost tick was never shown"
            assert "LOST" in card.title_text and _cell_value(card, "util") == "lost"
            assert "LOST" in _screen_text(app)
            assert _sampler_threads()
        # quit: the sampler's threads are gone
        for _ in range(50):
            if not _sampler_threads():
                break
            await asyncio.sleep(0.1)
        assert not _sampler_threads()

    asyncio.run(go())


def test_no_gpu_shows_the_host_and_the_vendors_reasons(tmp_path: Path) -> None:
    from gpuscope.collectors import discover

    devices, vendors = discover()
    if any(d.kind != "host" for d in devices):
        pytest.skip("this machine has a GPU")
    missing = [v for v in vendors if not v.available and v.vendor in ("nvidia", "amd")]
    assert missing

    async def go() -> None:
        app = _app(None, tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = app.screen
            assert await _wait(pilot, lambda: screen.refreshes >= 3 and "host" in screen._cards), screen.failure
            assert await _wait(pilot, lambda: "%" in _cell_value(screen._cards["host"], "cpu"))
            no_gpu = str(screen.query_one("#no-gpu").render())
            assert "no GPU" in no_gpu
            for v in missing:
                assert f"{v.vendor}: {v.reason}" in no_gpu
            text = _screen_text(app)
            assert "no GPU found" in text and "nvidia:" in text and "CPU" in text
        for _ in range(50):
            if not _sampler_threads():
                break
            await asyncio.sleep(0.1)
        assert not _sampler_threads()

    asyncio.run(go())


def test_history_buckets_average_and_stay_bounded() -> None:
    from gpuscope.tui.widgets.live_history import MetricHistory

    h = MetricHistory(1.0, points=3)
    for i, v in enumerate([1.0, 3.0]):
        h.add(int(i * 0.4e9), v)
    assert h.data == [2.0]
    for s in range(1, 6):
        h.add(s * 10**9, float(s))
    assert h.data == [3.0, 4.0, 5.0]


def test_a_full_history_still_says_when_a_point_is_new() -> None:
    """Sparklines are redrawn when a bucket closes: that signal must not stop once the history
    is full (its length then stays the same)."""
    from gpuscope.tui.widgets.live_history import MetricHistory

    h = MetricHistory(1.0, points=3)
    seen = []
    for s in range(8):
        h.add(s * 10**9, float(s))
        seen.append(h.newest_bucket)
    assert len(h) == 3 and seen == list(range(8))
    h.add(7 * 10**9 + 1, 9.0)  # same bucket: nothing new to draw
    assert h.newest_bucket == 7 and h.data[-1] == 8.0


def test_a_metric_read_on_some_ticks_keeps_its_last_reading_on_the_card() -> None:
    # On the H100 of 2026-11-26 at 10 Hz, GPM values came on 189 of 301 ticks (their windows
    # must exceed 100 ms) and energy once a second: the card showed "- not read this tick" in
    # between. It shows the last reading for gpuscope.metrics.HOLD_S, then says it is missing.
    from gpuscope.collectors.base import DeviceInfo, Sample
    from gpuscope.metrics import HOLD_S
    from gpuscope.tui.widgets.live_device import GPU_CELLS, DeviceCard

    dev = DeviceInfo(key="gpu0", vendor="nvidia", kind="gpu", name="NVIDIA H100 80GB HBM3")
    card = DeviceCard(dev, GPU_CELLS, 1.0)
    key = next(c.key for c in GPU_CELLS if c.metric == "sm_active")
    s0 = Sample("gpu0", 10**9, {"gpu_util": 0.9, "sm_active": 0.5})
    s1 = Sample("gpu0", int(1.1e9), {"gpu_util": 0.9})
    card.show(card.feed([s0, s1]), {})
    assert "50" in card.cell_text(key) and "not read" not in card.cell_text(key)
    late = Sample("gpu0", 10**9 + int((HOLD_S + 0.1) * 1e9), {"gpu_util": 0.9})
    card.show(card.feed([late]), {})
    assert "not read this tick" in card.cell_text(key)
    lost = Sample("gpu0", late.ts_ns + 1, {}, lost=True)
    card.show(card.feed([lost]), {})
    back = Sample("gpu0", lost.ts_ns + 1, {"gpu_util": 0.9})
    card.show(card.feed([back]), {})
    assert "not read this tick" in card.cell_text(key)  # nothing held across a lost device


# --- large history charts when the terminal has room (issue 33) -----------------------------------

RAMP_POINTS = 120  # the history's buckets (live_history.HISTORY_POINTS): 1 s each at --interval 1


def _gpu(i: int, **unsupported: str):
    from gpuscope.collectors.base import DeviceInfo

    return DeviceInfo(key=f"gpu{i}", vendor="nvidia", kind="gpu", name=f"NVIDIA H100 80GB HBM3 #{i}",
                      unsupported=dict(unsupported), properties={"architecture": "Hopper"})


def _ramp_rows(key: str) -> list:
    """A hand-made history: utilization rising 0 -> 100 % over 120 one-second buckets, memory
    flat at half of its 80 GB, power 350 of 700 W, 60 °C, 1980 MHz."""
    from gpuscope.collectors.base import Sample

    return [Sample(key, k * 10**9, {"gpu_util": k / (RAMP_POINTS - 1), "mem_used_bytes": 40e9,
                                    "mem_total_bytes": 80e9, "power_w": 350.0, "power_limit_w": 700.0,
                                    "temp_c": 60.0, "sm_clock_mhz": 1980.0, "mem_clock_mhz": 2619.0})
            for k in range(RAMP_POINTS)]


def _fed_app(tmp_path: Path, n_gpus: int):
    """The app on a live screen whose sampler is replaced by ``n_gpus`` GPUs' hand-made rows
    (:func:`_ramp_rows`) handed to the real cards once; the screen lays them out as it does live
    rows. No host: the screen says so in one line."""
    from gpuscope.sinks.memory import LiveSnapshot
    from gpuscope.tui.app import GpuscopeApp
    from gpuscope.tui.screens.live import LiveScreen

    devices = [_gpu(i, sm_active="needs GPM", tensor_active="needs GPM", dram_bw_util="needs GPM")
               for i in range(n_gpus)]
    snap = LiveSnapshot(tuple(devices), {d.key: tuple(_ramp_rows(d.key)) for d in devices}, RAMP_POINTS,
                        RAMP_POINTS - 1, (), 1.0)

    class Fixed:
        def snapshot(self) -> LiveSnapshot:
            return snap

    class FedLiveScreen(LiveScreen):
        def _start_sampler(self) -> None:  # the worker thread: the rows above instead of a sampler
            with self._lock:
                self._buffer = Fixed()
            self._from_thread(self._started, devices, [])

    import gpuscope.tui.app as app_module

    class FedApp(GpuscopeApp):
        MODES = {**GpuscopeApp.MODES, "live": FedLiveScreen}
        CSS_PATH = str(Path(app_module.__file__).parent / GpuscopeApp.CSS_PATH)  # relative to the subclass else

    return FedApp(db=tmp_path / "s.duckdb", replay=None, interval_s=1.0)


async def _charts_settled(pilot, screen, n_cards: int) -> None:
    """Until the cards show the rows and the screen has fitted its charts to its size."""
    from gpuscope.tui.widgets.live_device import DeviceCard

    def ready() -> bool:
        cards = list(screen.query(DeviceCard))
        return (len(cards) == n_cards and screen.refreshes >= 1
                and all(c.cell_text("util").endswith("100.0%") for c in cards))

    assert await _wait(pilot, ready), "the cards never showed the rows"
    size = None
    for _ in range(50):  # the fit runs after a layout: until it stops changing and is laid out
        await pilot.pause()
        now = (screen.plot_rows, screen.size, tuple(c.region.height for c in screen.query(DeviceCard)))
        if now == size and _laid_out(screen):
            break
        size = now


def _chart_at(app, card, metric: str) -> tuple[list[str], list[str], str, str]:
    """The chart of ``metric`` on ``card`` as drawn on the screen: (its plot rows' text, the
    y labels on its top and bottom rows, its time axis line, its title)."""
    lines = _screen_text(app).splitlines()
    box = next(b for b in card.chart_boxes if b[0] == metric)
    _, x, y, width, rows = box
    x0, y0 = card.region.x + x, card.region.y + y
    title = lines[y0][x0:x0 + width]
    top = lines[y0 + 1][x0:x0 + width]
    axis = top.index("┤")  # the plot starts after the y axis
    plot = [lines[y0 + 1 + r][x0 + axis + 1:x0 + width] for r in range(rows)]
    labels = [lines[y0 + 1][x0:x0 + axis].strip(), lines[y0 + rows][x0:x0 + axis].strip()]
    time_axis = lines[y0 + rows + 1][x0 + axis:x0 + width]
    return plot, labels, time_axis, title


def _eighths(plot: list[str], col: int) -> int:
    """How many eighths of a cell a chart column fills, read from its characters (█ = 8)."""
    bars = " ▁▂▃▄▅▆▇█"
    return sum(bars.index(row[col]) for row in plot)


def test_chart_columns_span_the_whole_window_newest_at_the_right() -> None:
    from gpuscope.tui.widgets.live_chart import eighths, plot_rows, resample

    assert resample([1.0, 2.0, 3.0], 6, 6) == [None, None, None, 1.0, 2.0, 3.0]  # 3 of 6 buckets so far
    assert resample([0.0, 5.0, 1.0, 2.0, 4.0, 3.0], 6, 3) == [5.0, 2.0, 4.0]  # two buckets a column: their max
    assert resample([5.0], 2, 4) == [None, None, 5.0, 5.0]  # a bucket over two columns
    assert eighths(0.5, 0.0, 1.0, 2) == 8 and eighths(1.0, 0.0, 1.0, 2) == 16 and eighths(2.0, 0.0, 1.0, 2) == 16
    assert eighths(float("nan"), 0.0, 1.0, 2) == 0 and eighths(-1.0, 0.0, 1.0, 2) == 0
    # 3/16 of two rows: the bottom row 3/8 full (▃), the top empty
    assert plot_rows([None, 3 / 16, 1.0], 0.0, 1.0, 2) == ["  █", " ▃█"]


def test_a_ramp_fills_the_chart_from_the_bottom_row_to_the_top(tmp_path: Path) -> None:
    """One GPU on a large terminal: utilization from 0 to 100 % over the two minutes draws a
    chart whose columns rise from empty to every row full, each at its stretch's value."""
    async def go() -> None:
        app = _fed_app(tmp_path, 1)
        async with app.run_test(size=(160, 48)) as pilot:
            screen = app.screen
            await _charts_settled(pilot, screen, 1)
            card = screen._cards["gpu0"]
            rows = screen.plot_rows
            assert rows >= 10, rows  # one GPU at 160x48: a tall chart
            plot, labels, axis, title = _chart_at(app, card, "gpu_util")
            assert title.startswith("util") and "100.0%" in title
            assert labels == ["100%", "0%"]
            assert axis.startswith("└-2m") and axis.rstrip().endswith("now") and "-1m" in axis
            width = len(plot[0])
            assert width >= 30 and all(len(r) == width for r in plot)
            # a column covers buckets [c*120//W, (c+1)*120//W): the ramp's largest value there is
            # its last bucket's, (b - 1) / 119 of the way up, drawn in eighths of `rows` rows
            for c in range(width):
                b = (c + 1) * RAMP_POINTS // width
                want = round((b - 1) / (RAMP_POINTS - 1) * 8 * rows)
                assert _eighths(plot, c) == want, (c, _eighths(plot, c), want)
            assert plot[0][-1] == "█" and plot[-1][-1] == "█"  # 100 %: every row of the newest column
            assert _eighths(plot, 0) < 8 and plot[-2][0] == " "  # the oldest: within the bottom row
            assert [_eighths(plot, c) for c in range(width)] == sorted(_eighths(plot, c) for c in range(width))
            # memory at half of its 80 GB total, the axis spanning 0 to the total
            mem, mem_labels, _, _ = _chart_at(app, card, "mem_used_bytes")
            assert mem_labels == ["80.0 GB", "0"]
            assert {_eighths(mem, c) for c in range(len(mem[0]))} == {4 * rows}
            # power 350 of the 700 W limit; temperature 60 °C on an axis to 60 °C (its maximum)
            power, power_labels, _, _ = _chart_at(app, card, "power_w")
            assert power_labels == ["700 W", "0"] and _eighths(power, 0) == 4 * rows
            temp, temp_labels, _, _ = _chart_at(app, card, "temp_c")
            assert temp_labels == ["60 °C", "0"] and _eighths(temp, 0) == 8 * rows

    asyncio.run(go())


def test_charts_grow_with_the_terminal_and_give_way_at_80x24_and_with_8_gpus(tmp_path: Path) -> None:
    """Two GPUs: no charts at 80x24 (the one-line sparklines, as before), taller and wider ones
    at 120x40, 160x48, 200x60, back to none when the terminal shrinks again; every card fits
    without scrolling whenever charts are drawn. Eight GPUs at 160x48 keep the sparklines."""
    from textual.containers import VerticalScroll

    from gpuscope.tui.widgets.live_device import DeviceCard

    async def go() -> None:
        app = _fed_app(tmp_path, 2)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = app.screen
            await _charts_settled(pilot, screen, 2)
            assert screen.plot_rows == 0
            assert all(not c.chart_boxes for c in screen._cards.values())
            assert "┤" not in _screen_text(app) and "▁" in _screen_text(app)  # sparklines
            seen = []
            for size in [(120, 40), (160, 48), (200, 60), (80, 24), (160, 48)]:
                await pilot.resize_terminal(*size)
                await _charts_settled(pilot, screen, 2)
                card = screen._cards["gpu1"]
                if size == (80, 24):
                    assert screen.plot_rows == 0 and not card.chart_boxes, size
                    continue
                box = screen.query_one("#live-devices", VerticalScroll)
                assert box.max_scroll_y == 0, size  # everything on one screen
                plot, labels, axis, _ = _chart_at(app, card, "gpu_util")
                assert labels == ["100%", "0%"] and len(plot) == screen.plot_rows
                heights = [c.region.height for c in screen.query(DeviceCard)]
                seen.append((size, screen.plot_rows, len(plot[0]), sum(heights), box.size.height))
            (_, r120, w120, _, _), (_, r160, w160, used160, room160), (_, r200, w200, _, _), again = seen
            assert 3 <= r120 < r160 < r200, seen
            assert w160 < w200, seen  # four charts a row at both: wider ones at 200 columns
            assert r120 * w120 < r160 * w160 < r200 * w200, seen  # 120: two by two, wide and low
            assert room160 - used160 < r160 + 2, seen  # filled: one more chart row would not fit
            assert again[1:] == seen[1][1:], seen  # back at 160x48: the same charts again

    asyncio.run(go())

    async def eight() -> None:
        app = _fed_app(tmp_path, 8)
        async with app.run_test(size=(160, 48)) as pilot:
            screen = app.screen
            await _charts_settled(pilot, screen, 8)
            assert screen.plot_rows == 0
            assert all(not c.chart_boxes for c in screen._cards.values())
            assert "▁" in _screen_text(app)

    asyncio.run(eight())
