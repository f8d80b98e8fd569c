"""Sinks that keep rows in memory: :class:`LiveBuffer` (the newest rows per device, for a
live view: the status line of ``gpuscope run``, the coming TUI and ``monitor``) and
:class:`MemorySink` (everything a test wants to look at)."""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from ..collectors.base import Degradation, DeviceInfo, Sample
from .base import SampleBatch, SamplerInfo, SamplerStats, Sink

__all__ = ["LiveBuffer", "LiveSnapshot", "MemorySink"]


@dataclass(frozen=True)
class LiveSnapshot:
    """A consistent copy of a :class:`LiveBuffer` at one moment: nothing in it changes
    afterwards, whatever the sampler does."""

    #: the devices the sampler found at start (empty before start)
    devices: tuple[DeviceInfo, ...]
    #: device key -> its newest samples, oldest first (at most ``maxlen``)
    samples: dict[str, tuple[Sample, ...]]
    #: ticks seen so far (a tick may carry no row for a device)
    ticks: int
    #: the index of the newest tick seen (schedule slots count from 0), None before the first
    last_tick: int | None
    #: the newest degradations (at most ``maxlen``), oldest first
    degradations: tuple[Degradation, ...]
    #: the sampler's interval, None before start
    interval_s: float | None

    def latest(self) -> dict[str, Sample]:
        """The newest sample of each device."""
        return {k: v[-1] for k, v in self.samples.items() if v}


class LiveBuffer(Sink):
    """A bounded ring per device of the newest ``maxlen`` samples, for a viewer reading while the
    sampler writes: :meth:`snapshot` (from any thread) returns a :class:`LiveSnapshot` that is
    consistent (taken between two batches, never half of one). Memory stays bounded however long
    the session runs."""

    def __init__(self, maxlen: int = 600) -> None:
        if maxlen < 1:
            raise ValueError(f"maxlen must be at least 1, not {maxlen!r}")
        self.maxlen = maxlen
        self._lock = threading.Lock()
        self._rows: dict[str, deque[Sample]] = {}
        self._degradations: deque[Degradation] = deque(maxlen=maxlen)
        self._devices: tuple[DeviceInfo, ...] = ()
        self._interval_s: float | None = None
        self._ticks = 0
        self._last_tick: int | None = None
        self.stats: SamplerStats | None = None

    def start(self, info: SamplerInfo) -> None:
        with self._lock:
            self._devices = tuple(info.devices)
            self._interval_s = info.interval_s

    def write(self, batch: SampleBatch) -> None:
        with self._lock:
            self._degradations.extend(batch.degradations)
            for k, rows in batch.ticks:
                self._ticks += 1
                self._last_tick = k
                for s in rows:
                    ring = self._rows.get(s.device)
                    if ring is None:
                        ring = self._rows[s.device] = deque(maxlen=self.maxlen)
                    ring.append(s)

    def close(self, stats: SamplerStats) -> None:
        self.stats = stats

    def snapshot(self) -> LiveSnapshot:
        """A copy of the buffer as it is now; safe from any thread."""
        with self._lock:
            return LiveSnapshot(self._devices, {k: tuple(v) for k, v in self._rows.items()}, self._ticks,
                                self._last_tick, tuple(self._degradations), self._interval_s)

    def latest(self) -> dict[str, Sample]:
        """The newest sample of each device (what a status line shows); safe from any thread."""
        with self._lock:
            return {k: v[-1] for k, v in self._rows.items() if v}


class MemorySink(Sink):
    """Keeps the newest ``maxlen`` rows per device in memory, with every batch's tick indexes
    and degradations (tests, and callers that want all of it). Safe to read from another
    thread through :meth:`rows` / :meth:`latest`. A viewer wants :class:`LiveBuffer`."""

    def __init__(self, maxlen: int = 10_000) -> None:
        self.maxlen = maxlen
        self.info: SamplerInfo | None = None
        self.stats: SamplerStats | None = None
        self.batches = 0
        self.ticks: list[int] = []
        self.degradations: list[Degradation] = []
        self._rows: dict[str, deque[Sample]] = {}
        self._lock = threading.Lock()

    def start(self, info: SamplerInfo) -> None:
        self.info = info

    def write(self, batch: SampleBatch) -> None:
        with self._lock:
            self.batches += 1
            self.degradations.extend(batch.degradations)
            for k, rows in batch.ticks:
                self.ticks.append(k)
                for s in rows:
                    self._rows.setdefault(s.device, deque(maxlen=self.maxlen)).append(s)

    def close(self, stats: SamplerStats) -> None:
        self.stats = stats

    def rows(self, device: str) -> list[Sample]:
        with self._lock:
            return list(self._rows.get(device, ()))

    def latest(self) -> dict[str, Sample]:
        with self._lock:
            return {k: v[-1] for k, v in self._rows.items() if v}
