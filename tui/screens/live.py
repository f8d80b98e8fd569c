"""The live screen: every GPU on the machine and the host, refreshed every ``app.interval_s``.

Telemetry comes from :class:`gpuscope.sampling.Sampler` writing into a
:class:`gpuscope.sinks.LiveBuffer`; the screen reads only :meth:`LiveBuffer.snapshot`. The
sampler is built and started in a thread worker (opening NVML / AMD SMI never runs on the UI
thread) and has its own threads; it is stopped when the screen goes away (quit). With
``app.replay`` the GPUs are a recording played in a loop and the host is this machine, as in
``gpuscope run --replay``.

Each device is a :class:`~gpuscope.tui.widgets.live_device.DeviceCard` built once; a refresh
feeds the new samples to the cards' histories and changes only the values that changed. What
is missing says why: a vendor that is not here (the reasons ``gpuscope devices`` gives), a
metric the device does not have (``DeviceInfo.unsupported``) or could not read now (the
sampler's degradations), a lost device, processes a vendor does not report.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.events import Resize
from textual.message import Message
from textual.widgets import Footer, Header, Static

from gpuscope.collectors.base import WatchedProcesses

from ..text import safe_text
from .base import GpuscopeScreen
from ..widgets.live_chart import MAX_PLOT_ROWS, MIN_PLOT_ROWS
from ..widgets.live_device import GPU_CELLS, HOST_CELLS, DeviceCard
from ..widgets.live_history import bucket_seconds

#: Rows kept per device between two refreshes (a refresh reads only what is new).
BUFFER_ROWS = 64
#: The width one metric cell wants; the cards put as many side by side as fit (2 at 80 columns).
CELL_COLUMNS_WIDTH = 40


class AllProcesses(WatchedProcesses):
    """Every process on the machine, as the processes the sampler watches: the GPU collectors report
    the processes using each GPU among the pids they are given. Re-listed at most once a
    second (a directory listing), in the sampler's thread."""

    def __init__(self, refresh_s: float = 1.0) -> None:
        self.refresh_s = refresh_s
        self._pids: frozenset[int] = frozenset()
        self._last = -1e18

    def pids(self) -> frozenset[int]:
        """Every pid this process can list (re-listed at most every ``refresh_s``)."""
        now = time.monotonic()
        if now - self._last >= self.refresh_s:
            self._last = now
            try:
                import psutil

                self._pids = frozenset(psutil.pids())
            except Exception:  # no psutil, or /proc unreadable: no per-process rows
                self._pids = frozenset()
        return self._pids


def process_name(pid: int) -> str:
    """A process's short name (Linux ``/proc/PID/comm``), ``?`` when it cannot be read."""
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip() or "?"
    except OSError:
        return "?"


class SamplerStarted(Message, bubble=False):
    """The live screen's worker started the sampler: its ``devices`` and the ``vendors``' statuses."""

    def __init__(self, devices: list[Any], vendors: list[Any]) -> None:
        super().__init__()
        self.devices = devices
        self.vendors = vendors


class SamplerFailed(Message, bubble=False):
    """The sampler could not start: ``why``, shown on the screen (the other screens work)."""

    def __init__(self, why: str) -> None:
        super().__init__()
        self.why = why


class LiveScreen(GpuscopeScreen):
    """Live telemetry of every GPU and the host."""

    BINDINGS = [Binding("p", "profile_window", "profile now")]

    DEFAULT_CSS = """
    LiveScreen #live-status { height: auto; padding: 0 1; }
    LiveScreen #live-devices { height: 1fr; padding: 0 1; }
    LiveScreen .no-gpu { height: auto; }
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._sampler: Any = None
        self._buffer: Any = None
        self._closing = False
        self._cards: dict[str, DeviceCard] = {}
        self._shown_ts: dict[str, int | None] = {}
        self._reasons: dict[str | None, dict[str | None, str]] = {}
        self._names: dict[int, str] = {}
        self._columns = 2
        #: plot rows of the cards' large charts (0: none; set by the room the screen has)
        self.plot_rows = 0
        #: refreshes done since the devices were shown (tests wait on it)
        self.refreshes = 0
        #: the vendors' statuses once the sampler started (None before)
        self.vendors: list[Any] | None = None
        #: why the sampler could not start (None while it runs)
        self.failure: str | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("starting the telemetry sampler…", id="live-status", classes="status", markup=False)
        yield VerticalScroll(id="live-devices")
        yield Footer()

    def on_mount(self) -> None:
        self._apply_columns()
        self.run_worker(self._start_sampler, thread=True, group="live-sampler", exit_on_error=False,
                        name="live sampler start")
        self.set_interval(float(self.app.interval_s), self._refresh_values)

    def on_unmount(self) -> None:
        self.stop_sampler()

    # -- the sampler (its start in a worker thread) ----------------------------------------
    def _start_sampler(self) -> None:
        from gpuscope.pipeline import build_sampler
        from gpuscope.sinks import LiveBuffer

        interval = float(self.app.interval_s)
        replay = self.app.replay
        buffer = LiveBuffer(maxlen=BUFFER_ROWS)
        try:
            # the host row without a process tree (the host's own CPU and memory); on this
            # machine's GPUs every pid goes to the collectors so that they name the processes
            # using each GPU (a recording's GPUs name none)
            sampler = build_sampler([buffer], interval_s=interval, batch_s=min(0.5, interval),
                                    replay=Path(replay) if replay is not None else None,
                                    watch=AllProcesses() if replay is None else None)
            sampler.start()
        except Exception as exc:  # shown on the screen, the app goes on (the other screens work)
            self.post_message(SamplerFailed(f"{type(exc).__name__}: {exc}"))
            return
        with self._lock:
            closing = self._closing
            if not closing:
                self._sampler, self._buffer = sampler, buffer
        if closing:  # the screen went away while the sampler was starting
            sampler.stop()
            return
        self.post_message(SamplerStarted(list(sampler.devices), list(sampler.vendors)))

    def _from_thread(self, fn: Any, *args: Any) -> None:
        """``fn(*args)`` on the UI thread, waited for, from a thread (a test's stand-in sampler
        feeds the screen so); nothing when the app is gone."""
        try:
            self.app.call_from_thread(fn, *args)
        except Exception:  # the app is gone: nothing to show it on
            pass

    def action_profile_window(self) -> None:
        """``p``: a profiler window now in the newest run that is recording (``gpuscope profile``)."""
        from ..windows import start_window_request

        start_window_request(self, None)

    def stop_sampler(self) -> None:
        """Stop the sampler (its threads end; the collectors are closed). Safe to call twice."""
        with self._lock:
            self._closing = True
            sampler, self._sampler, self._buffer = self._sampler, None, None
        if sampler is not None:
            sampler.stop()

    # -- building the cards once ---------------------------------------------------------------
    @on(SamplerFailed)
    def _sampler_failed(self, failed: SamplerFailed) -> None:
        self._failed(failed.why)

    @on(SamplerStarted)
    def _sampler_started(self, started: SamplerStarted) -> None:
        self._started(started.devices, started.vendors)

    def _failed(self, why: str) -> None:
        self.failure = why
        self.query_one("#live-status", Static).update(f"live telemetry could not start: {safe_text(why)}")

    def _status_text(self, devices: list[Any], vendors: list[Any]) -> str:
        gpus = [d for d in devices if d.kind != "host"]
        lines = []
        replay = self.app.replay
        if replay is not None:
            lines.append(f"replay {Path(replay).name}: {len(gpus)} GPU{'' if len(gpus) == 1 else 's'}, looped; "
                         "host: this machine")
        if gpus:  # without a GPU the reasons are where the GPUs would be
            for v in vendors:
                if v.vendor == "replay" or v.vendor == "host":
                    continue
                lines.append(f"{v.vendor}: found via {v.backend}" if v.available else f"{v.vendor}: {v.reason}")
        # the recording's file name, the vendors' reasons: shown with their control characters visible
        return "\n".join(safe_text(line) for line in lines)

    def _started(self, devices: list[Any], vendors: list[Any]) -> None:
        self.vendors = vendors
        interval = float(self.app.interval_s)
        self.sub_title = f"live · every {interval:g} s · sparklines: last {bucket_seconds(interval) * 2:g} min"
        status = self.query_one("#live-status", Static)
        text = self._status_text(devices, vendors)
        status.update(text)
        status.display = bool(text)
        box = self.query_one("#live-devices", VerticalScroll)
        bucket = bucket_seconds(interval)
        widgets: list[Any] = []
        hosts = [d for d in devices if d.kind == "host"]
        if not hosts:
            why = next((v.reason for v in vendors if v.vendor == "host" and not v.available), None)
            widgets.append(Static(f"host: {safe_text(why or 'no host telemetry')}", id="host-missing", markup=False))
        for d in hosts + [d for d in devices if d.kind != "host"]:
            card = DeviceCard(d, HOST_CELLS if d.kind == "host" else GPU_CELLS, bucket,
                              processes=d.kind != "host", columns=self._columns)
            self._cards[d.key] = card
            self._shown_ts[d.key] = -1  # nothing shown yet: the first refresh shows "waiting"
            widgets.append(card)
        if not any(d.kind != "host" for d in devices):
            reasons = [safe_text(f"  {v.vendor}: {v.reason}") for v in vendors
                       if not v.available and v.vendor not in ("host", "replay")]
            widgets.append(Static("\n".join(["no GPU found on this machine; showing the host only", *reasons]),
                                  id="no-gpu", classes="no-gpu", markup=False))
        box.mount_all(widgets)
        # the charts' height needs the cards laid out in the box
        self.call_after_refresh(self._fit_charts)

    def on_resize(self, event: Resize) -> None:
        self._apply_columns()
        # the box has its new size once the screen is laid out again
        self.call_after_refresh(self._fit_charts)

    def _fit_charts(self) -> None:
        """Large history charts when the terminal has room for them: the tallest charts (every
        card's alike) with which every card fits the box without scrolling; none (the cells'
        one-line sparklines) when even :data:`MIN_PLOT_ROWS` rows do not fit (80x24 with two
        GPUs, eight GPUs at 160x48)."""
        cards = [c for c in self._cards.values() if c.is_mounted]
        if not cards:
            return
        box = self.query_one("#live-devices", VerticalScroll)
        width = box.size.width - box.styles.gutter.width
        others = sum(w.outer_size.height for w in box.children if not isinstance(w, DeviceCard) and w.display)
        room = box.size.height - box.styles.gutter.height - others
        if width <= 0 or room <= 0:
            return
        rows = 0
        if any(c.chart_rows_at(width) for c in cards):
            for r in range(MAX_PLOT_ROWS, MIN_PLOT_ROWS - 1, -1):
                if sum(c.rows_at(width, r) for c in cards) <= room:
                    rows = r
                    break
        self.plot_rows = rows
        for card in cards:
            card.set_plot_rows(rows)

    def _apply_columns(self) -> None:
        """As many metric cells side by side as the width takes (2 at 80 columns, 4 at 160)."""
        n = max(1, min(4, self.size.width // CELL_COLUMNS_WIDTH))
        self._columns = n
        for card in self._cards.values():
            card.set_columns(n)

    # -- every refresh: only the values ------------------------------------------------------
    def _refresh_values(self) -> None:
        buffer = self._buffer
        if buffer is None or not self._cards:
            return
        snap = buffer.snapshot()
        for g in snap.degradations:
            self._reasons.setdefault(g.device, {})[g.metric if g.phase != "lost" else None] = g.reason
        for key, card in self._cards.items():
            if not card.is_mounted:
                continue
            newest = card.feed(snap.samples.get(key, ()))
            ts = newest.ts_ns if newest is not None else None
            if ts is not None and ts == self._shown_ts.get(key):
                continue
            self._shown_ts[key] = ts
            card.show(newest, self._reasons.get(key, {}), proc_names=self._proc_names(card))
        self.refreshes += 1

    def _proc_names(self, card: DeviceCard) -> dict[int, str]:
        for pid in card.pids():
            if pid not in self._names:
                self._names[pid] = process_name(pid)
        return self._names
