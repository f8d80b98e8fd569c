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
