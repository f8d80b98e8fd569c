"""Snapshots (pytest-textual-snapshot) of the TUI's screens at 80x24 and 160x48.

The store is built from small synthetic traces with fixed base times, and times are shown in
UTC (TZ), so every screen drawn from it is the same on every machine. Update after a deliberate
change with ``python -m pytest tests/test_tui_snapshots.py --snapshot-update`` and look at the
SVGs (tests/__snapshots__/test_tui_snapshots/) before committing them.

The live screen normally shows this machine's own CPU and memory and the replayed GPUs at
whatever tick the loop has reached, so its snapshot holds the screen still: the screen's
sampler start is replaced by the synthetic recording's first 23 ticks (its own host included,
gpu1 lost at tick 20) handed to the real cards, which draw them exactly as they draw live rows.
tests/test_tui_live.py checks the live screen with the sampler running.
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import cpu_op, kernel, run_cli, runtime, write_trace

SIZES = {"80x24": (80, 24), "160x48": (160, 48)}
BASE_NS = 1_767_225_600_000_000_000  # 2026-01-01 00:00:00 UTC
PROPS = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85520809984, "computeMajor": 9,
          "computeMinor": 0, "numSms": 132}]
BF16 = "c10::BFloat16"


def _events(scale: float, with_attention: bool) -> list[dict[str, Any]]:
    """One training-like step: GEMMs of a few shapes, elementwise work, a copy, an all-reduce."""
    ev: list[dict[str, Any]] = []
    ts, ext, corr = 0.0, 1, 1
    plan = [("aten::mm", [[4096, 4096], [4096, 4096]], "sm90_xmma_gemm_bf16bf16_bf16f32", 900.0),
            ("aten::addmm", [[4096], [4096, 1024], [1024, 4096]], "sm90_xmma_gemm_bf16bf16_bf16f32_nt", 300.0),
            ("aten::add", [[4096, 4096], [4096, 4096]], "vectorized_elementwise_kernel", 120.0),
            ("aten::gelu", [[4096, 4096]], "GeluCUDAKernelImpl", 90.0),
            ("aten::copy_", [[4096, 4096], [4096, 4096]], "Memcpy DtoD (Device -> Device)", 60.0)]
    if with_attention:
        plan.append(("aten::_scaled_dot_product_flash_attention", [[8, 32, 2048, 128]] * 3,
                     "flash_fwd_kernel", 700.0))
    for step in range(3):
        for n, (name, dims, kname, dur) in enumerate(plan):
            # every op changes by its own amount between the two runs (no ties in the compare)
            d = dur * scale if "gemm" in kname else dur + 13.0 * (n + 1) * (1.0 - scale)
            ev.append(cpu_op(name, ts, 20.0, ext=ext, dims=dims, types=[BF16] * len(dims)))
            ev.append(runtime("cudaLaunchKernel", ts + 5, 8.0, corr=corr, ext=ext))
            ev.append(kernel(kname, ts + 30, d, corr=corr))
            ts += d + 40.0
            ext += 1
            corr += 1
        ev.append(kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", ts, 400.0, corr=corr))
        corr += 1
        ts += 600.0 + 200.0 * step  # some idle time between steps
    return ev


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tui_snap")
    db = d / "store.duckdb"
    for name, scale, attn, base in (("baseline", 1.0, False, BASE_NS), ("candidate", 0.6, True, BASE_NS + 3_600 * 10**9)):
        trace = write_trace(d / f"{name}.json", _events(scale, attn), deviceProperties=PROPS, baseTimeNanoseconds=base)
        r = run_cli("ingest", "--db", str(db), "--name", name, "-q", str(trace))
        assert r.code == 0, r.err
    return db


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    """Times on screen in UTC, whatever this machine's zone; colours on (NO_COLOR unset)."""
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.delenv("NO_COLOR", raising=False)
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _app(db: Path, mode: str, screens: dict[str, Any] | None = None, **attrs: Any) -> Any:
    """The app opening on ``mode`` (so the live screen, with this machine's host, never starts);
    ``screens`` replaces some of its modes' screens (App.__init__ reads MODES: a class attribute)."""
    from gpuscope.tui.app import GpuscopeApp

    import gpuscope.tui.app as app_module

    css = Path(app_module.__file__).parent / GpuscopeApp.CSS_PATH  # the subclass lives elsewhere
    cls = type("SnapshotApp", (GpuscopeApp,), {"DEFAULT_MODE": mode, "CSS_PATH": str(css),
                                               "MODES": {**GpuscopeApp.MODES, **(screens or {})}})
    app = cls(db=db, replay=None, interval_s=60.0)
    for k, v in attrs.items():
        setattr(app, k, v)
    return app


async def _settled(pilot: Any) -> None:
    """Until the screen's workers are done (its reads) and it has drawn what they brought."""
    from textual.worker import WorkerState

    app = pilot.app
    deadline = time.monotonic() + 60
    quiet = 0
    while quiet < 3 and time.monotonic() < deadline:
        await pilot.pause()
        busy = [w for w in app.workers if w.state in (WorkerState.PENDING, WorkerState.RUNNING)]
        quiet = 0 if busy else quiet + 1
        if busy:
            await asyncio.sleep(0.02)
    assert quiet >= 3, "the screen's workers did not finish"
    await pilot.pause()


def _ids(db: Path) -> dict[str, int]:
    from gpuscope.tui import data

    return {r["name"]: r["id"] for r in data.runs(db)}


@pytest.mark.parametrize("size", SIZES)
def test_runs_screen(snap_compare: Any, store: Path, size: str) -> None:
    assert snap_compare(_app(store, "runs"), terminal_size=SIZES[size], run_before=_settled)


@pytest.mark.parametrize("size", SIZES)
def test_run_screen(snap_compare: Any, store: Path, size: str) -> None:
    app = _app(store, "run", run_id=_ids(store)["candidate"])
    assert snap_compare(app, terminal_size=SIZES[size], run_before=_settled)


@pytest.mark.parametrize("size", SIZES)
def test_compare_screen(snap_compare: Any, store: Path, size: str) -> None:
    ids = _ids(store)
    app = _app(store, "compare", compare_ids=[ids["baseline"], ids["candidate"]])
    assert snap_compare(app, terminal_size=SIZES[size], run_before=_settled)


@pytest.mark.parametrize("size", SIZES)
def test_help_screen(snap_compare: Any, store: Path, size: str) -> None:
    async def help_open(pilot: Any) -> None:
        await _settled(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(_app(store, "runs"), terminal_size=SIZES[size], run_before=help_open)


@pytest.mark.parametrize("size", SIZES)
def test_runs_screen_without_a_store(snap_compare: Any, tmp_path: Path, size: str,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # a relative path, so the message on screen is the same wherever the test runs
    monkeypatch.chdir(tmp_path)
    assert snap_compare(_app(Path("no-store-yet.duckdb"), "runs"), terminal_size=SIZES[size], run_before=_settled)


RECORDING_TICKS = 23  # gpu1 is lost at tick 20: the frozen screen shows it LOST


def _frozen_live_app(db: Path) -> Any:
    """The app on a live screen fed with a fixed stretch of the synthetic recording."""
    from gpuscope.collectors.base import Sample
    from gpuscope.collectors.replay import load_recording
    from gpuscope.sinks.memory import LiveSnapshot
    from gpuscope.tui.screens.live import LiveScreen

    from conftest import FIXTURES

    rec = load_recording(FIXTURES / "recordings" / "synthetic_h100_a100.jsonl")
    rows: dict[str, list[Sample]] = {}
    for tick in rec.ticks[:RECORDING_TICKS]:
        for r in tick:
            rows.setdefault(r["device"], []).append(Sample(r["device"], r["ts_ns"], r["values"], bool(r.get("lost"))))
    snap = LiveSnapshot(tuple(rec.devices), {k: tuple(v) for k, v in rows.items()}, RECORDING_TICKS,
                        RECORDING_TICKS - 1, (), rec.interval_s)

    class Frozen:
        def snapshot(self) -> LiveSnapshot:
            return snap

    class FrozenLiveScreen(LiveScreen):
        def _start_sampler(self) -> None:  # the worker thread: the recorded rows instead of a sampler
            with self._lock:
                self._buffer = Frozen()
            self._from_thread(self._started, list(rec.devices), [])
            for _ in range(200):  # the cards mount after _started returns
                if self._cards and all(c.is_mounted for c in self._cards.values()):
                    break
                time.sleep(0.01)
            self._from_thread(self._refresh_values)

    return _app(db, "live", screens={"live": FrozenLiveScreen}, interval_s=0.1)


@pytest.mark.parametrize("size", SIZES)
def test_live_screen(snap_compare: Any, store: Path, size: str) -> None:
    assert snap_compare(_frozen_live_app(store), terminal_size=SIZES[size], run_before=_settled)
