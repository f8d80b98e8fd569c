"""Recordings of samples, and the collector that plays them back.

A recording (``gpuscope record --out FILE``) is JSON Lines, gzip-compressed when the name ends
in ``.gz``. Format ``gpuscope.recording/1``:

- line 1, the header: ``{"format": "gpuscope.recording/1", "created_ns", "host",
  "gpuscope_version", "interval_s", "synthetic", "note", "metrics": {name: unit},
  "devices": [DeviceInfo dicts], "vendors": [VendorStatus dicts]}``;
- one line per row: ``{"tick": k, "device": key, "ts_ns": ..., "values": {metric: value}}``
  (values that were None are left out; ``"lost": true`` marks the tick a device was lost);
- optionally a last line ``{"end": true, "ticks", "rows", "stats"}``.

:class:`ReplayCollector` plays the rows back at their recorded cadence (``realtime``), or one
recorded tick per :meth:`~ReplayCollector.sample` call for tests and benchmarks, with the
timestamps moved to now so the recorded spacing is kept.
"""
from __future__ import annotations

import gzip
import io
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gpuscope.errors import InputError
from gpuscope.metrics import METRICS

from .base import Collector, DeviceInfo, Sample, VendorStatus, now_ns

__all__ = ["RECORDING_FORMAT", "Recording", "RecordingWriter", "ReplayCollector", "load_recording"]

RECORDING_FORMAT = "gpuscope.recording/1"
_KNOWN = {m.name for m in METRICS}


@dataclass
class Recording:
    """A loaded recording: its header, devices and rows grouped by tick."""

    path: Path
    header: dict[str, Any]
    devices: list[DeviceInfo]
    ticks: list[list[dict[str, Any]]] = field(default_factory=list)
    end: dict[str, Any] | None = None

    @property
    def interval_s(self) -> float:
        """The recorded sampling interval (from the header, else from the rows)."""
        v = self.header.get("interval_s")
        if isinstance(v, (int, float)) and v > 0:
            return float(v)
        if len(self.ticks) > 1:
            return (self.ticks[-1][0]["ts_ns"] - self.ticks[0][0]["ts_ns"]) / 1e9 / (len(self.ticks) - 1)
        return 0.1

    @property
    def rows(self) -> int:
        return sum(len(t) for t in self.ticks)


#: The most text a recording may hold once inflated: an hour of 9 devices at 100 Hz is ~1 GB;
#: a gzip bomb (or a link to /dev/zero's like) stops here instead of filling the memory.
MAX_RECORDING_TEXT_BYTES = 2 * 2**30


def _read_lines(path: Path) -> list[str]:
    """The recording's non-empty lines. Only a regular file is opened (a FIFO or a device given
    as ``--replay`` would block or never end), and at most :data:`MAX_RECORDING_TEXT_BYTES` of
    text are read."""
    from gpuscope.fileio import open_regular

    raw = open_regular(path, "recording file")
    try:
        binary: gzip.GzipFile | IO[bytes] = gzip.GzipFile(fileobj=raw, mode="rb") if path.name.endswith(".gz") else raw
        lines, size = [], 0
        for line in io.TextIOWrapper(binary, encoding="utf-8"):
            size += len(line)
            if size > MAX_RECORDING_TEXT_BYTES:
                raise InputError(str(path), f"holds more than {MAX_RECORDING_TEXT_BYTES // 2**30} GiB of text: "
                                            "not a gpuscope recording")
            if line.strip():
                lines.append(line)
        return lines
    finally:
        raw.close()


def load_recording(path: str | Path) -> Recording:
    """Read a recording; :class:`~gpuscope.errors.InputError` when it is not one."""
    path = Path(path)
    try:
        lines = _read_lines(path)
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise InputError(str(path), f"cannot read the recording ({exc})") from None
    if not lines:
        raise InputError(str(path), "empty file, not a gpuscope recording")
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError as exc:
        raise InputError(str(path), f"not a gpuscope recording (line 1: {exc.msg})") from None
    if not isinstance(header, dict) or header.get("format") != RECORDING_FORMAT:
        raise InputError(str(path), f"not a gpuscope recording (expected format {RECORDING_FORMAT!r} on line 1)")
    devices = [DeviceInfo.from_dict(d) for d in header.get("devices") or []]
    by_tick: dict[int, list[dict[str, Any]]] = {}
    end = None
    for n, line in enumerate(lines[1:], start=2):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            if n == len(lines):  # a recorder killed mid-line: keep what came before
                break
            raise InputError(str(path), f"line {n}: {exc.msg}") from None
        if row.get("end"):
            end = row
            continue
        if not isinstance(row.get("ts_ns"), int) or not isinstance(row.get("device"), str):
            raise InputError(str(path), f"line {n}: a row needs an integer ts_ns and a device key")
        values = row.get("values") or {}
        row["values"] = {k: v for k, v in values.items() if k in _KNOWN}
        by_tick.setdefault(int(row.get("tick", n)), []).append(row)
    ticks = [by_tick[k] for k in sorted(by_tick)]
    return Recording(path, header, devices, ticks, end)


def gpus_only(path: str | Path) -> Recording:
    """The recording at ``path`` without its host device and rows: its GPUs stand in for this
    machine's while the host shown is this one (``gpuscope run --replay``, ``gpuscope tui
    --replay``)."""
    rec = load_recording(path)
    hosts = {d.key for d in rec.devices if d.kind == "host"}
    ticks = [[r for r in tick if r.get("device") not in hosts] for tick in rec.ticks]
    return Recording(rec.path, rec.header, [d for d in rec.devices if d.key not in hosts],
                     [t for t in ticks if t], rec.end)


class RecordingWriter:
    """Writes a recording: the header at construction, rows as they come, an end line at close.

    The file is written under a fresh temporary name beside ``path`` (``O_EXCL|O_NOFOLLOW``,
    0600: :class:`gpuscope.fileio.AtomicWriter`) and renamed to ``path`` at :meth:`close`, so
    that a link planted at ``path`` or at a guessable temporary name is never written through
    and a reader never sees half a file; :meth:`discard` (or a failed close) removes it. An
    existing ``path`` is replaced at close: callers check first (``record`` asks for ``--force``)."""

    def __init__(self, path: str | Path, devices: list[DeviceInfo], *, interval_s: float,
                 vendors: list[VendorStatus] | None = None, synthetic: bool = False, note: str | None = None,
                 header: dict[str, Any] | None = None) -> None:
        from gpuscope import __version__
        from gpuscope.machine import hostname

        from gpuscope.fileio import AtomicWriter

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._out = AtomicWriter(self.path)
        self._gz: gzip.GzipFile | None = None
        try:
            raw: gzip.GzipFile | IO[bytes] = self._out.file
            if self.path.name.endswith(".gz"):
                self._gz = gzip.GzipFile(filename="", fileobj=self._out.file, mode="wb")
                raw = self._gz
            self._f = io.TextIOWrapper(raw, encoding="utf-8")
        except BaseException:
            self._out.discard()
            raise
        self._closed = False
        self.ticks = 0
        self.rows = 0
        header_overrides = dict(header or {})
        header = {
            "format": RECORDING_FORMAT,
            "created_ns": now_ns(),
            "host": hostname(),
            "gpuscope_version": __version__,
            "interval_s": interval_s,
            "synthetic": synthetic,
            "note": note,
            "metrics": {m.name: m.otel_unit for m in METRICS},
            "devices": [d.to_dict() for d in devices],
            "vendors": [v.to_dict() for v in vendors or []],
        }
        header.update(header_overrides)
        try:
            self._f.write(json.dumps(header, separators=(",", ":")) + "\n")
        except BaseException:
            self.discard()
            raise

    def write_tick(self, tick: int, rows: list[Sample]) -> None:
        for s in rows:
            row: dict[str, Any] = {"tick": tick, "device": s.device, "ts_ns": int(s.ts_ns),
                                   "values": {k: v for k, v in s.values.items() if v is not None}}
            if s.lost:
                row["lost"] = True
            self._f.write(json.dumps(row, separators=(",", ":")) + "\n")
            self.rows += 1
        self.ticks = max(self.ticks, tick + 1)

    def close(self, stats: dict[str, Any] | None = None) -> None:
        """Write the end line and rename the file into place; on any failure nothing is kept."""
        if self._closed:
            return
        self._closed = True
        try:
            self._f.write(json.dumps({"end": True, "ticks": self.ticks, "rows": self.rows, "stats": stats or {}},
                                     separators=(",", ":"), default=str) + "\n")
            self._f.flush()
            self._f.detach()  # the wrapper lets go of the file without closing it: commit closes it
            if self._gz is not None:
                self._gz.close()  # the gzip trailer; the file underneath stays open
            self._out.commit()
        except BaseException:
            self._out.discard()
            raise

    def discard(self) -> None:
        """Give the recording up: its temporary is removed, ``path`` untouched."""
        if self._closed:
            return
        self._closed = True
        self._out.discard()


class ReplayCollector(Collector):
    """Plays a recording back.

    ``realtime``: each :meth:`sample` returns the rows whose recorded time (relative to the
    first tick, divided by ``speed``) has come since :meth:`open`; otherwise each call returns
    the next recorded tick. Timestamps are moved to now, keeping the recorded spacing.
    ``loop`` starts over at the end; else :attr:`done` turns True and sample returns ``[]``.
    """

    source = "replay"

    def __init__(self, recording: str | Path | Recording, *, realtime: bool = True, speed: float = 1.0,
                 loop: bool = False) -> None:
        super().__init__()
        self._arg = recording
        self.realtime = realtime
        self.speed = speed if speed > 0 else 1.0
        self.loop = loop
        self.recording: Recording | None = None
        self._next = 0
        self._base_ns = 0
        self._t0_rec = 0
        self._span_ns = 0
        self._start_mono = 0.0
        self._pass = 0
        self.done = False

    @property
    def interval_s(self) -> float:
        """The recorded interval (the cadence to drive this collector at)."""
        rec = self.recording
        return rec.interval_s / self.speed if rec else 0.1

    def _open(self) -> list[DeviceInfo]:
        rec = self._arg if isinstance(self._arg, Recording) else load_recording(self._arg)
        self.recording = rec
        if not rec.ticks:
            self.done = True
        else:
            self._t0_rec = rec.ticks[0][0]["ts_ns"]
            self._span_ns = rec.ticks[-1][0]["ts_ns"] - self._t0_rec + int(rec.interval_s * 1e9)
        self._base_ns = now_ns()
        self._start_mono = time.monotonic()
        devices = []
        for d in rec.devices:
            d = DeviceInfo.from_dict(d.to_dict())
            d.properties = {**d.properties, "replay_of": str(rec.path)}
            d.source = "replay"
            d.lost = False
            devices.append(d)
        self.status = VendorStatus("replay", True, "recording", details={"path": str(rec.path),
                                                                         "synthetic": rec.header.get("synthetic")})
        return devices

    def _rows(self, tick: list[dict[str, Any]]) -> list[Sample]:
        offset = self._pass * self._span_ns
        out = []
        for r in tick:
            rel = (r["ts_ns"] - self._t0_rec + offset) / self.speed
            out.append(Sample(r["device"], self._base_ns + int(rel), dict(r["values"]), lost=bool(r.get("lost"))))
        return out

    def _ticks_due(self) -> Iterator[list[dict[str, Any]]]:
        rec = self.recording
        assert rec is not None
        elapsed_ns = (time.monotonic() - self._start_mono) * 1e9 * self.speed
        while not self.done:
            if self._next >= len(rec.ticks):
                if not self.loop:
                    self.done = True
                    return
                self._next = 0
                self._pass += 1
            tick = rec.ticks[self._next]
            rel = tick[0]["ts_ns"] - self._t0_rec + self._pass * self._span_ns
            if self.realtime and rel > elapsed_ns:
                return
            self._next += 1
            if self._next >= len(rec.ticks) and not self.loop:
                self.done = True  # the last tick is out: a sampler driving this can stop now
            yield tick
            if not self.realtime:
                return

    def sample(self) -> list[Sample]:
        if self.recording is None or self.done:
            return []
        out: list[Sample] = []
        for tick in self._ticks_due():
            out.extend(self._rows(tick))
        return out
